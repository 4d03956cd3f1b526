"""``charfmt chat`` on screen (issue 39, items 4 and 6), with scripted models: the wait is shown, diagnostics
come after the reply, each sentence once, a fresh seed per turn, and speech cut at its bound or by the
budget ends at a word and is never a fragment for TTS, in chat and in serve alike.
"""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

import charfmt
from charfmt.chat import TerminalView, TurnStats, run, stats_line, take_turn
from charfmt.prompt.character import Character, Exchange
from charfmt.speech import SentenceSplitter, cut_text, sentences, trim_cut_speech
from charfmt.stage import StageReader

REX = ROOT / "examples" / "characters" / "rex.toml"


class Terminal(io.StringIO):
    """What ``charfmt chat`` writes to, as a terminal."""

    def isatty(self) -> bool:
        return True


def reply_of(*bodies: str) -> str:
    chats = [{"type": "C", "order": n + 1, "body": body} for n, body in enumerate(bodies)]
    return json.dumps({"chats": chats}, ensure_ascii=False)


def scripted(text: str, *, wait: float = 0.0, stats: list[TurnStats] | None = None, reason: str = "stop") -> Any:
    """A model that reads the prompt for ``wait`` seconds, then writes ``text`` in chunks of 3 characters."""

    def generate(messages: list[dict[str, str]]) -> Iterator[str]:
        time.sleep(wait)
        for i in range(0, len(text), 3):
            yield text[i : i + 3]
        if stats is not None:
            stats.append(TurnStats(len(text) // 3, wait, 0.1, reason == "stop", reason))

    return generate


# --- item 6: the screen ---------------------------------------------------------------------------


def test_a_thinking_line_with_the_time_waited_shows_until_the_reply_starts() -> None:
    """44-160 s of silence after ``you>`` while the prompt was evaluated, with no sign of work."""
    rex = Character.load(REX)
    out = Terminal()
    view = TerminalView(rex, out, color=False, tick=0.05)
    take_turn(rex, [], "hi", scripted(reply_of("<msg>Forty bolts.</msg>"), wait=0.3), view=view)
    text = out.getvalue()
    assert text.startswith("  (Rex is thinking…)")
    assert re.search(r"\r\x1b\[K  \(Rex is thinking… \d+ s\)", text)  # updated in place, with the time waited
    erased = text.rindex("\r\x1b[K")
    assert erased < text.index("Rex: Forty bolts.")  # erased before the reply shows
    assert "thinking" not in text[erased:]
    piped = io.StringIO()  # not a terminal: no line redrawn in place
    take_turn(rex, [], "hi", scripted(reply_of("<msg>Forty bolts.</msg>")), view=TerminalView(rex, piped))
    assert "thinking" not in piped.getvalue() and "\r" not in piped.getvalue()


def test_the_stats_line_counts_the_wait_before_the_first_token() -> None:
    rex = Character.load(REX)
    out, stats = io.StringIO(), []  # type: list[TurnStats]
    model = scripted(reply_of("<msg>Forty bolts.</msg>"), stats=stats)
    assert run(rex, generate=model, says=["hi"], out=out, stats=stats) == 0
    last = out.getvalue().splitlines()[-1]
    assert last == stats_line(stats[-1]) and last.startswith("  (0.0 s thinking, ")
    assert stats_line(TurnStats(120, 44.2, 5.0, True)) == "  (44.2 s thinking, 120 tokens in 5.0 s, 23.8 tokens/s)"
    # a server that answers in one chunk: no speed to speak of (it said "1 tokens in 0.0 s, 0.0 tokens/s")
    assert stats_line(TurnStats(1, 0.4, 0.0, True)) == "  (0.4 s thinking, 1 token at once)"
    assert stats_line(TurnStats(3, 0.4, 0.0, False, "length")).startswith("  (0.4 s thinking, 3 tokens at once, ")


FREE = (
    "Hello there. I fix drones here. "  # prose, then a reply the lenient reader repairs
    '{"chats":[{"type":"C","order":1,"body":"<emo>angry</emo>\\n<msg>Forty bolts. Not one less.</msg>"}]}'
)


@pytest.mark.parametrize("verbose", [True, False])
def test_diagnostics_come_after_the_reply_never_between_its_sentences(verbose: bool) -> None:
    """In ``--free``, diagnostic lines were printed between the sentences of one message."""
    rex = Character.load(REX)
    out = io.StringIO()
    turn = take_turn(rex, [], "hi", scripted(FREE), view=TerminalView(rex, out, verbose=verbose))
    lines = out.getvalue().splitlines()
    assert turn.reply.diagnostics
    notes = [n for n, line in enumerate(lines) if line.startswith("! ") or "diagnostic" in line]
    assert notes and min(notes) > max(n for n, line in enumerate(lines) if "(tts)" in line or line.startswith("Rex"))
    if verbose:
        assert len(notes) == len(turn.reply.diagnostics)
    else:  # the reader's repairs (warnings) counted in one line
        assert all(d.severity != "error" for d in turn.reply.diagnostics)
        codes = ", ".join(dict.fromkeys(d.code for d in turn.reply.diagnostics))
        assert [lines[n] for n in notes] == [
            f"  ({len(turn.reply.diagnostics)} more diagnostic{'s' if len(turn.reply.diagnostics) > 1 else ''} "
            f"of the reply: {codes}; --verbose shows them)"
        ]


def test_with_a_stage_each_sentence_is_shown_once() -> None:
    """``--stage`` printed every sentence twice: a ``(tts)`` line and a ``speak`` cue."""
    rex = Character.load(REX)
    out = io.StringIO()
    model = scripted(reply_of("<emo>neutral</emo>\n<msg>Forty bolts. Not one less.</msg>"))
    assert run(rex, generate=model, says=["hi"], out=out, stats=[], stage=StageReader(rex)) == 0
    text = out.getvalue()
    for sentence in ("Forty bolts.", "Not one less."):
        shown = [line for line in text.splitlines() if sentence in line and not line.startswith("Rex: ")]
        assert len(shown) == 1 and '"kind": "speak"' in shown[0], shown


def test_each_turn_samples_with_a_fresh_seed_unless_one_is_given() -> None:
    """The same seed every turn made base models repeat their reply word for word."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'charfmt[local]')")
    from test_chat_format import FakeLlama, rex_messages

    from charfmt.chat import local_model

    class Seeds(FakeLlama):
        def __init__(self) -> None:
            super().__init__()
            self.seeds: list[int] = []

        def create_completion(self, prompt: list[int], **kwargs: Any) -> Iterator[dict[str, Any]]:
            self.seeds.append(kwargs["seed"])
            return super().create_completion(prompt, **kwargs)

    fresh = Seeds()
    generate = local_model(fresh, gbnf=None, max_tokens=64, chat_format="chatml")
    for say in ("one", "two", "three"):
        list(generate(rex_messages(say)))
    assert len(set(fresh.seeds)) == 3
    given = Seeds()
    generate = local_model(given, gbnf=None, max_tokens=64, chat_format="chatml", seed=5)
    for say in ("one", "two", "three"):
        list(generate(rex_messages(say)))
    assert given.seeds == [5, 6, 7]  # reproducible, and never the same seed twice


def test_chat_seed_defaults_to_a_fresh_seed(capsys: pytest.CaptureFixture[str]) -> None:
    from charfmt.cli import main

    assert main(["chat", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--seed N" in text and "a fresh random seed each turn" in text


# --- item 4: speech cut at its bound is never a fragment --------------------------------------------

CUT = "Put it here. The weather is a"
"""Speech the grammar closed at its bound of 29 characters, mid-word."""


def test_cut_text_ends_at_a_word() -> None:
    assert cut_text(" The weather is a") == " The weather is…"
    assert cut_text("the 35th DA") == "the 35th…"
    assert cut_text("これは神社のお守り") == "これは神社のお守り…"  # no spaces: a cut between characters is a boundary
    assert cut_text("Wait, I") == "Wait…" and cut_text("Done.") == "Done." and cut_text("Sec") == ""


def test_speech_cut_at_its_bound_is_trimmed_noted_and_never_spoken() -> None:
    raw = reply_of(f"<emo>neutral</emo>\n<msg>{CUT}</msg>")
    reply = charfmt.parse(raw)
    assert [s.text for s in sentences(reply)] == ["Put it here.", "The weather is a"]  # no bound: a fragment
    assert [s.text for s in sentences(reply, bound=len(CUT))] == ["Put it here."]
    assert [s.text for s in sentences(reply, bound=len(CUT) + 1)] == ["Put it here.", "The weather is a"]
    trimmed = trim_cut_speech(reply, bound=len(CUT), source=raw)
    assert trimmed.chats[0].texts("msg") == ["Put it here. The weather is…"]
    (note,) = trimmed.diagnostics
    assert note.code == "CF150" and note.severity == "warning" and note.chat == 0
    assert raw[note.offset : note.end] == " The weather is a"  # the unfinished sentence, in the raw reply
    rex = Character.load(REX)
    cues = [c.to_dict() for e in reply.events() for c in StageReader(rex, bound=len(CUT)).feed(e)]
    assert [c["text"] for c in cues if c["kind"] == "speak"] == ["Put it here."]  # no speak cue of a fragment
    splitter = SentenceSplitter(bound=len(CUT))
    whole = [s.text for e in reply.events() for s in splitter.feed(e)] + [s.text for s in splitter.close()]
    assert whole == ["Put it here."]


def test_chat_shows_cut_speech_ending_at_a_word_and_keeps_it_so() -> None:
    """``… 35th DA`` was sent to TTS and as a ``speak`` cue; the screen showed the fragment."""
    rex = Character.load(REX)
    out = io.StringIO()
    history: list[Exchange] = []
    model = scripted(reply_of(f"<emo>neutral</emo>\n<msg>{CUT}</msg>"))
    turn = take_turn(rex, history, "hi", model, view=TerminalView(rex, out), bound=len(CUT))
    lines = out.getvalue().splitlines()
    assert "Rex: Put it here. The weather is…" in lines
    assert [line for line in lines if "(tts)" in line] == ["  (tts) Put it here."]
    assert lines[-1].startswith("! warning CF150: chat 0 body: the speech reached its bound of 29 characters")
    assert turn.reply.chats[0].texts("msg") == ["Put it here. The weather is…"]
    assert history[0].reply.chats[0].texts("msg") == ["Put it here. The weather is…"]  # what goes back next turn


def test_a_reply_cut_by_the_token_budget_ends_its_speech_at_a_word() -> None:
    rex = Character.load(REX)
    out, stats = io.StringIO(), []  # type: list[TurnStats]
    cut = '{"chats":[{"type":"C","order":1,"body":"<msg>Come back tomorrow. It will cost 35 bolts and the 35th DA'
    turn = take_turn(rex, [], "hi", scripted(cut, stats=stats, reason="length"), view=TerminalView(rex, out),
                     stats=stats)  # fmt: skip
    assert turn.reply.chats[0].texts("msg") == ["Come back tomorrow. It will cost 35 bolts and the 35th…"]
    tts = [line for line in out.getvalue().splitlines() if "(tts)" in line]
    assert tts == ["  (tts) Come back tomorrow."]
    assert "CF150" in [d.code for d in turn.reply.diagnostics]
    whole = take_turn(rex, [], "hi", scripted(cut, stats=stats, reason="stop"), stats=stats)
    assert whole.reply.chats[0].texts("msg") == ["Come back tomorrow. It will cost 35 bolts and the 35th DA"]


def test_serve_never_speaks_cut_speech_and_answers_it_ended_at_a_word() -> None:
    pytest.importorskip("starlette")
    httpx = pytest.importorskip("httpx")
    from scripted_upstream import Scripted, loopback

    from charfmt.serve import Settings, create_app
    from charfmt.serve.turns import reply_bounds

    rex = Character.load(REX)
    up = Scripted()
    with loopback(up.app) as upstream:
        settings = Settings(character=rex, upstream_url=upstream + "/v1", max_tokens=300)
        bound = reply_bounds(settings).max_chars
        full = "Put it here. " + "The weather is fine and the drone is ready " * 9
        while not (full[bound - 1].isalpha() and full[bound].isalpha()):  # cut mid-word
            full = "Ah! " + full
        said = full[:bound]
        up.mode = "say:" + reply_of(f"<emo>neutral</emo>\n<msg>{said}</msg>")
        with (
            loopback(create_app(settings)) as base,
            httpx.stream("POST", base + "/v1/turn", json={"say": "hi"}, timeout=30) as r,
        ):
            objs = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    spoken = [o["sentence"]["text"] if "sentence" in o else o.get("text") for o in objs if o["kind"] == "sentence"]
    speak = [o["cue"]["text"] for o in objs if o["kind"] == "stage" and o["cue"]["kind"] == "speak"]
    whole = [s for s in re.split(r"(?<=[.!])\s+", said)[:-1]]  # the sentences that ended before the cut
    assert spoken == whole and speak == whole, (spoken, speak)
    final = objs[-1]
    assert final["kind"] == "reply" and final["valid"] is True  # the text is strictly valid; its speech was cut
    body = final["reply"]["chats"][0]["body"]
    assert body.endswith("…</msg>") and said not in body
    assert "CF150" in [d["code"] for d in final["diagnostics"]]
    shown = "".join(o["text"] for o in objs if o["kind"] == "text")
    assert f"<msg>{shown}</msg>" in body  # the front end was shown what the reply says: no cut word


@settings(max_examples=150, deadline=None)
@given(
    words=st.lists(
        st.sampled_from(["bolts", "a", "35th", "DA", "Fine.", "ok,", "本当", "です。", "Hm...", "—"]),
        min_size=1,
        max_size=14,
    ),
    cuts=st.lists(st.integers(1, 200), max_size=6),
    shorter=st.integers(0, 12),
)
def test_the_shown_speech_is_the_trimmed_speech_and_only_whole_sentences_are_spoken(
    words: list[str], cuts: list[int], shorter: int
) -> None:
    """However the reply arrives, what ``CutSpeech`` lets through is the text ``trim_cut_speech`` keeps,
    and the sentences spoken (``SentenceSplitter(bound=)``) are those that ended before the cut."""
    from charfmt.speech import CutSpeech, whole_sentences

    said = " ".join(words)
    bound = max(1, len(said) - shorter)  # at the bound (cut), or under it (whole)
    raw = reply_of(f"<emo>neutral</emo>\n<msg>{said.replace('&', '&amp;')}</msg>")
    points = sorted({c % (len(raw) + 1) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    parser = charfmt.StreamParser()
    events = [e for p in pieces for e in parser.feed(p)] + parser.close()
    cut, splitter = CutSpeech(bound), SentenceSplitter(bound=bound)
    shown = "".join(e.text for event in events for e in cut.feed(event) if e.kind == "text")
    spoken = [s.text for event in events for s in splitter.feed(event)] + [s.text for s in splitter.close()]
    trimmed = trim_cut_speech(charfmt.parse(raw), bound=bound, source=raw).chats[0].texts("msg")[0]
    assert shown == trimmed
    if len(said) >= bound:
        head, _tail = whole_sentences(said)
        before = [s.text for s in sentences(charfmt.parse(reply_of(f"<msg>{head}</msg>")))] if head.strip() else []
        assert spoken == before
    else:
        assert shown == said and spoken == [s.text for s in sentences(charfmt.parse(raw))]
