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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--half", choices=("fit", "tune", "all"), default="fit")
    ap.add_argument("--chunk", type=int, default=4)
    ap.add_argument("--told", action="store_true", help="tell each stream its request's turn and prompt")
    ap.add_argument("--list", action="store_true", help="print every reset reply")
    args = ap.parse_args(argv)
    rows = bench.load(args.half)
    known = bench.told(rows) if args.told else {}
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
        real[kind] += row["kind"] in ("real", "real2", "real3")
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
