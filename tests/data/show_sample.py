"""Print a hand-judged sample of ``JUDGED.md`` beside its reads: each raw reply, its chats and diagnostics.

``python tests/data/show_sample.py SET``: the sample of ``SET`` judged in ``JUDGED.md``, the rows whose number n in
the set has ``n % 5 == k`` and ``n < 100``, where k is the round's own (``ROUND_RULE``; every other set, from the
first round's ``held`` and ``tune`` halves of ``new_replies.jsonl`` to the ``twelfth``, and the ``sixteenth``: 2),
each read as ``tests/lenient/test_new_corpus.py`` reads it (the setting's tags and vocabulary, told the turn and the
prompt), with whether the stream's chats equal the batch's and how many ``Reset`` events it sent.
``--rows N ...`` prints those rows of the set instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# tests/ (the helpers) and the folders of the test files read here
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lenient"))  # test_new_corpus
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stream"))  # test_stream_events

import test_new_corpus as corpus
from test_stream_events import _stream

import charfmt

ROUND_RULE = {"seventh": 3, "eighth": 4, "ninth": 1, "tenth": 0, "thirteenth": 4, "fourteenth": 3, "fifteenth": 1}
"""Each round's own k of its sample's rule ``n % 5 == k`` (``JUDGED.md``), where it is not 2."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = ("sixteenth", "fifteenth", "fourteenth", "thirteenth", "twelfth", "eleventh", "tenth", "ninth", "eighth",
             "seventh", "sixth", "fifth", "fourth", "third", "fresh", "held", "tune")  # fmt: skip
    parser.add_argument("set", choices=names)
    parser.add_argument("--rows", type=int, nargs="*", help="these rows of the set, not the sample")
    args = parser.parse_args(argv)
    # (each set read only once the reader was frozen for its round: a new set is added here, and to
    # test_new_corpus.py, only after its sample was judged)
    sets = {name: getattr(corpus, name.upper()) for name in names if name not in ("held", "tune")}
    rows = sets[args.set] if args.set in sets else [r for r in corpus.ROWS if r["half"] == args.set]
    rule = ROUND_RULE.get(args.set, 2)
    picked = args.rows if args.rows else [n for n in range(len(rows)) if n % 5 == rule and n < 100]
    for n in picked:
        row = rows[n]
        reply = corpus.read(row)
        events = _stream(row["chunks"], lenient=True, **corpus.options(row))
        batch = charfmt.parse(row["reply"], lenient=True, **corpus.options(row))
        same = charfmt.collect(events).chats == batch.chats
        resets = sum(isinstance(e, charfmt.Reset) for e in events)
        print(f"=== #{n} {row['model']}/{row['chat_format'] or 'default'} {row['setting']} t{row['turn_index']}: "
              f"{row['turn']!r}")  # fmt: skip
        print(row["reply"])
        print(f"--- read (stream's chats the batch's: {same}; resets: {resets})")
        for chat in reply.chats:
            print(f"  chat {chat.type} {chat.order} {chat.speaker or ''}:", [(s.tag, s.text) for s in chat.segments])
        for d in reply.diagnostics:
            if d.code != "CF701":
                print(f"  {d.code} @{d.offset}-{d.end}: {d.message}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
