"""Lazy start: ``import charfmt`` and a strict parse of valid input load neither Lark nor Jinja.

Each start-up check runs in a fresh interpreter (this suite's own process has long imported
everything). The cached LALR tables (``charfmt/_grammar/_lalr.py``) are checked against a fresh
build from the grammar, and the parser built from them against the one Lark builds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import charfmt
from charfmt._grammar import rules, static
from charfmt._grammar import tables as _tables
from charfmt._grammar.lexical import BadEntity
from charfmt._strict.lalr import Driver, Reject
from charfmt.testing import bodies, texts

PACKAGE_ROOT = Path(charfmt.__file__).resolve().parent.parent

LAZY = (
    "lark",
    "jinja2",
    "charfmt.prompt.render",
    "charfmt.constrain.export",
    "charfmt.stream",
    "charfmt.speech",
    "charfmt.prompt.userinput",
    "charfmt.prompt.character",
    "charfmt._lenient.recovery",
    "charfmt.constrain.schema",
    "charfmt._strict_c",
)
"""What a strict parse of valid input must not load (the compiled strict reader: ``parse`` looks for
it after a megabyte, ``charfmt.parser.WARM_UP``)."""

VALID = [
    {"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo>\n<msg>Hi!</msg>"}]},
    {
        "chats": [
            {"type": "I", "order": 1, "body": "Quest &quot;Lost&quot; updated &#x1F389;"},
            {"type": "C", "order": 2, "body": "<emo>sad</emo>\n<act>looks away</act>\n<msg>a &lt; b &amp; c</msg>"},
            {"type": "E", "order": 3, "body": "It rains."},
            {"type": "C", "order": 4, "body": "<thought>hmm</thought>\n<msg></msg>\n<act>sits</act>"},
        ]
    },
]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=PACKAGE_ROOT,
        timeout=120,
        check=False,
    )


def _loaded_after(code: str) -> set[str]:
    """The modules of ``LAZY`` (and their submodules) loaded after running ``code`` in a fresh interpreter."""
    done = _python(
        f"{code}\nimport sys, json\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('lark', 'jinja2') "
        f"or m in {LAZY!r})))"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_import_loads_neither_lark_nor_jinja() -> None:
    assert _loaded_after("import charfmt") == set()


def test_the_cli_starts_without_lark_or_jinja() -> None:
    """``charfmt parse`` and ``charfmt schema`` start fast; grammar and render commands load what they use."""
    assert _loaded_after("import charfmt.cli") == {"charfmt.constrain.schema"}


@pytest.mark.parametrize("reply", VALID, ids=["one chat", "every type and tag"])
def test_a_strict_parse_of_valid_input_loads_only_the_parser(reply: dict[str, object]) -> None:
    text = json.dumps(reply, ensure_ascii=False)
    code = f"import charfmt\nr = charfmt.parse({text!r})\nassert r.chats and not r.diagnostics, r\n"
    assert _loaded_after(code) == set()
    # nor the 13 event classes (``Reply.events()`` loads them): defining them was 4 ms of a cold start
    assert _python(f"{code}import sys\nassert 'charfmt.events' not in sys.modules").returncode == 0
    assert _loaded_after(code.replace("charfmt.parse(", "charfmt.parse(lenient=True, text=")) == set()


def test_an_invalid_body_loads_lark_for_its_diagnostic() -> None:
    """Laziness costs nothing in quality: the first invalid body still gets its precise code."""
    text = json.dumps({"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo><msg>hi</msg>"}]})
    code = (
        "import charfmt\n"
        "try:\n"
        f"    charfmt.parse({text!r})\n"
        "except charfmt.ParseError as e:\n"
        "    assert [d.code for d in e.diagnostics] == ['CF206'], e.diagnostics\n"
        "else:\n"
        "    raise AssertionError('parsed')\n"
    )
    assert "lark" in _loaded_after(code)


def test_every_public_name_resolves_in_a_fresh_interpreter() -> None:
    code = (
        "import charfmt, importlib\n"
        "missing = [n for n in charfmt.__all__ if n not in dir(charfmt)]\n"
        "assert not missing, missing\n"
        "for name in charfmt.__all__:\n"
        "    home = importlib.import_module('charfmt.' + charfmt._HOME[name])\n"
        "    assert getattr(charfmt, name) is getattr(home, name), name\n"
        "ns = {}\n"
        "exec('from charfmt import *', ns)\n"
        "assert set(charfmt.__all__) <= set(ns), set(charfmt.__all__) - set(ns)\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_public_names_and_their_homes_agree() -> None:
    assert set(charfmt._HOME) == set(charfmt.__all__)
    assert sorted(charfmt.__all__) == sorted(set(charfmt.__all__))


def test_submodules_are_attributes_and_unknown_names_are_not() -> None:
    done = _python("import charfmt\nassert charfmt.render.render_text is charfmt.render_text\nprint(charfmt.cli.main)")
    assert done.returncode == 0, done.stderr[-3000:]
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        _ = charfmt.no_such_name
    with pytest.raises(AttributeError):
        _ = charfmt.__no_such_dunder__


# --- the cached tables --------------------------------------------------------------


def test_the_cached_tables_match_the_grammar() -> None:
    """``charfmt/_grammar/_lalr.py`` is what ``python -m charfmt._grammar.tables`` writes for today's grammar."""
    cached = Path(_tables.CACHE_FILE).read_text(encoding="utf-8")
    assert cached == _tables.generate(), (
        "the grammar changed: run `python -m charfmt._grammar.tables` and commit the result"
    )


def test_the_cache_is_used_only_for_its_own_grammar() -> None:
    grammar = rules.full_grammar_text()
    assert _tables.cached(grammar) is not None
    assert _tables.cached_terminals(grammar) is not None
    edited = grammar + "\n// a user's edit\n"
    assert _tables.cached(edited) is None
    assert _tables.cached_terminals(edited) is None


def test_cached_terminals_are_larks() -> None:
    lark = rules.lark_parser()
    cached = _tables.cached_terminals(rules.full_grammar_text())
    assert cached == {t.name: t.pattern.to_regexp() for t in lark.terminals}
    assert static.static_terminals() == {t.name: t.pattern.to_regexp() for t in static.static_lark().terminals}, (
        "the static part's terminals"
    )


_CACHE = _tables.cached(rules.full_grammar_text())
_FROM_CACHE = None if _CACHE is None else Driver.from_cache(_CACHE)
_FROM_LARK = Driver(rules.lark_parser())


def _outcome(driver: Driver | None, text: str, start: str) -> object:
    assert driver is not None
    try:
        return driver.parse(text, start)
    except (Reject, BadEntity) as e:
        return type(e).__name__


_BODY_CHARS = st.sampled_from(["<emo>", "</emo>", "<msg>", "</msg>", "<act>", "</act>", "\n", "&amp;", "&", "<", "a"])


@given(
    st.one_of(
        bodies(),
        texts(min_size=1),
        st.lists(_BODY_CHARS, max_size=12).map("".join),
    ),
    st.sampled_from(["c_body", "text_body"]),
)
def test_the_cached_parser_equals_the_one_lark_builds(text: str, start: str) -> None:
    assert _outcome(_FROM_CACHE, text, start) == _outcome(_FROM_LARK, text, start)
