"""The role table (``charfmt.tags.ROLE_TABLE``): every role has one row, and a tag does what its row says."""

from __future__ import annotations

from typing import get_args

import pytest

from charfmt.tags import DEFAULT_TAGS, ROLE_TABLE, ROLES, Role, TagError, TagSpec, TagTable


def test_every_role_has_a_row() -> None:
    assert list(ROLE_TABLE) == list(get_args(Role))
    assert all(name == row.name for name, row in ROLE_TABLE.items())
    assert {name: row.description for name, row in ROLE_TABLE.items()} == ROLES


@pytest.mark.parametrize("role", get_args(Role))
def test_a_tag_does_what_its_row_says(role: Role) -> None:
    row = ROLE_TABLE[role]
    spec = TagSpec("x", role, "a tag")
    assert (spec.content, spec.streamed, spec.shown) == (row.content, row.streamed, row.shown)
    if row.closed_values:
        assert TagSpec("x", role, "a tag", values=("a",)).content == "key"
    else:
        with pytest.raises(TagError, match="closed list of values"):
            TagSpec("x", role, "a tag", values=("a",))


def test_the_default_table_keeps_every_rows_count() -> None:
    for role, row in ROLE_TABLE.items():
        count = len(DEFAULT_TAGS.with_role(role))
        assert count >= row.least and (row.most is None or count <= row.most), role


def test_a_table_breaking_a_rows_count_is_refused() -> None:
    emo, msg = TagSpec("emo", "emotion", "e"), TagSpec("msg", "speech", "m")
    with pytest.raises(TagError, match="exactly one emotion tag"):
        TagTable((msg,))
    with pytest.raises(TagError, match="at most one action tag: 'a' and 'b'"):
        TagTable((emo, msg, TagSpec("a", "action", "a"), TagSpec("b", "action", "b")))
    with pytest.raises(TagError, match="at least one speech tag"):
        TagTable((emo,))
