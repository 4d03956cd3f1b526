"""Benchmark: streaming against one batch parse, per-chunk latency, and memory on a long stream.

Run: .venv/bin/python benchmarks/bench_stream.py [--quick] [--drift [--seed N --count N]]

- which reader runs: the mypyc-compiled one (``charfmt.stream.COMPILED``, built at install
  where a C compiler is available) or the pure-Python one; with the compiled one, the pure
  one is timed in the same rounds too (same ratios, for context);
- total cost (CPU time) of streaming a reply in 4-character chunks, as a ratio to the
  reference (``json.loads`` + one ``re.finditer`` per body, ``bench_parse.reference``; the
  headline figure) and to one batch ``parse(lenient=True)`` of the same text, all three
  measured interleaved round after round (median of the per-round ratios); the naive
  "re-parse the whole prefix on every chunk" approach as the baseline for context;
- p50/p99 latency of one ``feed()`` call, for a 3 KB and a 300 KB reply (flat = good);
- peak RSS (``VmHWM``) of a fresh process streaming a 50 MB reply (``keep_reply=False``),
  against the same process after import only; it runs the installed charfmt (started in a
  temporary folder, without ``PYTHONPATH``) and says which reader it ran;
- the sentence splitter on the shapes that once were quadratic (a trailing run of ``.``,
  text inside an unclosed 「): CPU time for n and 10n characters in 4-character deltas.

``--prose`` measures how soon replies that ignore the format speak (issue 22.17): the replies
of ``tests/data/prose_replies.txt`` (prose, role-play, quoted speech, brackets, ``<think>``
then prose, chat-template markers), then those and the fuzz cases of ``--seed``/``--count``
written in a prose-like dialect of the table (bracket, roleplay, prose, plain-text), each
streamed in 4-character chunks: how many show their first speech ``TextDelta`` before
``close()``, and that the stream ends as the batch parse does.

``--drift`` measures instead how the stream behaves on what ``charfmt fuzz --seed 1 --count
1500`` generates (``charfmt.fuzz.iter_fuzz_cases``), each reply streamed in 4-character
chunks: of the replies whose lenient parse has speech text, how many have their first
speech ``TextDelta`` before ``close()``, and how many have every emotion of the batch result
emitted before ``close()``; and how often a stream emits a ``Reset`` (overall, and for
replies with an unescaped quote).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).parent))
from bench_parse import make_reply, reference

import charfmt
import charfmt.dialects
import charfmt.stream


def stream_once(text: str, size: int, parser_class: type[charfmt.StreamParser] | None = None) -> float:
    chunks = [text[i : i + size] for i in range(0, len(text), size)]
    start = time.process_time()
    parser = (parser_class or charfmt.StreamParser)()
    for chunk in chunks:
        parser.feed(chunk)
    parser.close()
    return time.process_time() - start


def batch_once(text: str, number: int = 1) -> float:
    """CPU time of one lenient batch parse (the mean over ``number`` calls)."""
    parse = charfmt.parse
    start = time.process_time()
    for _ in range(number):
        parse(text, lenient=True)
    return (time.process_time() - start) / number


def reference_once(text: str, number: int = 1) -> float:
    """CPU time of the reference, ``bench_parse.reference`` (the mean over ``number`` calls)."""
    start = time.process_time()
    for _ in range(number):
        reference(text)
    return (time.process_time() - start) / number


def split_once(text: str, size: int = 4) -> float:
    """CPU time of the sentence splitter over one ``msg`` segment delivered in ``size``-character deltas."""
    tag = charfmt.DEFAULT_TAGS.speech.name
    deltas = [charfmt.TextDelta(0, 0, tag, text[i : i + size]) for i in range(0, len(text), size)]
    start = time.process_time()
    splitter = charfmt.SentenceSplitter()
    splitter.feed(charfmt.ChatStart(0, "C", 1))
    for delta in deltas:
        splitter.feed(delta)
    splitter.feed(charfmt.SegmentEnd(0, 0, tag))
    return time.process_time() - start


def reparse_prefix(text: str, size: int) -> float:
    start = time.perf_counter()
    for end in range(size, len(text) + size, size):
        charfmt.parse(text[:end], lenient=True)
    return time.perf_counter() - start


def latencies(text: str, size: int) -> list[float]:
    chunks = [text[i : i + size] for i in range(0, len(text), size)]
    parser = charfmt.StreamParser(keep_reply=False)
    out = []
    clock = time.perf_counter
    for chunk in chunks:
        t = clock()
        parser.feed(chunk)
        out.append(clock() - t)
    parser.close()
    return out


RSS_SCRIPT = """
import sys, charfmt, charfmt.stream

def hwm():  # peak RSS of this process in KiB (ru_maxrss would report the parent's: it survives exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

size = int(sys.argv[1])
before = hwm()
chat = '{"type":"C","order":%d,"body":"<emo>joy</emo>\\\\n<msg>' + 'わあ、本当ですか！ That is great. ' * 8 + '</msg>"}'
parser = charfmt.StreamParser(keep_reply=False, max_size=1 << 20)
parser.feed('{"chats":[')
written, n, events = 0, 0, 0
while written < size:
    n += 1
    piece = ("," if n > 1 else "") + chat % n
    for i in range(0, len(piece), 1024):
        events += len(parser.feed(piece[i:i + 1024]))
    written += len(piece.encode())
events += len(parser.feed("]}")) + len(parser.close())
after = hwm()
print(before, after, written, n, events, int(charfmt.stream.COMPILED), charfmt.__file__)
"""


def peak_rss(size: int) -> tuple[int, int, int, int, int, bool, str]:
    """Run ``RSS_SCRIPT`` in a fresh interpreter on the installed charfmt (not a source tree's).

    The child starts in an empty temporary folder without ``PYTHONPATH``: ``python -c`` puts
    the current folder first on ``sys.path``, so from a clone it would import the clone's
    ``charfmt`` (pure Python, whatever was installed). Peak RSS is the child's ``VmHWM``.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as cwd:
        done = subprocess.run(
            [sys.executable, "-c", RSS_SCRIPT, str(size)], capture_output=True, text=True, cwd=cwd, env=env, check=False
        )
    if done.returncode != 0:
        raise SystemExit(f"the memory child failed (is charfmt installed for {sys.executable}?):\n{done.stderr}")
    before, after, written, chats, events, compiled, module = done.stdout.split(maxsplit=6)
    return int(before), int(after), int(written), int(chats), int(events), compiled == "1", module.strip()


def drift(seed: int, count: int, size: int = 4) -> dict[str, float]:
    """The early-event figures of ``--drift`` (see the module docstring), as percentages."""
    from charfmt.fuzz import iter_fuzz_cases

    speech_tags = {t.name for t in charfmt.DEFAULT_TAGS.with_role("speech")} | {charfmt.tags.TEXT_TAG}
    with_speech = speech_early = emotions_early = resets = quotes = quote_resets = 0
    for case in iter_fuzz_cases(seed, count):
        text = case.text
        batch = charfmt.parse(text, lenient=True)
        parser = charfmt.StreamParser()
        early: list[charfmt.Event] = []
        for i in range(0, len(text), size):
            early.extend(parser.feed(text[i : i + size]))
        late = parser.close()
        reset = any(isinstance(e, charfmt.Reset) for e in early + late)
        resets += reset
        if "unescaped-quote" in case.mutations:
            quotes += 1
            quote_resets += reset
        speaks = any(s.tag in speech_tags and s.text for c in batch.chats for s in c.segments)
        if not speaks:
            continue
        with_speech += 1
        if any(isinstance(e, charfmt.TextDelta) and e.tag in speech_tags for e in early):
            speech_early += 1
        wanted = [s.text for c in batch.chats for s in c.segments if s.tag == charfmt.DEFAULT_TAGS.emotion.name]
        shown = [e.text for e in early if isinstance(e, charfmt.Emotion)]
        if all(shown.count(w) >= wanted.count(w) for w in set(wanted)) and not (reset and wanted):
            emotions_early += 1
    return {
        "replies": count,
        "with_speech": with_speech,
        "speech_early": 100 * speech_early / max(with_speech, 1),
        "emotions_early": 100 * emotions_early / max(with_speech, 1),
        "reset": 100 * resets / max(count, 1),
        "quote_cases": quotes,
        "quote_reset": quote_resets,
    }


PROSE_CORPUS: Final = Path(__file__).resolve().parent.parent / "tests" / "data" / "prose_replies.txt"
PROSE_LIKE: Final = frozenset(
    rule.name
    for rule in charfmt.dialects.DIALECTS
    if {"prose", "stray"} & set(rule.chains) or rule.name == "plain-text"
)
"""The dialect table's entries for replies that ignore the format: bracket, roleplay, prose, plain-text."""


def prose_corpus(seed: int = 1, count: int = 1500) -> list[str]:
    """Replies that ignore the format: ``tests/data/prose_replies.txt`` (real-looking outputs), then the
    fuzz cases of seed ``seed`` written in a prose-like dialect of the table (``PROSE_LIKE``)."""
    from charfmt.fuzz import DIALECT_MUTATIONS, iter_fuzz_cases

    text = PROSE_CORPUS.read_text(encoding="utf-8")
    body = "\n".join(line for line in text.split("\n") if not line.startswith("#"))
    replies = [r.strip("\n") for r in body.split("\n%%\n") if r.strip()]
    prose_rules = {rule.name for rule in DIALECT_MUTATIONS if rule.dialect in PROSE_LIKE}
    replies += [case.text for case in iter_fuzz_cases(seed, count) if prose_rules & set(case.mutations)]
    return replies


def prose_early(replies: list[str], size: int = 4) -> tuple[int, int, int, int]:
    """Of ``replies`` whose lenient parse has speech: how many, how many show their first speech
    ``TextDelta`` before ``close()`` (in ``size``-character chunks), how many emit a ``Reset``, and
    how many streams end with other chats than the batch parse (must be 0)."""
    speech = {t.name for t in charfmt.DEFAULT_TAGS.with_role("speech")} | {charfmt.tags.TEXT_TAG}
    total = early_n = resets = differ = 0
    for text in replies:
        batch = charfmt.parse(text, lenient=True)
        if not any(s.tag in speech and s.text for c in batch.chats for s in c.segments):
            continue
        total += 1
        parser = charfmt.StreamParser()
        early: list[charfmt.Event] = []
        for i in range(0, len(text), size):
            early.extend(parser.feed(text[i : i + size]))
        late = parser.close()
        early_n += any(isinstance(e, charfmt.TextDelta) and e.tag in speech for e in early)
        resets += any(isinstance(e, charfmt.Reset) for e in early + late)
        differ += charfmt.collect(early + late).chats != batch.chats
    return total, early_n, resets, differ


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--drift", action="store_true", help="early events and resets on fuzz cases (see above)")
    ap.add_argument("--prose", action="store_true", help="first speech before close() on prose replies (see above)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=1500)
    args = ap.parse_args(argv)
    if args.prose:
        hand = prose_corpus(args.seed, 0)
        every = prose_corpus(args.seed, args.count)
        for name, replies in (("tests/data/prose_replies.txt", hand), ("and prose-like fuzz cases", every)):
            total, early_n, resets, differ = prose_early(replies)
            print(
                f"{name}: {total} replies with speech, 4-char chunks: first speech TextDelta before close() "
                f"{100 * early_n / max(total, 1):.1f} % (target >= 90 %); Reset {resets}; stream != batch {differ}"
            )
        return 0
    if args.drift:
        f = drift(args.seed, args.count)
        print(
            f"charfmt fuzz --seed {args.seed} --count {args.count}, 4-char chunks: "
            f"{f['with_speech']:.0f} replies whose lenient parse has speech text"
        )
        print(f"  first speech TextDelta before close(): {f['speech_early']:.1f} %  (target >= 95 %)")
        print(f"  every batch emotion emitted before close(): {f['emotions_early']:.1f} %  (target >= 95 %)")
        print(
            f"  Reset: {f['reset']:.2f} % of {f['replies']:.0f} replies (target <= 0.2 %); "
            f"{f['quote_reset']:.0f} of {f['quote_cases']:.0f} with an unescaped quote (target 0)"
        )
        return 0
    rounds = 31 if args.quick else 301
    text = make_reply(3_000)
    size = 4
    for _ in range(10):  # warm up all three (caches, the grammar's tables)
        stream_once(text, size)
        batch_once(text)
        reference_once(text)
    # The batch parse and the reference are short: time a few calls per round, so that each
    # side of a ratio is of the same order as one streaming pass.
    number = 4
    from charfmt._stream import reader as pure_reader

    pure = pure_reader.StreamParser if charfmt.stream.COMPILED else None
    stream_t, batch_t, ref_t, over_ref, over_batch, pure_over_ref = [], [], [], [], [], []
    for _ in range(rounds):  # interleaved, so all see the same machine state; ratios per round
        ref_t.append(reference_once(text, number))
        stream_t.append(stream_once(text, size))
        batch_t.append(batch_once(text, number))
        over_ref.append(stream_t[-1] / ref_t[-1])
        over_batch.append(stream_t[-1] / batch_t[-1])
        if pure is not None:
            pure_over_ref.append(stream_once(text, size, pure) / ref_t[-1])
    s, b, f = statistics.median(stream_t), statistics.median(batch_t), statistics.median(ref_t)
    r_ref, r_batch = statistics.median(over_ref), statistics.median(over_batch)
    q1, _, q3 = statistics.quantiles(over_ref, n=4)
    naive = reparse_prefix(text, size)
    reader = "mypyc-compiled" if charfmt.stream.COMPILED else "pure-Python"
    print(f"reader: {reader} (charfmt.stream.COMPILED = {charfmt.stream.COMPILED}); Python {sys.version.split()[0]}")
    print(
        f"3 KB reply ({len(text.encode()):,} bytes, {len(text):,} characters), {size}-char chunks, "
        f"{rounds} interleaved rounds, CPU time: streaming {s * 1e3:.3f} ms, reference {f * 1e3:.3f} ms, "
        f"batch lenient {b * 1e3:.3f} ms"
    )
    print(
        f"  streaming = {r_ref:.2f}x the reference (median ratio per round; quartiles {q1:.2f}-{q3:.2f}), "
        f"{r_batch:.2f}x the batch lenient parse"
    )
    if pure_over_ref:
        p1, pm, p3 = statistics.quantiles(pure_over_ref, n=4)
        print(f"  the pure-Python reader, same rounds: {pm:.2f}x the reference (quartiles {p1:.2f}-{p3:.2f})")
    print(f"  baseline, re-parse the prefix on every chunk: {naive * 1e3:.0f} ms -> {naive / b:.0f}x the batch parse")
    for name, target in (("3 KB", 3_000), ("300 KB", 300_000)):
        lat = sorted(latencies(make_reply(target), size))
        p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
        print(
            f"{name}: {len(lat)} feeds, per-chunk latency p50 {p50 * 1e6:.1f} us, "
            f"p99 {p99 * 1e6:.1f} us, max {lat[-1] * 1e6:.0f} us"
        )
    size_mb = 5 if args.quick else 50
    before, after, written, chats, events, child_compiled, module = peak_rss(size_mb * 1_000_000)
    child_reader = "mypyc-compiled" if child_compiled else "pure-Python"
    print(
        f"{written / 1e6:.0f} MB stream ({chats:,} chats, {events:,} events): peak RSS {after / 1024:.0f} MB "
        f"(after import {before / 1024:.0f} MB; +{(after - before) / 1024:.1f} MB; VmHWM of a fresh process "
        f"running the {child_reader} reader of {module})"
    )
    n = 20_000 if args.quick else 200_000
    for name, shape in (("trailing '.' run", lambda k: "." * k), ("unclosed 「", lambda k: "「" + "あ" * k)):
        small = min(split_once(shape(n)) for _ in range(3))
        large = min(split_once(shape(10 * n)) for _ in range(3))
        print(
            f"sentence splitter, {name}: {n:,} chars {small * 1e3:.1f} ms, {10 * n:,} chars "
            f"{large * 1e3:.1f} ms -> x{large / small:.1f} for 10x input"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
