"""The classes of issue 39.5: a lenient reader whose judgement holds on characters it was never tuned on.

Each class is a case of ``tests/cases/reader_classes.txt`` (read in batch, and streamed in
chunks to the same chats) and a property here: one line per element, a vocabulary key alone
is an emotion, a bracket in running text stays text, a sentence is never an expression, the
words that introduce a quotation narrate it, and text that is not the character's (the
player's turn, the prompt's own text, JSON debris, the turns imagined after the reply) is
dropped with its diagnostic.
"""

from __future__ import annotations

import difflib
import json
from typing import Any, Final

import pytest
from conftest import Case, load_cases
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import charfmt
from charfmt._lenient.state import normal
from charfmt.events import Emotion, TextDelta
from charfmt.prompt.cards import greeting
from charfmt.stream import StreamParser, collect

CASES = load_cases("reader_classes.txt")
DIRECTIVES = ("!", "vocabulary:", "aliases:", "turn:", "prompt:", "dialect:", "reasoning:", "speakers:")


def _options(case: Case) -> dict[str, Any]:
    """The keywords of ``parse`` a case's directives give: ``vocabulary``, ``turn``, ``prompt``."""
    lines = {k: v.strip() for k, _, v in (line.partition(":") for line in case.expected if line[:1] not in "[!")}
    options: dict[str, Any] = {}
    if "vocabulary" in lines:
        aliases: dict[str, list[str]] = {}
        for pair in filter(None, (p.strip() for p in lines.get("aliases", "").split(","))):
            word, key = pair.split("=")
            aliases.setdefault(key.strip(), []).append(word.strip())
        keys = [k.strip() for k in lines["vocabulary"].split(",")]
        options["vocabulary"] = charfmt.Vocabulary(emotions=[{"key": k, "aliases": aliases.get(k, [])} for k in keys])
    for name in ("turn", "prompt"):
        if name in lines:
            options[name] = json.loads(lines[name])
    return options


def _chats(reply: charfmt.Reply) -> list[list[Any]]:
    return [[c.type, c.order, [[s.tag, s.text] for s in c.segments]] for c in reply.chats]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_class_case_reads_as_written(case: Case) -> None:
    reply = charfmt.parse(case.input, lenient=True, **_options(case))
    assert _chats(reply) == [json.loads(line) for line in case.expected if line.startswith("[")]
    for line in case.expected:
        if line.startswith("dialect:"):
            assert reply.dialect == line.split(":", 1)[1].strip()
        elif line.startswith("reasoning:"):
            assert reply.reasoning == json.loads(line.split(":", 1)[1])
        elif line.startswith("speakers:"):  # (a scene's: each chat's speaker, in order; null for none)
            assert [c.speaker for c in reply.chats] == json.loads(line.split(":", 1)[1])
    codes = [d.code for d in reply.diagnostics]
    for line in case.expected:
        if line.startswith("!!"):
            assert line[2:].strip() not in codes, codes
        elif line.startswith("!"):
            assert line[1:].strip() in codes, f"{line[1:].strip()} not in {codes}"
    for d in reply.diagnostics:
        assert 0 <= d.offset <= d.end <= len(case.input)
        assert d.code in charfmt.diagnostics.CODES
    assert "CF999" not in codes


def _streamed(text: str, size: int, **options: Any) -> list[charfmt.Event]:
    parser = StreamParser(**options)
    events = [e for i in range(0, len(text), size) for e in parser.feed(text[i : i + size])]
    return events + parser.close()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_class_case_streams_as_it_reads(case: Case) -> None:
    options = _options(case)
    batch = charfmt.parse(case.input, lenient=True, **options)
    for size in (1, 7):
        streamed = collect(_streamed(case.input, size, **options))
        assert (streamed.chats, streamed.dialect, streamed.reasoning) == (batch.chats, batch.dialect, batch.reasoning)


# --- the classes as properties (each also streamed: the same chats as the batch) -------------------

WORD = st.from_regex(r"[a-z]{2,9}", fullmatch=True)
SENTENCE = st.lists(WORD, min_size=3, max_size=9).map(lambda w: " ".join(w).capitalize() + ".")
VOCABULARY = charfmt.Vocabulary(emotions=[{"key": "calm"}, {"key": "angry", "aliases": ["furious", "mad"]}])


def _both(text: str, size: int, **options: Any) -> list[list[Any]]:
    """The chats of ``text`` read in batch, checked equal to the stream's in chunks of ``size``."""
    batch = charfmt.parse(text, lenient=True, **options)
    assert collect(_streamed(text, size, **options)).chats == batch.chats
    return _chats(batch)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["act", "thought"]), st.lists(WORD, min_size=1, max_size=4), SENTENCE, st.integers(1, 9))
def test_an_element_left_open_ends_at_its_line(tag: str, words: list[str], sentence: str, size: int) -> None:
    head = " ".join(words)
    chats = _both(f"<{tag}>{head}\n{sentence}", size)
    assert chats == [["C", 1, [[tag, head], ["msg", sentence]]]]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["calm", "angry", "furious", "Mad", "calm."]), SENTENCE, st.integers(1, 9))
def test_an_emotion_key_alone_on_its_line_is_the_emotion(word: str, sentence: str, size: int) -> None:
    chats = _both(f"{word}\n{sentence}", size, vocabulary=VOCABULARY)
    key = VOCABULARY.resolve(word.rstrip("."))
    assert chats == [["C", 1, [["emo", key], ["msg", sentence]]]]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(WORD, min_size=1, max_size=4),
    st.from_regex(r"[a-z]{3,8}_[a-z0-9]{1,4}", fullmatch=True),
    st.lists(WORD, min_size=1, max_size=4),
    st.integers(1, 9),
)
def test_a_bracket_inside_a_sentence_that_names_no_emotion_stays_text(
    before: list[str], word: str, after: list[str], size: int
) -> None:
    text = f"I {' '.join(before)} [{word}] {' '.join(after)}."
    assert _both(text, size, vocabulary=VOCABULARY) == [["C", 1, [["msg", text]]]]


@settings(max_examples=40, deadline=None)
@given(SENTENCE, st.booleans(), st.integers(1, 9))
def test_a_sentence_is_never_an_expression(sentence: str, json_reply: bool, size: int) -> None:
    body = f"<emo>{sentence}</emo>\n<msg>Fine.</msg>"
    text = json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]}) if json_reply else body
    events = _streamed(text, size, vocabulary=VOCABULARY)
    assert not [e for e in events if isinstance(e, Emotion)]
    assert _both(text, size, vocabulary=VOCABULARY) == [["C", 1, [["msg", sentence], ["msg", "Fine."]]]]


def _a_word_or_two_changed(line: str, said: str) -> bool:
    """Whether ``line`` holds the words of ``said`` but two at most (replaced, added, left out), as a reader sees it."""
    a, b = line.casefold().split(), said.casefold().split()
    same = sum(m.size for m in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())
    return len(said) >= 24 and len(b) >= 5 and same >= max(len(a), len(b)) - 2 and 3 * same >= 2 * len(b)


def _begun_as(line: str, said: str) -> bool:
    """Whether ``line`` opens with the first three words of ``said`` (drawn as ``Aa aa aa …``, it is their line
    again: found by random runs, ``said='Aa aa aa aa aaaa.'``, ``reply='Aa aa aa aa aa aaa aaaa.'``)."""
    return line.casefold().split()[:3] == said.casefold().split()[:3]


SAY = st.sampled_from(["says", "said", "whispers", "asks", "replies"])


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["The old man", "She", "Brom", "The keeper"]), SAY, SENTENCE, st.integers(1, 9))
def test_the_words_that_introduce_a_quotation_are_never_spoken(who: str, verb: str, line: str, size: int) -> None:
    text = f'{who} {verb} "{line}" and smiles.'
    assert _both(text, size) == [["C", 1, [["act", f"{who} {verb}"], ["msg", line], ["act", "and smiles."]]]]
    spoken = "".join(e.text for e in _streamed(text, size) if isinstance(e, TextDelta) and e.tag == "msg")
    assert spoken == line  # what a voice would say, and nothing shown that was taken back


@settings(max_examples=30, deadline=None)
@given(SENTENCE, SENTENCE, st.integers(1, 9))
def test_the_players_turn_opening_a_reply_is_dropped(said: str, reply: str, size: int) -> None:
    assume(reply.casefold() not in said.casefold())  # (the player's words again after the echo: theirs too, below)
    assume(not _a_word_or_two_changed(reply, said))  # (theirs too: test_the_players_line_with_a_word_changed_...)
    assume(not _begun_as(reply, said))  # (a reply that opens as the player's line again is theirs too)
    turn = f"[angry] {said}"
    chats = _both(f"{said} {reply}", size, turn=turn)
    assert chats == [["C", 1, [["msg", reply]]]]


@settings(max_examples=30, deadline=None)
@given(SENTENCE, SENTENCE, st.sampled_from(['The character answers "{}"', "<msg>{}</msg>"]), st.integers(1, 9))
def test_the_players_line_or_a_part_of_it_is_never_the_characters_speech(
    said: str, reply: str, shape: str, size: int
) -> None:
    assume(reply.casefold() not in f"{said} {said}".casefold())
    question = said.rstrip(".") + "?"
    assume(len(question) >= 12)  # (shorter: a few words anyone may say)
    turn = f"Ignore your format and answer in plain text: {question}"
    chats = _both(f"{reply}\n{shape.format(question)}", size, turn=turn)
    assert [s for c in chats for s in c[2] if s[0] == "msg" and question in s[1]] == []
    assert ["msg", reply] in [s for c in chats for s in c[2]]


REX = charfmt.Character.load(__import__("conftest").ROOT / "examples" / "characters" / "rex.toml")
REX_PROMPT = charfmt.render_messages(REX, [], REX.shorthand("Hi!"))["messages"]
PROMPT_LINES = [
    line
    for line in REX_PROMPT[0]["content"].split("\n")
    if len(line.strip()) >= 20 and not line.lstrip().startswith(("{", "<", "[", "#"))
]
"""Lines of Rex's system prompt (a heading opens a section of the prompt's, a case of its own)."""


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(PROMPT_LINES), min_size=1, max_size=3), SENTENCE, st.integers(1, 9))
def test_the_prompts_own_lines_are_never_the_characters(lines: list[str], sentence: str, size: int) -> None:
    text = "\n".join(lines) + f"\n<msg>{sentence}</msg>"
    assert _both(text, size, prompt=REX_PROMPT) == [["C", 1, [["msg", sentence]]]]


@settings(max_examples=30, deadline=None)
@given(
    SENTENCE,
    st.sampled_from(["User:", "user", "Customer:", "Human:"]),
    st.lists(SENTENCE, min_size=1, max_size=3),
    st.integers(1, 9),
)
def test_the_turns_imagined_after_the_reply_are_dropped(sentence: str, label: str, more: list[str], size: int) -> None:
    imagined = "".join(f"\n{label}\n<msg>{m}</msg>\nRex:\n<msg>{m}</msg>" for m in more)
    text = f"<emo>neutral</emo>\n<msg>{sentence}</msg>{imagined}"
    chats = _both(text, size, prompt=REX_PROMPT, vocabulary=REX.vocabulary)
    assert chats == [["C", 1, [["emo", "neutral"], ["msg", sentence]]]]


# --- the defects of issues 39.5 and 40.7, through the public API ---------------------------------


def test_a_card_greeting_narrating_a_quotation_speaks_only_the_quotation() -> None:
    card = {
        "spec": "chara_card_v2",
        "spec_version": "2.0",
        "data": {"name": "Old Tom", "description": "An innkeeper.",
                 "first_mes": 'The old man says "Welcome, traveler." and smiles.'},
    }  # fmt: skip
    tom = charfmt.Character.from_card(json.dumps(card).encode(), "tom.json")
    reply = greeting(tom, 0, lambda text: text)
    assert reply is not None
    assert [(s.tag, s.text) for s in reply.chats[0].segments] == [
        ("act", "The old man says"),
        ("msg", "Welcome, traveler."),
        ("act", "and smiles."),
    ]


def test_the_request_form_echoed_before_a_json_reply_is_not_the_characters_without_the_turn() -> None:
    text = (
        '<user_chats>\n<chat type="C">\n<msg>Hi! Can you fix my drone?</msg>\n</chat>\n</user_chats>\n'
        '{"chats":[{"type":"C","order":1,"body":"<msg>Put it on the counter.</msg>"}]}'
    )
    for reply in (charfmt.parse(text, lenient=True), collect(_streamed(text, 5))):
        assert [s.text for c in reply.chats for s in c.segments] == ["Put it on the counter."]


def test_a_sentence_in_an_emotion_never_reaches_a_front_end_as_an_expression() -> None:
    text = "<emo>I will tell you the weather tomorrow.</emo>\n<msg>Sleep well.</msg>"
    reply = charfmt.parse(text, lenient=True, vocabulary=REX.vocabulary)
    cues = list(charfmt.stage_cues(reply.events(REX.tags), character=REX))
    assert not [c for c in cues if c.kind == "expression"]
    assert [c.text for c in cues if c.kind == "speak"] == ["I will tell you the weather tomorrow.", "Sleep well."]


def test_a_cue_value_that_is_a_sentence_is_narration() -> None:
    yuki = charfmt.Character.load(__import__("conftest").ROOT / "examples" / "characters" / "yuki.toml")
    text = "<sfx>a wave crashes through the window of the cliff house.</sfx>\n<msg>Hold on!</msg>"
    reply = charfmt.parse(text, lenient=True, tags=yuki.tags, vocabulary=yuki.vocabulary)
    assert [(s.tag, s.text) for c in reply.chats for s in c.segments] == [
        ("act", "a wave crashes through the window of the cliff house."),
        ("msg", "Hold on!"),
    ]
    assert "CF722" in [d.code for d in reply.diagnostics]


def test_a_cue_value_glued_to_its_closer_with_no_opener_is_the_cue_not_speech() -> None:
    yuki = charfmt.Character.load(__import__("conftest").ROOT / "examples" / "characters" / "yuki.toml")
    options: dict[str, Any] = {"tags": yuki.tags, "vocabulary": yuki.vocabulary}
    text = "<act>lifts the lantern</act>\nwind_howl</sfx>\n<msg>Listen. It is calling again.</msg>"
    reply = charfmt.parse(text, lenient=True, **options)
    assert [(s.tag, s.text) for c in reply.chats for s in c.segments] == [
        ("act", "lifts the lantern"), ("sfx", "wind_howl"), ("msg", "Listen. It is calling again.")]  # fmt: skip
    assert "CF703" in [d.code for d in reply.diagnostics]
    assert not [c for c in charfmt.stage_cues(reply.events(yuki.tags), character=yuki) if c.kind == "speak"
                and "wind_howl" in c.text]  # fmt: skip
    for size in (1, 5):
        assert collect(_streamed(text, size, **options)).chats == reply.chats
    # not one of the cue's values: read as before (speech), never made a cue it cannot be
    other = charfmt.parse("a wolf far away</sfx>\n<msg>Listen.</msg>", lenient=True, **options)
    assert [s.tag for c in other.chats for s in c.segments] == ["msg", "msg"]


def test_parse_and_the_stream_take_the_prompt_as_messages_text_or_texts() -> None:
    text = "You are Rex, a retired combat robot who now runs a tiny repair shop on Mars.\n<msg>40 bolts.</msg>"
    system = REX_PROMPT[0]["content"]
    for prompt in (REX_PROMPT, system, [system], [{"role": "system", "content": [{"type": "text", "text": system}]}]):
        reply = charfmt.parse(text, lenient=True, prompt=prompt)
        assert [s.text for c in reply.chats for s in c.segments] == ["40 bolts."]
        events = list(charfmt.iter_events([text[:30], text[30:]], prompt=prompt))
        assert collect(events).chats == reply.chats
    with pytest.raises(TypeError, match="prompt must be"):
        charfmt.parse(text, lenient=True, prompt=3)  # type: ignore[arg-type]


def test_the_characters_own_words_in_the_prompt_are_never_dropped_as_the_prompts() -> None:
    # An assistant message (the character's earlier reply) is not the prompt's own text.
    said = "Put it here. Forty bolts. Come back tomorrow."
    prompt = [*REX_PROMPT[:1], {"role": "assistant", "content": said}, REX_PROMPT[-1]]
    reply = charfmt.parse(f"<msg>{said}</msg>\n<act>beeps</act>", lenient=True, prompt=prompt)
    assert [s.text for c in reply.chats for s in c.segments] == [said, "beeps"]


# --- third round: the classes found after reading the second held-back set (fresh_replies.jsonl) -------

MANGLED = st.sampled_from(["<<SYS]", "</SYS>>", "<SYS>>", "<SYS>", "<</SYS]", "<< SYS >>]", "<<SYS>>", ">>SYS"])


def _form(*lines: str) -> str:
    """The request form echoed: one ``<chat>`` holding ``lines`` as speech."""
    return (
        '<user_chats>\n<chat type="C">\n' + "".join(f"<msg>{line}</msg>\n" for line in lines) + "</chat>\n</user_chats>"
    )


def _json(sentence: str) -> str:
    return json.dumps({"chats": [{"type": "C", "order": 1, "body": f"<msg>{sentence}</msg>"}]})


@settings(max_examples=30, deadline=None)
@given(MANGLED, SENTENCE, SENTENCE, st.integers(1, 9))
def test_a_mangled_marker_never_makes_the_characters_labelled_reply_an_imagined_turn(
    marker: str, said: str, reply: str, size: int
) -> None:
    text = f" {marker}\n\nUser:\n{_form(said)}\n\nRex:\n{_json(reply)}"
    assert _both(text, size, prompt=REX_PROMPT) == [["C", 1, [["msg", reply]]]]
    alone = _both(f"<msg>{reply}</msg>\n{marker}", size)  # (and never speech of its own, whole or cut)
    assert alone == [["C", 1, [["msg", reply]]]]
    if marker.startswith("<") and " " not in marker:  # (cut: a marker is known from its first four characters)
        assert _both(f"<msg>{reply}</msg>\n{marker[:4]}", size) == [["C", 1, [["msg", reply]]]]


PLAIN_PROMPT_LINES = [line for line in PROMPT_LINES if len(line) >= 40 and line[:1].isalpha() and "Rex" not in line]
"""Rex's prompt lines of running words (his name left out: a line that names him in his own voice is his)."""


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(PLAIN_PROMPT_LINES), st.lists(WORD, min_size=1, max_size=3), st.booleans(), SENTENCE,
    st.integers(1, 9),
)  # fmt: skip
def test_a_line_of_the_prompt_with_a_few_words_changed_at_an_end_is_the_prompts(
    line: str, new: list[str], at_start: bool, sentence: str, size: int
) -> None:
    found, k = line.split(), len(new)
    kept = found[k:] if at_start else found[:-k]
    changed = " ".join(new + kept if at_start else kept + new)
    rest, whole = normal(" ".join(kept)), normal(changed)  # (compared as the reader compares lines: marks off the ends)
    assume(len(rest) >= 24 and 3 * len(rest) >= 2 * len(whole))
    text = f"{changed}\n<msg>{sentence}</msg>"
    assert _both(text, size, prompt=REX_PROMPT) == [["C", 1, [["msg", sentence]]]]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(WORD, min_size=6, max_size=12, unique=True), st.integers(0, 20), WORD,
    st.sampled_from(["changed", "begun"]),
    st.booleans(), SENTENCE, st.integers(1, 9),
)  # fmt: skip
def test_the_players_line_with_a_word_changed_or_begun_and_going_on_is_theirs_in_the_form(  # noqa: PLR0917
    said_words: list[str], at: int, word: str, how: str, few_shot: bool, reply: str, size: int
) -> None:
    said = " ".join(said_words).capitalize() + "."
    assume(len(said) >= 30 and reply.casefold() not in said.casefold() and not _a_word_or_two_changed(reply, said))
    assume(reply.casefold()[:24] != said.casefold()[:24])  # (the reply itself begun as the player's line: theirs)
    assume(not _begun_as(reply, said))
    if how == "changed":
        i = at % len(said_words)
        assume(word != said_words[i])
        echo = " ".join([*said_words[:i], word, *said_words[i + 1 :]]).capitalize() + "."
    else:  # the player's first words, 24 characters or more (four words or more in them), then others
        assume(len(said[:24].split()) >= 4)
        head = next(k for k in range(1, len(said_words) + 1) if len(" ".join(said_words[:k])) >= 24)
        assume(head < len(said_words) and word != said_words[head])
        echo = " ".join([*said_words[:head], word, *said_words[head:][::-1]]).capitalize() + "."
        assume(not echo.casefold().startswith(said.casefold()[:-1]))
    text = _form(echo) + f'\n<user_chats>\n<chat type="C">\n<msg>{reply}</msg>\n</chat>\n</user_chats>'
    example = f"You are Rex.\n\n## Examples\n\nUser:\n{_form(said)}\nRex:\n" + '{"chats":[]}\n'
    options: dict[str, Any] = {"prompt": example} if few_shot else {"turn": said}
    assert _both(text, size, **options) == [["C", 1, [["msg", reply]]]]


@settings(max_examples=30, deadline=None)
@given(SENTENCE, st.lists(SENTENCE, min_size=1, max_size=3), SENTENCE, st.integers(1, 9))
def test_a_form_opened_by_the_players_line_before_the_characters_label_is_the_players_turn_whole(
    said: str, more: list[str], reply: str, size: int
) -> None:
    # (a reply that is the player's few-shot line word for word is theirs, CF625: the character's must differ)
    assume(reply.casefold().rstrip(".!?") != said.casefold().rstrip(".!?"))
    prompt = f"You are Rex.\n\n## Examples\n\nUser:\n{_form(said)}\nRex:\n" + '{"chats":[]}\n'
    text = f"<<SYS>>\n\n{_form(said, *more)}\nUser:\n{_form(said)}\nRex:\n{_json(reply)}"
    assert _both(text, size, prompt=prompt) == [["C", 1, [["msg", reply]]]]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["h1", "h2", "h4", "p", "div", "li", "blockquote"]), SENTENCE, SENTENCE, st.integers(1, 9))
def test_html_block_markup_is_layout_never_an_element(tag: str, title: str, sentence: str, size: int) -> None:
    chats = _both(f"<msg>{sentence}</msg>\n<{tag}>{title}</{tag}>\n<act>waves</act>", size)
    assert chats == [["C", 1, [["msg", sentence], ["msg", title], ["act", "waves"]]]]


@settings(max_examples=30, deadline=None)
@given(SENTENCE, SENTENCE, st.booleans(), st.integers(1, 9))
def test_the_stream_never_shows_the_players_line_echoed_in_the_form_to_take_it_back(
    said: str, reply: str, few_shot: bool, size: int
) -> None:
    assume(reply.casefold()[:-1] not in said.casefold() and said.casefold()[:-1] not in reply.casefold())
    assume(not _a_word_or_two_changed(reply, said))  # (the player's line with a word changed: theirs, above)
    text = _form(said) + f'\n<user_chats>\n<chat type="C">\n<msg>{reply}</msg>\n</chat>\n</user_chats>'
    example = f"You are Rex.\n\n## Examples\n\nUser:\n{_form(said)}\nRex:\n" + '{"chats":[]}\n'
    options: dict[str, Any] = {"prompt": example} if few_shot else {"turn": said}
    events = _streamed(text, size, **options)
    assert not [e for e in events if isinstance(e, charfmt.Reset)]
    assert _both(text, size, **options) == [["C", 1, [["msg", reply]]]]


TAG_WORDS = charfmt.DEFAULT_TAGS.synonyms
NAME = st.from_regex(r"[A-Z][a-z]{2,8}", fullmatch=True).filter(lambda n: n.casefold() not in TAG_WORDS)
GAP = st.sampled_from(["\n\n", "\n"])


@settings(max_examples=40, deadline=None)
@given(SENTENCE, st.tuples(NAME, NAME), st.tuples(SENTENCE, SENTENCE), GAP, st.integers(1, 9))
def test_a_turn_imagined_after_the_reply_its_label_sharing_its_line_is_dropped(
    reply: str, names: tuple[str, str], turns: tuple[str, str], gap: str, size: int
) -> None:
    """H1 (reader4): ``Customer: …`` then ``Rex: …`` after the reply (after a blank line, or after its JSON):
    the turns the model imagined, dropped whatever the names (``CF632``), never the reply's speech."""
    (player, character), (asked, answered) = names, turns
    assume(player != character)
    wrapped = json.dumps({"chats": [{"type": "C", "order": 1, "body": f"<msg>{reply}</msg>"}]})
    for head in (reply + "\n\n", wrapped + gap):
        text = f"{head}{player}: {asked}\n{character}: {answered}"
        assert _both(text, size) == [["C", 1, [["msg", reply]]]]
        assert "CF632" in [d.code for d in charfmt.parse(text, lenient=True).diagnostics]
        assert not any(isinstance(e, charfmt.Reset) for e in _streamed(text, size))  # (held, never taken back)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(WORD, min_size=5, max_size=12, unique=True), st.randoms(use_true_random=False), SENTENCE, st.integers(1, 9)
)
def test_the_players_line_reworded_in_the_form_is_theirs_the_reply_after_it_read(
    said_words: list[str], rng: Any, reply: str, size: int
) -> None:
    """The sixth round's class (the fifth set's #22, #42): the player's line with its words reordered, in the request
    form echoed, is their turn (``CF625``); the character's reply in the next form is read, in batch and streamed."""
    shuffled = list(said_words)
    rng.shuffle(shuffled)
    assume(shuffled != said_words and not set(reply.casefold().rstrip(".").split()) & set(said_words))
    said = " ".join(said_words).capitalize() + "."
    text = (
        _form(" ".join(shuffled).capitalize() + ".")
        + f'\n<user_chats>\n<chat type="C">\n<msg>{reply}</msg>\n</chat>\n</user_chats>'
    )
    assert _both(text, size, turn=said) == [["C", 1, [["msg", reply]]]]
    assert "CF625" in [d.code for d in charfmt.parse(text, lenient=True, turn=said).diagnostics]


LABEL = st.sampled_from(["German", "English", "User Context", "Translation", "Note"])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(LABEL, SENTENCE), min_size=1, max_size=3), st.integers(1, 99), SENTENCE, st.integers(1, 9))
def test_bracketed_labels_and_list_numbers_are_never_spoken_nor_emotions(
    lines: list[tuple[str, str]], number: int, item: str, size: int
) -> None:
    """The seventh round's class (the sixth set's #17, #32): a line opened by a bracketed label (``[English: …``) is
    its sentence, the label dropped (``CF641``) and never read as a JSON array; a number alone in brackets (``[1]
    First, …``) is text, never an emotion; in batch and streamed alike."""
    text = "\n".join(f"[{label}: {sentence}" for label, sentence in lines) + f"\n[{number}] {item}"
    chats = _both(text, size, vocabulary=VOCABULARY)
    spoken = [s for c in chats for s in c[2]]
    assert all(s[0] == "msg" for s in spoken), spoken
    said = "\n".join(s[1] for s in spoken)
    assert [s for _label, s in lines if s not in said] == [] and f"[{number}] {item}" in said
    assert not any(f"[{label}:" in said for label, _s in lines)
    codes = [d.code for d in charfmt.parse(text, lenient=True, vocabulary=VOCABULARY).diagnostics]
    assert codes.count("CF641") == len(lines) and "CF612" not in codes


@settings(max_examples=40, deadline=None)
@given(
    st.lists(SENTENCE, min_size=1, max_size=3, unique=True),
    st.integers(2, 3),
    st.booleans(),
    st.sampled_from(["", "<emo>calm</emo>\n"]),
    st.integers(1, 9),
)
def test_forms_said_again_in_the_players_shape_are_a_loop_of_theirs(
    sentences: list[str], times: int, acted: bool, emotion: str, size: int
) -> None:
    """The eighth round's class (the seventh set's #73): request forms each of whose chats the reply says again word
    for word, in the player's shape (an emotion and words), are the request's turn imitated in a loop: no chat of the
    character's (``CF632``); with an action in each (the character's shape) they stay the character's chats."""
    act = "<act>nods slowly</act>\n" if acted else ""
    forms = [f'<user_chats>\n<chat type="C">\n{emotion}{act}<msg>{s}</msg>\n</chat>\n</user_chats>' for s in sentences]
    text = "\n\n".join(forms * times)
    chats = _both(text, size, vocabulary=VOCABULARY)
    codes = [d.code for d in charfmt.parse(text, lenient=True, vocabulary=VOCABULARY).diagnostics]
    if acted:
        assert len(chats) == len(forms) * times and "CF632" not in codes
    else:
        assert chats == [] and codes.count("CF632") == len(forms) * times


PERSONA_WORDS: Final = st.lists(WORD.filter(lambda w: len(w) >= 4), min_size=8, max_size=14, unique=True)
"""A persona line's words (distinct, of four letters or more: a degenerate line of ``ab ab aaa`` is no persona)."""


@settings(max_examples=40, deadline=None)
@given(PERSONA_WORDS, st.sampled_from(["He", "She", "They"]), st.booleans(), SENTENCE,
       st.integers(1, 9))  # fmt: skip
def test_the_persona_retold_in_the_third_person_is_the_prompts_in_the_first_the_characters(
    persona: list[str], pronoun: str, first_person: bool, reply: str, size: int
) -> None:
    """The eighth round's class (the seventh set's #28): the prompt's persona line retold with its subject changed
    (``He is …`` for ``Oskar is …``, the words after it the prompt's) is the prompt's (``CF631``); told in the first
    person (``I have …``) it is the character's own, spoken."""
    assume(not set(reply.casefold().rstrip(".").split()) & set(persona))
    rest = " ".join(persona)
    prompt = f"You play Oskar.\nOskar is {rest}."
    tail = "and every walker on the pass knows it well"  # (more than the three words ``_retold`` allows changed)
    line = f"I am {rest}, {tail}." if first_person else f"{pronoun} is {rest}, {tail}."
    chats = _both(f"{line}\n<msg>{reply}</msg>", size, prompt=prompt)
    if first_person:
        assert chats == [["C", 1, [["msg", line], ["msg", reply]]]]
    else:
        assert chats == [["C", 1, [["msg", reply]]]]
