"""Build the stream corpus: ``benchmarks/data/stream_corpus.jsonl`` (issue 40, item 6).

Replies as models write them, for how soon a stream speaks (``benchmarks/bench_stream_early.py``):

- ``real``: the real free replies of SmolLM2 and Gemma 3 (``tests/data/free_replies.jsonl``, with
  the chunks they streamed in, and ``tests/data/real_replies.jsonl``), the replies written by hand
  after them (``tests/data/prose_replies.txt``: prose, role-play, quotes, brackets, CJK) and the
  example replies (``examples/replies``);
- ``real2``: the lenient reader's later corpora of real model output, never used to tune the stream
  (``tests/data/new_replies.jsonl``, ``fresh_``, ``third_``, ``fourth_replies.jsonl``: 540 free replies of
  SmolLM2 and Gemma 3 on the settings of ``tests/data/new_characters``, in English, Japanese, French,
  Spanish, German, Korean and Chinese, each with the chunks it streamed in);
- ``real3``: the sixth corpus (``tests/data/sixth_replies.jsonl``), the same way (the third round's claim);
- ``real4``: the seventh corpus (``tests/data/seventh_replies.jsonl``), the same way (the fourth round's claim);
- ``real5``: the eighth corpus (``tests/data/eighth_replies.jsonl``), the same way (the fifth round's claim);
- ``real6``: the ninth and tenth corpora (``tests/data/ninth_``, ``tenth_replies.jsonl``), the same way (the
  sixth round's claim);
- ``real7``: the eleventh corpus (``tests/data/eleventh_replies.jsonl``), the same way (the seventh round's claim);
- ``off-format``: the English, Japanese and Chinese lines and paragraphs of the token corpus
  (``token_corpus.jsonl``: prose, quoted speech, CJK) and its real model output, sent as they are;
- ``bare-tags``, ``json``, ``damaged``: the same lines as the character's speech, written as bare
  tags (``<emo>…</emo>`` then ``<msg>…</msg>``, ``& < >`` as entities: the issue's stall), as a
  canonical reply, and as that reply damaged by ``charfmt.fuzz.apply_mutations`` (1 to 2 mutations).

Each row is ``{"id", "kind", "source", "half", "text", "chunks"}``: ``chunks`` are the pieces
the reply streamed in where it was recorded (else ``null``: the benchmark cuts it itself);
``half`` ("fit" or "held") splits the corpus by the SHA-256 of the id. The stream's heuristics are
tuned on "fit" only, and the figures reported on "held".

Claims: the held rows of ``real``, ``off-format``, ``bare-tags``, ``json`` and ``damaged`` were read at
the end of issue 40's first round (93.2 % speech before ``close()``, 1.68 % Resets) and so can no longer
carry a claim: from then on they are tuning data like the fit rows. The ``real2`` rows were added
afterwards and committed unread; their held half was the claim of the second round, read once at its end,
and is tuning data since. The ``real3`` rows (``tests/data/sixth_replies.jsonl``: 108 free replies of SmolLM2
and Gemma 3 on the sixth set's four settings, made after the stream's third round was tuned and never read by
it) carried the third round's claim: their held half, read once at its end, and tuning data since. The ``real4``
rows (``tests/data/seventh_replies.jsonl``: 108 free replies on the seventh set's four settings, made after the
stream's fourth round was tuned and never read by it) carried the fourth round's claim: their held half, read once
at its end, and tuning data since. The ``real5`` rows (``tests/data/eighth_replies.jsonl``: 108 free replies on the
eighth set's four settings, never read by the stream's rounds) carried the fifth round's claim: their held half,
read once at its end, and tuning data since. The ``real6`` rows (``tests/data/ninth_`` and ``tenth_replies.jsonl``:
216 free replies on eight settings, read by the lenient reader's rounds but never by the stream's) carried the
sixth round's claim: their held half, read once at its end, and tuning data since. The ``real7`` rows
(``tests/data/eleventh_replies.jsonl``: 108 free replies on four settings, never read by the stream's rounds) carry
the seventh round's claim: their held half, read once.

Run from the repository root: it keeps the rows the file holds as they are and adds the rows of ids it
lacks (a kind added since, as ``real3`` was), since the seeded ``damaged``, ``bare-tags`` and ``json`` rows
depend on ``charfmt.fuzz``, which has changed since they were made (``--fresh`` writes every row anew)::

    python benchmarks/data/make_stream_corpus.py [--fresh]
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

import charfmt  # noqa: E402
from charfmt.fuzz import MUTATIONS, apply_mutations  # noqa: E402

SEED: Final = 40
HERE: Final = Path(__file__).resolve().parent
OUT: Final = HERE / "stream_corpus.jsonl"
EMOTIONS: Final = ("joy", "sad", "angry", "surprise", "neutral")


def half(key: str) -> str:
    return "fit" if hashlib.sha256(key.encode()).digest()[0] % 2 == 0 else "held"


def row(key: str, kind: str, source: str, text: str, chunks: list[str] | None = None) -> dict[str, Any]:
    return {"id": key, "kind": kind, "source": source, "half": half(key), "text": text, "chunks": chunks}


def real() -> list[dict[str, Any]]:
    rows = []
    for n, line in enumerate((ROOT / "tests" / "data" / "free_replies.jsonl").read_text(encoding="utf-8").splitlines()):
        r = json.loads(line)
        rows.append(row(f"free-{n:03d}", "real", "tests/data/free_replies.jsonl", r["reply"], r["chunks"]))
    for n, line in enumerate((ROOT / "tests" / "data" / "real_replies.jsonl").read_text(encoding="utf-8").splitlines()):
        rows.append(row(f"realr-{n:03d}", "real", "tests/data/real_replies.jsonl", json.loads(line)["reply"]))
    text = (ROOT / "tests" / "data" / "prose_replies.txt").read_text(encoding="utf-8")
    body = "\n".join(line for line in text.split("\n") if not line.startswith("#"))
    for n, reply in enumerate(r.strip("\n") for r in body.split("\n%%\n") if r.strip()):
        rows.append(row(f"prose-{n:03d}", "real", "tests/data/prose_replies.txt", reply))
    for path in sorted((ROOT / "examples" / "replies").glob("*.json")):
        rows.append(
            row(
                f"example-{path.stem}",
                "real",
                f"examples/replies/{path.name}",
                path.read_text(encoding="utf-8").strip(),
            )
        )
    return rows


LATER: Final = ("new", "fresh", "third", "fourth")
"""The later real corpora of ``tests/data`` (``<name>_replies.jsonl``), in the order they were made."""


NEWEST: Final = ("sixth",)
"""The corpora of ``tests/data`` made after the stream's third round had been tuned: the ``real3`` rows."""

FOURTH_CLAIM: Final = ("seventh",)
"""The corpora of ``tests/data`` made after the stream's fourth round had been tuned: the ``real4`` rows."""

FIFTH_CLAIM: Final = ("eighth",)
"""The corpus of ``tests/data`` never read by the stream's rounds before its fifth: the ``real5`` rows."""

SIXTH_CLAIM: Final = ("ninth", "tenth")
"""The corpora of ``tests/data`` never read by the stream's rounds before its sixth: the ``real6`` rows."""

SEVENTH_CLAIM: Final = ("eleventh",)
"""The corpus of ``tests/data`` never read by the stream's rounds before its seventh: the ``real7`` rows."""


def real2(names: tuple[str, ...] = LATER, kind: str = "real2") -> list[dict[str, Any]]:
    """The ``real2`` rows (``real3``: of ``NEWEST``): every reply of those corpora, with the chunks it streamed in."""
    rows = []
    for name in names:
        path = ROOT / "tests" / "data" / f"{name}_replies.jsonl"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            r = json.loads(line)
            rows.append(row(f"{name}-{n:03d}", kind, f"tests/data/{path.name}", r["reply"], r["chunks"]))
    return rows


def lines() -> list[tuple[str, str]]:
    """``(id, text)`` of the token corpus's prose, CJK and model output (no JSON, prompts or adversarial runs)."""
    out = []
    for line in (HERE / "token_corpus.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r["group"] in ("en", "ja", "zh", "model_output") and r["text"].strip():
            out.append((r["id"], r["text"]))
    return out


def escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def speech(text: str) -> str:
    """``text`` as one line of speech (the body language has no line break inside an element)."""
    return " ".join(text.split())


def variants(key: str, text: str, rng: random.Random) -> list[dict[str, Any]]:
    said = speech(text)
    emotion = rng.choice(EMOTIONS)
    rows = [row(f"{key}/off", "off-format", "token_corpus.jsonl", text)]
    if not said:
        return rows
    bare = f"<emo>{emotion}</emo>\n<msg>{escaped(said)}</msg>"
    reply = charfmt.Reply(
        chats=[
            charfmt.Chat(
                type="C",
                order=1,
                segments=[charfmt.Segment(tag="emo", text=emotion), charfmt.Segment(tag="msg", text=said)],
            )
        ]
    )
    canonical = charfmt.dumps(reply)
    broken, _ = apply_mutations(canonical, rng.sample(sorted(MUTATIONS), k=len(MUTATIONS)), rng, rng.randint(1, 2))
    rows.append(row(f"{key}/bare", "bare-tags", "token_corpus.jsonl", bare))
    rows.append(row(f"{key}/json", "json", "token_corpus.jsonl", canonical))
    rows.append(row(f"{key}/damaged", "damaged", "token_corpus.jsonl", broken))
    return rows


def main(argv: list[str] | None = None) -> int:
    fresh = "--fresh" in (sys.argv[1:] if argv is None else argv)
    rng = random.Random(SEED)
    rows = real()
    for key, text in lines():
        rows.extend(variants(key, text, rng))
    rows.extend(real2())  # last, so that the rows before it (and the seeded mutations) stay as they were
    rows.extend(real2(NEWEST, "real3"))  # (after them: the rows before stay as they were)
    rows.extend(real2(FOURTH_CLAIM, "real4"))
    rows.extend(real2(FIFTH_CLAIM, "real5"))
    rows.extend(real2(SIXTH_CLAIM, "real6"))
    rows.extend(real2(SEVENTH_CLAIM, "real7"))
    if OUT.exists() and not fresh:  # the rows made before are kept as they are (tuning data, claims read):
        kept = [json.loads(line) for line in OUT.read_text(encoding="utf-8").splitlines()]  # ``charfmt.fuzz``
        known = {r["id"] for r in kept}  # has changed since the damaged rows were made; only new ids are added
        rows = kept + [r for r in rows if r["id"] not in known]
    with OUT.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    kinds: dict[str, int] = {}
    for r in rows:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    print(f"{OUT.relative_to(ROOT)}: {len(rows)} replies {kinds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
