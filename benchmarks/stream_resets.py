"""List the replies whose stream ends with a ``Reset``, by class: why the batch reading took back what was shown.

Run: .venv/bin/python benchmarks/stream_resets.py [--half fit|tune|all] [--told] [--chunk N] [--list]

Over the tuning rows of ``benchmarks/data/stream_corpus.jsonl`` (``--half fit`` or ``tune``; never the claim's held
rows), each reply is streamed as ``bench_stream_early.py`` streams it. For each one whose stream resets, the first
text it showed is found in the raw reply, and the reply is classed by the batch's diagnostic at that place and by
what follows the text the batch dropped:

- ``form before JSON``: a request form (``<user_chats>``) whose lines were shown, dropped once a JSON reply came
  (``CF624``, ``CF625``, ``CF632``);
- ``prompt before JSON``: the system prompt echoed (``CF631``, ``CF622``, ``You are X.`` kept as prose otherwise);
- ``prose before JSON``: other text before a JSON reply, dropped (``CF601``, ``CF636``, ``CF633``);
- ``prompt before a form``, ``prose before a form``: text before a request form read as the reply (no JSON),
  dropped as prose;
- ``read otherwise``: the shown text is in the batch's reading, but read another way (quotes, damage, markup).

``--list`` prints each reset reply's id, class, what the stream showed and the batch's reading.

``--late`` lists instead the replies that speak only at ``close()`` (the batch reads speech, the stream showed
none before the end), by the first of the stream's holds that the whole text, read before ``close()``, still
meets (``late_class``): ``--real`` keeps the real kinds only.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_stream_early as bench

import charfmt
from charfmt._stream import settle

FORM: Final = frozenset({"CF624", "CF625", "CF632", "CF635"})
PROMPT: Final = frozenset({"CF631", "CF622"})
PROSE: Final = frozenset({"CF601", "CF636", "CF633", "CF626"})


def first_shown(row: dict[str, Any], size: int, known: dict[str, Any] | None) -> tuple[str, bool]:
    """The first text the stream of ``row`` showed before its ``Reset`` (``""`` if none), and whether it reset."""
    parser = charfmt.StreamParser(**(known or {}))
    events: list[charfmt.Event] = []
    for chunk in bench.chunks_of(row, size):
        events.extend(parser.feed(chunk))
    events.extend(parser.close())
    first = ""
    for event in events:
        if isinstance(event, charfmt.Reset):
            return first, True
        if not first and isinstance(event, charfmt.TextDelta) and event.text.strip():
            first = event.text.strip()
    return first, False


_JSON_OPEN: Final = re.compile(r'\{\s*"')
_FORM_OPEN: Final = re.compile(r"<\s*user_chats?\b", re.I)
_PROMPT_OPENING: Final = re.compile(r"\s*(?:<<SYS[>\]]+\s*)?(?:you are|you're|you play|write |du bist|##)", re.I)


def classify(text: str, shown: str, batch: charfmt.Reply) -> str:
    """The class of a reset reply: where the first text shown stands against the batch's reply (module docstring)."""
    at = text.find(shown[:12]) if shown else -1
    found = _JSON_OPEN.search(text)
    json_at = found.start() if found is not None and batch.dialect not in ("user-chats", "plain-text") else -1
    form = _FORM_OPEN.search(text)
    head = text[: max(at, 0)]
    codes = {d.code for d in batch.diagnostics if at >= 0 and d.offset is not None and d.offset <= at < (d.end or 0)}
    if 0 <= at < json_at:
        if codes & FORM or _FORM_OPEN.search(head):
            return "form before JSON"
        if codes & PROMPT or _PROMPT_OPENING.match(text):
            return "prompt before JSON"
        return "prose before JSON"
    if batch.dialect == "user-chats" and form is not None and 0 <= at < form.start():
        return "prompt before a form" if _PROMPT_OPENING.match(text) else "prose before a form"
    return "read otherwise"


_LABEL_LINE: Final = re.compile(r"\s*[^\s:,<>{}\[\]]{1,24}[:,]?[ \t]*\n")
_REAL: Final = frozenset({"real", "real2", "real3", "real4", "real5", "real6", "real7"})


def late_class(row: dict[str, Any], told: dict[str, Any] | None) -> str:
    """Why the stream of ``row`` showed no speech before ``close()``: the first of its holds the whole text still meets.

    - ``opens as a prompt``: untagged text opening as a system prompt does (``You are Rex.``);
    - ``form of one message``: a first request form of one message, waiting for the line after it;
    - ``request form, no chat``: ``<user_chats>`` with no ``<chat>`` yet (its text may be prose before one);
    - ``one sentence``: untagged speech of one sentence, which a quotation coming next would make narration;
    - ``preamble words``: untagged text with words of a preamble (``reply``, ``the user``, ``here is``, a colon
      ending a line), which may yet introduce a JSON reply;
    - ``label line``: a first line that is a name alone (``Maren:``), a speaker label before a JSON reply;
    - ``short``: speech under 8 characters (``...``, a placeholder);
    - ``other``.
    """
    text = row["text"]
    batch = charfmt.parse(text, lenient=True, **(told or {}))
    speech = frozenset(w for w, tag in charfmt.DEFAULT_TAGS.synonyms.items() if tag == charfmt.DEFAULT_TAGS.speech.name)
    spoken = " ".join(s.text for c in batch.chats for s in c.segments if s.tag in bench.SPEECH and s.text).strip()
    if batch.dialect in ("plain-text", "roleplay", "bracket", "user-chats") and settle.opens_as_prompt(text):
        return "opens as a prompt"
    if settle.in_turn_form(text, speech):
        return "form of one message"
    if batch.dialect == "user-chats" and not re.search(r"[<＜]\s*chat\b", text, re.I):
        return "request form, no chat"
    if len(spoken) < 8:
        return "short"
    if _LABEL_LINE.match(text):
        return "label line"
    if bench.one_sentence(text, told):
        return "one sentence"
    if batch.dialect in ("plain-text", "prose") and not settle.prose_decided(batch, text):
        return "preamble words"
    return "other"


def late(rows: list[dict[str, Any]], size: int, known: dict[str, Any], *, real: bool, show: bool) -> None:
    """Print the replies that speak only at ``close()``, by class (``late_class``)."""
    classes: Counter[str] = Counter()
    listing = []
    speakers = 0
    for row in rows:
        if real and row["kind"] not in _REAL:
            continue
        speaks, spoke, _reset, _differs = bench.measure(row, size, known.get(row["id"]))
        speakers += speaks
        if speaks and not spoke:
            kind = late_class(row, known.get(row["id"]))
            classes[kind] += 1
            listing.append((row, kind))
    print(f"{sum(classes.values())} of {speakers} replies with speech speak only at close()")
    for kind, n in classes.most_common():
        print(f"  {kind:<22} {n:>3}")
    if show:
        for row, kind in sorted(listing, key=lambda x: x[1]):
            print(f"--- {row['id']} ({row['kind']}) [{kind}]: {row['text'][:110]!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--half", choices=("fit", "tune", "all"), default="fit")
    ap.add_argument("--chunk", type=int, default=4)
    ap.add_argument("--told", action="store_true", help="tell each stream its request's turn and prompt")
    ap.add_argument("--list", action="store_true", help="print every reset reply")
    ap.add_argument("--late", action="store_true", help="list the replies that speak only at close(), by class")
    ap.add_argument("--real", action="store_true", help="with --late: the real kinds only")
    args = ap.parse_args(argv)
    rows = bench.load(args.half)
    known = bench.told(rows) if args.told else {}
    if args.late:
        late(rows, args.chunk, known, real=args.real, show=args.list)
        return 0
    classes: Counter[str] = Counter()
    real: Counter[str] = Counter()
    listing = []
    for row in rows:
        told = known.get(row["id"])
        shown, reset = first_shown(row, args.chunk, told)
        if not reset:
            continue
        batch = charfmt.parse(row["text"], lenient=True, **(told or {}))
        kind = classify(row["text"], shown, batch)
        classes[kind] += 1
        real[kind] += row["kind"] in _REAL
        listing.append((row, kind, shown, batch))
    total = sum(classes.values())
    print(f"half {args.half}{' (told)' if args.told else ''}: {total} of {len(rows)} replies reset")
    for kind, n in classes.most_common():
        print(f"  {kind:<20} {n:>3}   (real replies: {real[kind]})")
    if args.list:
        for row, kind, shown, batch in listing:
            print(f"=== {row['id']} ({row['kind']}) [{kind}]: {row['text'][:120]!r}")
            print(f"    shown first: {shown[:80]!r}")
            print(f"    batch ({batch.dialect}): {[(s.tag, s.text[:30]) for c in batch.chats for s in c.segments][:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
