"""Benchmark: charfmt.parse (strict) against json.loads + re.finditer, interleaved in one run.

Run: .venv/bin/python benchmarks/bench_parse.py [--quick] [--json OUT]

All times are CPU time (``time.process_time``), so other load on the machine does not
move them. Prints, per reply size, the median per-call time of each and the median of
the per-round ratios (reference, strict and lenient run interleaved, round after round),
the scaling of charfmt.parse from 3 KB to 3 MB (time ratio divided by size ratio: 1.0
is linear), and the cold start (``import charfmt`` + first parse in a fresh process,
CPU time of the child, a bare interpreter's subtracted).

Which strict reader runs is settled first (``charfmt.parser._READERS.settle()``: the
mypyc-compiled ``charfmt._strict_c`` where it was built from this source, which ``parse``
otherwise loads only after a megabyte of input) and printed; with the compiled one, the
pure-Python one is timed in the same rounds too (the ``pure`` columns).
"""

from __future__ import annotations

import argparse
import html
import json
import random
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import charfmt
from charfmt import parser
from charfmt.writer import escape

REFERENCE_TAG = re.compile(r"<(emo|act|msg|thought)>(.*?)</\1>", re.S)

LINES_JA = [
    "わあ、本当ですか！",
    "まさか、あなたがそこまで知っているなんて…",
    "えへへ、ありがとう♪",
    "もう、知らないっ！",
]
LINES_EN = [
    "Wait, you found it?",
    "That's *amazing* — really!",
    "HP < 50 & falling, run!",
    "Fine. Whatever. 3.5 stars.",
]
EMOJI = ["🎉", "😳", "💢", "✨", ""]
EMOS = ["joy", "surprise", "angry", "sad", "shy", "neutral"]
ACTS = ["jump", "一歩あとずさりする", "crosses arms", "looks away"]
INFO = ["好感度が上がった音がした。", "Mio joined the party.", 'Quest "Lost & Found" updated.']


def _chat(rnd: random.Random, order: int) -> dict[str, Any]:
    kind = rnd.choices("CIE", weights=[6, 2, 1])[0]
    if kind != "C":
        return {"type": kind, "order": order, "body": escape(rnd.choice(INFO))}
    parts = [f"<emo>{rnd.choice(EMOS)}</emo>"]
    if rnd.random() < 0.6:
        parts.append(f"<act>{escape(rnd.choice(ACTS))}</act>")
    for _ in range(rnd.randint(1, 2)):
        line = rnd.choice(LINES_JA + LINES_EN) + rnd.choice(EMOJI)
        parts.append(f"<msg>{escape(line)}</msg>")
    if rnd.random() < 0.2:
        parts.append(f"<thought>{escape(rnd.choice(LINES_JA))}</thought>")
    return {"type": "C", "order": order, "body": "\n".join(parts)}


def make_reply(target_bytes: int, seed: int = 1) -> str:
    """A realistic reply of about ``target_bytes`` UTF-8 bytes (JSON escapes included)."""
    rnd = random.Random(seed)
    chats: list[dict[str, Any]] = []
    size = 12
    while size < target_bytes or not chats:
        chat = _chat(rnd, len(chats) + 1)
        chats.append(chat)
        size += len(json.dumps(chat, ensure_ascii=rnd.random() < 0.3).encode())
    return json.dumps({"chats": chats}, ensure_ascii=False)


def damage(text: str) -> str:
    """What a sloppy model does to a reply: a fence and prose around it, no newlines between
    elements, shouted tag names, an unclosed last message, a trailing comma."""
    doc = json.loads(text)
    for chat in doc["chats"]:
        if chat["type"] == "C":
            chat["body"] = chat["body"].replace("\n<", "<").replace("<msg>", "<MSG>").replace("</msg>", "</MSG>")
    body = json.dumps(doc, ensure_ascii=False).replace("}]}", "},]}")
    return "Sure! Here you go:\n```json\n" + body[: body.rfind("</MSG>")] + "\n```\nAnything else?"


def reference(text: str) -> list[list[tuple[str, str]]]:
    """What a hand-rolled consumer does: json.loads, then one regex over each body."""
    out = []
    for chat in json.loads(text)["chats"]:
        body = chat["body"]
        if chat["type"] == "C":
            out.append([(m.group(1), _unescape(m.group(2))) for m in REFERENCE_TAG.finditer(body)])
        else:
            out.append([("text", _unescape(body))])
    return out


def _unescape(text: str) -> str:
    return html.unescape(text) if "&" in text else text


def _time(fn: Callable[[str], object], text: str, number: int) -> float:
    """CPU seconds per call of ``fn(text)``, over ``number`` calls (a loaded machine does not move it)."""
    start = time.process_time()
    for _ in range(number):
        fn(text)
    return (time.process_time() - start) / number


def _lenient(text: str) -> object:
    return charfmt.parse(text, lenient=True)


def pure_strict() -> Callable[[str], object]:
    """``charfmt.parse`` with the pure-Python strict reader (what ``CHARFMT_PURE_PYTHON=1`` runs)."""
    from charfmt._strict.elements import parse_batch
    from charfmt._strict.fast import read_reply

    pure = parser._Readers()
    pure.fast, pure.batch, pure.compiled = read_reply, parse_batch, False

    def run(text: str) -> object:
        chosen = parser._READERS
        parser._READERS = pure
        try:
            return charfmt.parse(text)
        finally:
            parser._READERS = chosen

    return run


def compare(text: str, rounds: int, budget: float, *, pure: Callable[[str], object] | None = None) -> dict[str, float]:
    """Per-call CPU seconds of reference, strict and lenient parse, and their ratios.

    The three (four with ``pure``: the pure strict reader beside the compiled one) run
    interleaved, round after round; each ratio is the median of the per-round ratios, so a slow stretch
    of the machine hits both sides of a ratio alike.
    """
    runs: dict[str, Callable[[str], object]] = {"reference": reference, "strict": charfmt.parse, "lenient": _lenient}
    if pure is not None:
        runs["pure"] = pure
    for fn in runs.values():  # warm up: caches, compiled patterns
        fn(text)
    one = max(_time(charfmt.parse, text, 1), 1e-6)
    number = max(1, int(budget / rounds / one / len(runs)))
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            samples[name].append(_time(fn, text, number))
    ref, strict, lenient = samples["reference"], samples["strict"], samples["lenient"]
    out = {
        **{k: statistics.median(v) for k, v in samples.items()},
        "ratio": statistics.median(s / r for s, r in zip(strict, ref, strict=True)),
        "lenient_over_strict": statistics.median(le / s for le, s in zip(lenient, strict, strict=True)),
    }
    if pure is not None:
        out["pure_ratio"] = statistics.median(p / r for p, r in zip(samples["pure"], ref, strict=True))
    return out


def cold_start(sample: str, runs: int) -> dict[str, float]:
    """CPU seconds of a fresh process doing ``import charfmt`` + first parse, minus a bare interpreter's."""
    code = f"import charfmt; charfmt.parse({sample!r})"

    def run(args: list[str]) -> float:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, *args], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    bare: list[float] = []
    full: list[float] = []
    for _ in range(runs):  # interleaved
        bare.append(run(["-c", "pass"]))
        full.append(run(["-c", code]))
    return {
        "interpreter": statistics.median(bare),
        "import_and_first_parse": statistics.median(f - b for f, b in zip(full, bare, strict=True)),
    }


def _human(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} KB" if n >= 1e3 else f"{n} B"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument("--json", metavar="OUT", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    rounds, budget = (3, 0.3) if args.quick else (9, 3.0)
    sizes = {"typical": 300, "3KB": 3_000, "300KB": 300_000, "3MB": 3_000_000}
    compiled = parser._READERS.settle()  # (parse itself loads the compiled reader after a megabyte)
    results: dict[str, Any] = {"python": sys.version.split()[0], "compiled": compiled, "sizes": {}}
    reader = "mypyc-compiled (charfmt._strict_c)" if compiled else "pure Python"
    print(f"strict reader: {reader}; Python {results['python']}")
    pure_head = f" {'pure':>11} {'ratio':>6}" if compiled else ""
    print(
        f"{'reply':>8} {'bytes':>9} {'reference':>11} {'strict':>11} {'ratio':>6} {'lenient':>11} {'len/str':>7}"
        + pure_head
    )
    for name, target in sizes.items():
        text = make_reply(target)
        assert [[(s.tag, s.text) for s in c.segments] for c in charfmt.parse(text).chats] == reference(text)
        t = compare(text, rounds, budget, pure=pure_strict() if compiled else None)
        size = len(text.encode())
        results["sizes"][name] = {"bytes": size, **t}
        pure = f" {t['pure'] * 1e6:>9.1f}us {t['pure_ratio']:>5.2f}x" if compiled else ""
        print(
            f"{name:>8} {_human(size):>9} {t['reference'] * 1e6:>9.1f}us {t['strict'] * 1e6:>9.1f}us "
            f"{t['ratio']:>5.2f}x {t['lenient'] * 1e6:>9.1f}us {t['lenient_over_strict']:>6.2f}x" + pure
        )
    s = results["sizes"]
    scaling = {
        "3KB->300KB": (s["300KB"]["strict"] / s["3KB"]["strict"]) / (s["300KB"]["bytes"] / s["3KB"]["bytes"]),
        "300KB->3MB": (s["3MB"]["strict"] / s["300KB"]["strict"]) / (s["3MB"]["bytes"] / s["300KB"]["bytes"]),
    }
    results["scaling"] = scaling
    print("scaling (time ratio / size ratio, 1.00 = linear): " + ", ".join(f"{k} {v:.2f}" for k, v in scaling.items()))
    damaged: dict[str, Any] = {}
    for name in ("3KB", "300KB", "3MB"):
        text = damage(make_reply(sizes[name]))
        reply = charfmt.parse(text, lenient=True)
        assert reply.chats and not any(d.code == "CF999" for d in reply.diagnostics)
        per_call = statistics.median(_time(_lenient, text, 1) for _ in range(rounds // 2 + 1))
        damaged[name] = {"bytes": len(text.encode()), "lenient": per_call}
    d = damaged
    damaged_scaling = {
        "3KB->300KB": (d["300KB"]["lenient"] / d["3KB"]["lenient"]) / (d["300KB"]["bytes"] / d["3KB"]["bytes"]),
        "300KB->3MB": (d["3MB"]["lenient"] / d["300KB"]["lenient"]) / (d["3MB"]["bytes"] / d["300KB"]["bytes"]),
    }
    results["damaged"] = {"sizes": damaged, "scaling": damaged_scaling}
    print(
        "damaged input, lenient: "
        + ", ".join(f"{k} {v['lenient'] * 1e3:.1f} ms" for k, v in damaged.items())
        + "; scaling "
        + ", ".join(f"{k} {v:.2f}" for k, v in damaged_scaling.items())
    )
    results["cold_start"] = cold_start(make_reply(300), 3 if args.quick else 7)
    print(
        f"cold start: import charfmt + first parse {results['cold_start']['import_and_first_parse'] * 1e3:.0f} ms "
        f"(bare interpreter {results['cold_start']['interpreter'] * 1e3:.0f} ms)"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
