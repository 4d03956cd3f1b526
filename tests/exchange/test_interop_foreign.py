"""``interop.export`` of hand-made (or hand-edited) ``Exchange.foreign``: a document, or a ``CharfmtError``
naming the field; never a ``KeyError``/``TypeError``/``AttributeError`` from inside the export walk.

Each sample document is read (its exchanges keep their original messages in ``foreign``); then each
field of one exchange's ``foreign`` is given a value of each wrong type, or removed, and the history is
exported to every format and read back. Arguments of the wrong type are a ``TypeError``, as Python's own.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import TESTS

from charfmt import interop
from charfmt.diagnostics import CharfmtError
from charfmt.prompt.character import Character, Exchange

HERE = TESTS / "interop"
REX = Character.load(HERE.parent.parent / "examples" / "characters" / "rex.toml")
WRONG: list[Any] = [None, 0, -1, 1.5, "", "x", [], {}, True, float("nan"), {1, 2}, (1, 2), object()]
"""A value of each type a field may wrongly hold (the last four are not JSON at all)."""

Path_ = tuple[str | int, ...]


def _history(fmt: str) -> list[Exchange]:
    return interop.read(fmt, (HERE / "samples" / f"{fmt}.json").read_text(encoding="utf-8"))


def _fields(foreign: dict[str, Any]) -> Iterator[Path_]:
    """The fields the export walk reads, and one of a message's own fields and of the header's."""
    yield ("format",)
    yield ("messages",)
    yield ("document",)
    for key in list(foreign.get("document") or {})[:2]:
        yield ("document", key)
    for i, link in enumerate(foreign["messages"][:3]):
        yield ("messages", i)
        yield from (("messages", i, key) for key in ("message", "side", "chat", "reasoning"))
        yield ("messages", i, "message", next(iter(link["message"])))


def _changed(foreign: dict[str, Any], at: Path_, new: Any) -> dict[str, Any]:
    out = copy.deepcopy(foreign)
    node = out
    for step in at[:-1]:
        node = node[step]
    if new is _DELETE:
        if isinstance(node, dict):
            node.pop(at[-1], None)
    elif isinstance(node, dict) or (isinstance(node, list) and isinstance(at[-1], int)):
        node[at[-1]] = new  # type: ignore[index]
    return out


_DELETE = object()


def _name(at: Path_) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in at)


CASES = [
    (fmt, at, new)
    for fmt in interop.FORMATS
    for at in _fields(next(ex.foreign for ex in _history(fmt) if ex.foreign is not None))
    for new in [*WRONG, _DELETE]
]


@pytest.mark.parametrize("source", list(interop.FORMATS))
def test_each_wrong_field_of_foreign_gives_a_document_or_an_error_naming_it(source: str) -> None:
    history = _history(source)
    n = next(k for k, ex in enumerate(history) if ex.foreign is not None)
    foreign = history[n].foreign
    assert foreign is not None
    tried, failures = 0, []
    for fmt, at, new in CASES:
        if fmt != source:
            continue
        edited = list(history)
        edited[n] = history[n].model_copy(update={"foreign": _changed(foreign, at, new)})
        for target in interop.FORMATS:
            tried += 1
            try:
                text = interop.dumps(target, edited, REX)
            except CharfmtError as e:
                said = str(e)
                # the field named: the one changed, or the object that lacks it or holds it
                if not any(said.startswith(f"history[{n}].foreign{_name(at[:k])}") for k in range(1, len(at) + 1)):
                    failures.append(f"{_name(at)} = {new!r:.20} -> {target}: names another field: {said}")
                continue
            except Exception as e:  # what this test looks for
                failures.append(f"{_name(at)} = {new!r:.20} -> {target}: {type(e).__name__}: {e}"[:300])
                continue
            try:
                back = interop.read(target, text, REX)  # what was written reads back
            except CharfmtError as e:
                failures.append(f"{_name(at)} = {new!r:.20} -> {target}: written, not read back: {e}"[:300])
                continue
            assert [ex.user.chats for ex in back] == [ex.user.chats for ex in edited], (at, new, target)
    assert tried > 500 and not failures, "\n".join(failures[:20])


def test_the_error_names_the_field_and_what_it_must_hold() -> None:
    history = _history("pam")
    foreign = history[0].foreign
    assert foreign is not None
    cases = {
        ("messages", 0, "chat"): ("x", "history[0].foreign.messages[0].chat: expected a whole number of 0 or more"),
        ("messages", 0, "side"): (3, "history[0].foreign.messages[0].side: expected 'user' or 'reply'"),
        ("messages", 1, "message"): (_DELETE, "history[0].foreign.messages[1]: missing required key 'message'"),
        ("messages", 0, "message", "id"): ({1, 2}, "history[0].foreign.messages[0].message.id: a set, which JSON"),
        ("document", "schema"): (_DELETE, "history[0].foreign.document: missing required key 'schema'"),
    }
    for at, (new, said) in cases.items():
        edited = [history[0].model_copy(update={"foreign": _changed(foreign, at, new)}), *history[1:]]
        with pytest.raises(CharfmtError) as info:
            interop.export("pam", edited, REX)
        assert str(info.value).startswith(said), str(info.value)


@pytest.mark.parametrize(
    ("keywords", "words"),
    [
        ({"character": "Rex"}, "character must be a charfmt.Character or None, not str"),
        ({"tags": ["emo"]}, "tags must be a charfmt.TagTable, not list"),
        ({"created_at": 1700000000}, "created_at must be a str (an ISO 8601 time) or None, not int"),
    ],
)
def test_arguments_of_the_wrong_type_are_a_type_error(keywords: dict[str, Any], words: str) -> None:
    arguments: dict[str, Any] = {"character": REX, **keywords}
    match = words.replace("(", r"\(").replace(")", r"\)")
    for fmt in interop.FORMATS:
        with pytest.raises(TypeError, match=match):
            interop.export(fmt, _history(fmt), **arguments)
        if "created_at" not in keywords:  # read takes the other two
            with pytest.raises(TypeError, match=match):
                interop.read(fmt, (HERE / "samples" / f"{fmt}.json").read_text(encoding="utf-8"), **arguments)


def test_a_decoded_document_that_is_not_json_is_an_error_naming_where() -> None:
    doc = json.loads((HERE / "samples" / "ailoy.json").read_text(encoding="utf-8"))
    doc[0]["contents"][0]["text"] = {"a", "b"}
    with pytest.raises(CharfmtError, match=r"\[0\]\.contents\[0\]\.text: a set, which JSON cannot hold"):
        interop.read("ailoy", doc)


@pytest.mark.parametrize("fmt", list(interop.FORMATS))
def test_part_of_a_history_and_an_added_chat_write_a_document_that_reads_back(fmt: str) -> None:
    history = _history(fmt)
    reply = history[0].reply
    tea = interop.read("ailoy", [{"role": "assistant", "contents": [{"type": "text", "text": "Tea?"}]}])[0].reply
    chat = tea.chats[0].model_copy(update={"order": len(reply.chats) + 1})  # a chat added in Python
    added = history[0].model_copy(update={"reply": reply.model_copy(update={"chats": [*reply.chats, chat]})})
    for part in (history[1:], [added, *history[1:]]):
        document = interop.export(fmt, part, REX)
        assert interop.read(fmt, interop.dumps(fmt, part, REX), REX) == part
        if fmt == "groupchat":  # each sender is a user of the header, as the format's validator requires
            assert interop.groupchat.validate(document) == []
