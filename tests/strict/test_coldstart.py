"""What a cold start's first strict parse of a valid reply loads and compiles, in a fresh interpreter.

Issue 41 asks ``import charfmt`` plus that parse to cost little more than pydantic's own import
(``benchmarks/bench_coldstart.py`` measures it; ``docs/PERFORMANCE.md`` has the figures). These
tests keep what that work took off the path off it: the modules only an invalid reply, a
vocabulary or the compiled twin needs, and the regular expressions only an error path uses.
What each one still does where it is needed is the other tests' business (``test_fast_path.py``,
the lexical module's tests, the case files).
"""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT

REPLY = json.dumps(
    {
        "chats": [
            {"type": "C", "order": 1, "body": "<emo>joy</emo>\n<act>looks away</act>\n<msg>Fine. 3.5 stars.✨</msg>"},
            {"type": "C", "order": 2, "body": "<emo>shy</emo>\n<thought>もう、知らないっ！</thought>"},
            {"type": "E", "order": 3, "body": "Mio joined the party."},
        ]
    },
    ensure_ascii=False,
)

NOT_ON_THE_PATH = (
    "charfmt._grammar._lalr",  # the generated LALR tables: the full pass's
    "charfmt._strict.lalr",  # the LALR driver: the full pass's
    "charfmt._strict.reply",  # the full pass
    "charfmt._strict.diagnosis",  # why a body is invalid
    "charfmt._twin",  # the compiled twin's check: after WARM_UP characters
    "charfmt.vocabulary",  # the vocabulary policy: a parse told a vocabulary
    "charfmt.events",  # Reply.events()
    "array",  # a long source's newline index (diagnostics.line_col)
    "lark",
)


def _first_parse(code: str = "") -> dict[str, object]:
    """What a fresh interpreter holds after ``import charfmt`` and the first strict parse of ``REPLY``."""
    script = (
        "import json, re, sys\n"
        "import charfmt\n"
        f"reply = charfmt.parse({REPLY!r})\n"
        "assert len(reply.chats) == 3 and not reply.diagnostics\n"
        "from charfmt._grammar import lexical\n"
        f"{code}"
        "print(json.dumps({'modules': sorted(sys.modules),\n"
        "                  'patterns': sorted(str(p.pattern) for p in re._cache.values() if hasattr(p, 'pattern')),\n"
        "                  'not_text_char': 'NOT_TEXT_CHAR' in vars(lexical)}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60, check=True
    )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_the_first_parse_of_a_valid_reply_loads_only_what_it_runs() -> None:
    modules = _first_parse()["modules"]
    assert isinstance(modules, list)
    assert [name for name in NOT_ON_THE_PATH if name in modules] == []


def test_the_first_parse_compiles_no_error_paths_pattern() -> None:
    """No class of lone surrogates compiled but the fast path's own (one per ``TEXT`` or ``KEY``, not three)."""
    state = _first_parse()
    patterns = state["patterns"]
    assert isinstance(patterns, list)
    classes = sum(p.count("\\ud800-\\udfff") + p.count("\ud800-\udfff") + p.count("\\udc80") for p in patterns)
    assert classes == 5, patterns  # the C body's pattern (KEY, TEXT for act, msg, thought), the I/E body's (TEXT)
    assert not state["not_text_char"], "lexical.NOT_TEXT_CHAR is compiled on first use"


def test_what_loads_later_is_there_when_asked_for() -> None:
    """The lazy names resolve, from the module and by ``from ... import``; an unknown one is still an error."""
    code = (
        "from charfmt._grammar.lexical import NOT_TEXT_CHAR\n"
        "assert NOT_TEXT_CHAR.search('a\\x00') and not NOT_TEXT_CHAR.search('a\\tb')\n"
        "assert lexical.NOT_TEXT_CHAR is NOT_TEXT_CHAR\n"
        "try:\n"
        "    lexical.NOT_A_NAME\n"
        "except AttributeError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('an unknown name resolved')\n"
        'assert charfmt.parse(\'{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>"}]}\',\n'
        "                     vocabulary=charfmt.Vocabulary.of('Joy')).chats[0].segments[0].text == 'Joy'\n"
        "try:\n"
        '    charfmt.parse(\'{"chats":[{"type":"C","order":1,"body":"<emo>joy</msg>"}]}\')\n'
        "except charfmt.ParseError as e:\n"
        "    assert [d.code for d in e.diagnostics] == ['CF205'], e.diagnostics\n"
        "else:\n"
        "    raise AssertionError('parsed')\n"
    )
    modules = _first_parse(code)["modules"]
    assert isinstance(modules, list)
    assert {"charfmt.vocabulary", "charfmt._strict.reply", "charfmt._strict.lalr"} <= set(modules)
