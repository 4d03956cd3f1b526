"""``charfmt._redact``: the one redaction every door of charfmt applies (server answers, logs, the console, chat)."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from conftest import TESTS
from hypothesis import given
from hypothesis import strategies as st

from charfmt._redact import HIDDEN, Redactor, redact

CASES = tomllib.loads((TESTS / "redact_cases.toml").read_text(encoding="utf-8"))["case"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_each_text_is_shown_as_the_table_says(case: dict[str, Any]) -> None:
    assert redact(case["text"], case.get("secrets", ())) == case["shown"]


SECRET = st.text(st.characters(codec="utf-8", exclude_characters="*", exclude_categories=("Cs",)), min_size=8)
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)


@given(prefix=TEXT, secret=SECRET, suffix=TEXT)
def test_a_known_secret_is_never_shown_whatever_surrounds_it(prefix: str, secret: str, suffix: str) -> None:
    """Wherever a known secret stands, whatever it is made of, it is gone, and so is its beginning."""
    shown = Redactor([secret])(prefix + secret + suffix)
    assert secret not in shown and secret[:8] not in shown
    assert HIDDEN in shown


@given(text=TEXT)
def test_redacting_twice_is_redacting_once(text: str) -> None:
    once = redact(text)
    assert redact(once) == once
