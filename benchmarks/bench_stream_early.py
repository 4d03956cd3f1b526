"""Benchmark: how soon a stream speaks, and how seldom it takes back what it showed (issue 40, item 6).

Run: .venv/bin/python benchmarks/bench_stream_early.py [--half held|fit|tune|all] [--chunk N] [--show K] [--resets K]
     [--told]

Over ``benchmarks/data/stream_corpus.jsonl`` (real model replies, the replies written by hand after
them, and real prose, quoted speech and CJK lines sent off-format, as bare tags with entities, as
canonical replies and damaged ones; ``benchmarks/data/make_stream_corpus.py`` says how it is built),
each reply streamed in the chunks it was recorded in, else in ``--chunk``-character chunks (default 4):

- speech before ``close()``: of the replies whose lenient parse has speech text, the share whose
  first speech ``TextDelta`` comes before ``close()`` (goal >= 95 %);
- Resets: the share of all replies whose stream emits a ``Reset`` (goal <= 0.2 %);
- stream != batch: replies whose stream ends with other chats than ``parse(text, lenient=True)``
  (must be 0);
- per kind of reply, the same; ``--show K`` prints K replies that speak only at ``close()``, ``--resets K``
  K replies whose stream resets, each with what it showed before the ``Reset`` and the batch's reading.

``--told``: each reply streamed (and parsed) told what its caller knew, as ``charfmt serve`` and
``charfmt chat`` tell theirs: the player's turn and the prompt (``render_messages``) of the request it
answered, where the corpus records them (the replies of ``tests/data/free_replies.jsonl`` and
``real_replies.jsonl``, as their generators rendered them, and the rows the token corpus's
``model_output`` lines were built into, and the ``real2`` to ``real7`` rows: the turn as their setting
reads it and the request's messages, as ``tests/lenient/test_new_corpus.py`` reads them); the others as without it.

The stream's heuristics are tuned on the ``fit`` half; the figures to report are the ``held`` half's
(the default), read once at the end. The held rows of the kinds other than ``real2`` to ``real7`` were read at
the end of the first round, ``real2``'s at the end of the second, and so on (``real6``'s at the end of the sixth),
and are tuning data since: ``--half tune`` is every row but the held ones of ``CLAIM`` (the next round's claim,
added unread: until its rows are in the corpus, every row).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Final

import charfmt
from charfmt._lenient import words

CORPUS: Final = Path(__file__).resolve().parent / "data" / "stream_corpus.jsonl"
SPEECH: Final = {t.name for t in charfmt.DEFAULT_TAGS.with_role("speech")} | {charfmt.tags.TEXT_TAG}


CLAIM: Final = "real7"
"""The kind whose held rows carry the claim (committed unread); every other row is tuning data (``real2``'s
held rows carried the second round's claim, ``real3``'s the third's, ``real4``'s the fourth's, ``real5``'s the
fifth's, ``real6``'s the sixth's, each read at its round's end)."""


def load(half: str) -> list[dict[str, Any]]:
    """The rows of ``half``: "fit", "held", "all", or "tune" (all but the claim's held rows)."""
    rows = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    if half == "tune":
        return [r for r in rows if r["half"] == "fit" or r["kind"] != CLAIM]
    return [r for r in rows if half == "all" or r["half"] == half]


DATA: Final = Path(__file__).resolve().parent.parent / "tests" / "data"
CHARACTERS: Final = Path(__file__).resolve().parent.parent / "examples" / "characters"
TOKEN_CORPUS: Final = Path(__file__).resolve().parent / "data" / "token_corpus.jsonl"


def requests() -> dict[str, tuple[str, str, bool]]:
    """The recorded replies' requests: reply text -> (character, the player's line, read by ``Character.shorthand``)."""
    found: dict[str, tuple[str, str, bool]] = {}
    for name, by_character in (("free_replies.jsonl", True), ("real_replies.jsonl", False)):
        for line in (DATA / name).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            found[row["reply"]] = (row["character"], row["turn"], by_character)
    return found


def later_requests(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What the caller of each ``real2`` to ``real7`` row knew: the player's turn as its setting reads it
    and the request's messages (``tests/data/make_new_corpus.py`` says how each setting is loaded)."""
    sys.path.insert(0, str(DATA))
    import make_new_corpus as corpus

    made = ("new", "fresh", "third", "fourth", "sixth", "seventh", "eighth", "ninth", "tenth", "eleventh")
    settings = {i: (k, f) for which in made for _g, i, k, f in corpus.settings(which)}
    loaded: dict[str, Any] = {}
    out: dict[str, dict[str, Any]] = {}
    sources: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row["kind"] not in ("real2", "real3", "real4", "real5", "real6", "real7"):
            continue
        name, n = row["id"].rsplit("-", 1)
        if name not in sources:
            lines = (DATA / f"{name}_replies.jsonl").read_text(encoding="utf-8").splitlines()
            sources[name] = [json.loads(line) for line in lines]
            prompts = json.loads((DATA / f"{name}_prompts.json").read_text(encoding="utf-8"))
            for r in sources[name]:
                r["system"] = prompts[r["setting"]]
        source = sources[name][int(n)]
        key = source["setting"]
        setting = loaded.get(key) or loaded.setdefault(key, corpus.load_setting(*settings[key]))
        out[row["id"]] = {
            "turn": corpus.player_turn(setting, source["turn"]),
            "prompt": [
                {"role": "system", "content": source["system"]},
                *source.get("between", ()),  # (a card's Character's Note, where the request had one)
                {"role": "user", "content": source["user_message"]},
            ],
        }
    return out


def told(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What the caller of each row knew (``--told``): row id -> ``turn`` and ``prompt``, where recorded."""
    asked = requests()
    lines = [json.loads(line) for line in TOKEN_CORPUS.read_text(encoding="utf-8").splitlines()]
    source = {r["id"]: r["text"] for r in lines if r["group"] == "model_output"}
    characters: dict[str, charfmt.Character] = {}
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = row["id"].split("/")[0]
        request = asked.get(source.get(key, row["text"]))
        if request is None:
            continue
        name, say, by_character = request
        character = characters.setdefault(name, charfmt.Character.load(CHARACTERS / f"{name}.toml"))
        turn = character.shorthand(say) if by_character else charfmt.parse_shorthand(say)
        out[row["id"]] = {"turn": turn, "prompt": charfmt.render_messages(character, [], turn)["messages"]}
    return out | later_requests(rows)


def chunks_of(row: dict[str, Any], size: int) -> list[str]:
    if row["chunks"]:
        return list(row["chunks"])
    text = row["text"]
    return [text[i : i + size] for i in range(0, len(text), size)]


def shown_before_reset(row: dict[str, Any], size: int, known: dict[str, Any] | None = None) -> str:
    """What the stream of ``row`` showed before its ``Reset`` (segments as ``[tag]text``), or ``""`` if none came."""
    parser = charfmt.StreamParser(**(known or {}))
    events: list[charfmt.Event] = []
    for chunk in chunks_of(row, size):
        events.extend(parser.feed(chunk))
    events.extend(parser.close())
    shown = []
    for event in events:
        if isinstance(event, charfmt.Reset):
            return "".join(shown)
        if isinstance(event, charfmt.SegmentStart):
            shown.append(f"[{event.tag}]")
        elif isinstance(event, (charfmt.TextDelta, charfmt.Emotion)):
            shown.append(event.text)
    return ""


def measure(row: dict[str, Any], size: int, known: dict[str, Any] | None = None) -> tuple[bool, bool, bool, bool]:
    """``(speaks, spoke early, reset, differs)`` of one reply; ``known``: what its caller told (``--told``)."""
    text = row["text"]
    batch = charfmt.parse(text, lenient=True, **(known or {}))
    parser = charfmt.StreamParser(**(known or {}))
    early: list[charfmt.Event] = []
    for chunk in chunks_of(row, size):
        early.extend(parser.feed(chunk))
    late = parser.close()
    speaks = any(s.tag in SPEECH and s.text for c in batch.chats for s in c.segments)
    spoke = any(isinstance(e, charfmt.TextDelta) and e.tag in SPEECH for e in early)
    reset = any(isinstance(e, charfmt.Reset) for e in early + late)
    return speaks, speaks and spoke, reset, charfmt.collect(early + late).chats != batch.chats


def one_sentence(text: str, known: dict[str, Any] | None = None) -> bool:
    """Whether the speech of ``text`` is one sentence a quotation coming right after would make narration."""
    batch = charfmt.parse(text, lenient=True, **(known or {}))
    said = " ".join(s.text for c in batch.chats for s in c.segments if s.tag in SPEECH and s.text).strip()
    return bool(said) and words.last_sentence_start(said) == 0 and words.narrates_next(said)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--half", choices=("held", "fit", "tune", "all"), default="held")
    ap.add_argument("--chunk", type=int, default=4)
    ap.add_argument("--show", type=int, default=0, metavar="K")
    ap.add_argument("--resets", type=int, default=0, metavar="K", help="print K replies whose stream resets")
    ap.add_argument("--told", action="store_true", help="tell each stream its request's turn and prompt, as serve does")
    args = ap.parse_args(argv)
    rows = load(args.half)
    known = told(rows) if args.told else {}
    counts: dict[str, Counter[str]] = {}
    late: list[dict[str, Any]] = []
    resets: list[dict[str, Any]] = []
    for row in rows:
        speaks, spoke, reset, differs = measure(row, args.chunk, known.get(row["id"]))
        for key in ("all", row["kind"]):
            c = counts.setdefault(key, Counter())
            c["replies"] += 1
            c["speaks"] += speaks
            c["early"] += spoke
            c["reset"] += reset
            c["differ"] += differs
        if reset:
            resets.append(row)
        if speaks and not spoke:
            late.append(row)
            c = counts["all"]
            c["one sentence"] += one_sentence(row["text"], known.get(row["id"]))
    reader = "compiled" if charfmt.stream.COMPILED else "pure Python"
    print(
        f"{CORPUS.name}, half {args.half}: {len(rows)} replies,"
        f" {args.chunk}-char chunks where none were recorded ({reader})"
        + (f"; {len(known)} told their request's turn and prompt" if args.told else "")
    )
    for key in ["all", *sorted(k for k in counts if k != "all")]:
        c = counts[key]
        print(
            f"  {key:<11} speech before close(): {100 * c['early'] / max(c['speaks'], 1):5.1f} % of {c['speaks']:>4}"
            f"   Reset: {100 * c['reset'] / max(c['replies'], 1):4.2f} % of {c['replies']:>4}"
            f"   stream != batch: {c['differ']}"
        )
    c = counts["all"]
    print(
        f"  late: {len(late)}, of which {c['one sentence']} speak one sentence that a quotation coming next would"
        " make narration (the batch reader's rule): no stream can know it is speech before the reply ends"
    )
    for row in late[: args.show]:
        print(f"--- {row['id']} ({row['kind']}): {row['text'][:160]!r}")
    for row in resets[: args.resets]:
        batch = charfmt.parse(row["text"], lenient=True, **(known.get(row["id"]) or {}))
        print(f"=== Reset {row['id']} ({row['kind']}): {row['text'][:160]!r}")
        print(f"    shown: {shown_before_reset(row, args.chunk, known.get(row['id']))[:160]!r}")
        print(f"    batch ({batch.dialect}): {[(s.tag, s.text[:40]) for c in batch.chats for s in c.segments][:4]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
