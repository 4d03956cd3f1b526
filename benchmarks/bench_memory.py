"""Benchmark: peak memory per input byte for strict, lenient and stream parsing.

Run: .venv/bin/python benchmarks/bench_memory.py [--quick] [--method rss|tracemalloc|both]

Each measurement runs in a fresh subprocess that imports charfmt, reads the input (bytes,
from a file the parent wrote, so building it costs the child nothing) and then parses it:

* ``rss``: the growth of the process's peak resident set (``ru_maxrss``) over the
  baseline taken after the import and the read. What the operating system sees.
* ``tracemalloc``: the peak of Python allocations traced from after the read to the end
  of the parse. Exact, but slower, and blind to memory outside Python's allocators.

Figures are bytes of peak memory per byte of input. The parse result is alive at the
peak, so the figure includes the ``Reply`` itself. Inputs: many tiny chats (the worst
case: most objects per byte), typical chats (mixed elements, Japanese and English),
and one long message; ``fenced`` variants wrap the reply in prose and a markdown fence,
so lenient parsing and the stream take the recovery path.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

SIZES = {"1 MB": 1_000_000, "10 MB": 10_000_000}
CHUNK = 4096
"""Bytes per ``StreamParser.feed`` call."""


def tiny(size: int) -> bytes:
    """Chats of about 50 bytes each: ``{"type":"C","order":N,"body":"<msg>hi</msg>"}``."""
    out, total, order = [], 12, 0
    while total < size:
        order += 1
        chat = f'{{"type":"C","order":{order},"body":"<msg>hi</msg>"}}'
        out.append(chat)
        total += len(chat) + 1
    return ('{"chats":[' + ",".join(out) + "]}").encode()


def typical(size: int) -> bytes:
    """Chats like real replies: emotion, action, one or two lines, sometimes inner voice."""
    rnd = random.Random(7)
    lines = ["わあ、本当ですか！", "Wait, you found it?", "HP &lt; 50 &amp; falling, run!", "えへへ、ありがとう♪"]
    out, total, order = [], 12, 0
    while total < size:
        order += 1
        parts = [f"<emo>{rnd.choice(['joy', 'sad', 'angry'])}</emo>", "<act>looks away</act>"]
        parts += [f"<msg>{rnd.choice(lines)}</msg>" for _ in range(rnd.randint(1, 2))]
        if rnd.random() < 0.2:
            parts.append("<thought>（まさか…）</thought>")
        chat = json.dumps({"type": "C", "order": order, "body": "\n".join(parts)}, ensure_ascii=False)
        out.append(chat)
        total += len(chat.encode()) + 1
    return ('{"chats":[' + ",".join(out) + "]}").encode()


def long_message(size: int) -> bytes:
    text = "あいうえお、かきくけこ。Hello there! " * (size // 52)
    return json.dumps({"chats": [{"type": "C", "order": 1, "body": f"<msg>{text}</msg>"}]}, ensure_ascii=False).encode()


def fenced(make: Callable[[int], bytes]) -> Callable[[int], bytes]:
    return lambda size: b"Sure! Here is the reply:\n```json\n" + make(size - 40) + b"\n```\n"


INPUTS: dict[str, tuple[Callable[[int], bytes], tuple[str, ...]]] = {
    "tiny chats": (tiny, ("strict", "lenient", "stream")),
    "typical chats": (typical, ("strict", "lenient", "stream")),
    "one long message": (long_message, ("strict", "lenient", "stream")),
    "tiny chats, fenced": (fenced(tiny), ("lenient", "stream")),
    "typical chats, fenced": (fenced(typical), ("lenient", "stream")),
}


def child(mode: str, path: str, method: str) -> None:
    """Parse the input at ``path`` once; print the peak memory growth in bytes (JSON)."""
    import contextlib
    import gc
    import resource
    import tracemalloc

    import charfmt

    data = Path(path).read_bytes()
    limit = 2 * len(data)
    gc.collect()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if method == "tracemalloc":
        tracemalloc.start()
    if mode == "stream":
        parser = charfmt.StreamParser(max_size=limit)
        for i in range(0, len(data), CHUNK):
            parser.feed(data[i : i + CHUNK])
        parser.close()
        result = parser.reply
    else:
        with contextlib.suppress(charfmt.ParseError):
            result = charfmt.parse(data, lenient=mode == "lenient", max_size=limit)
    if method == "tracemalloc":
        peak = tracemalloc.get_traced_memory()[1]
    else:
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024  # KiB on Linux
    print(json.dumps({"peak": peak, "size": len(data), "chats": len(result.chats)}))


def measure(mode: str, path: Path, method: str) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(path), method],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the 1 MB inputs only")
    ap.add_argument("--method", choices=["rss", "tracemalloc", "both"], default="both")
    ap.add_argument("--only", default="", help="run only inputs whose name contains this text")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "PATH", "METHOD"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    methods = ["rss", "tracemalloc"] if args.method == "both" else [args.method]
    sizes = {"1 MB": SIZES["1 MB"]} if args.quick else SIZES
    print("peak memory growth per input byte (each figure from a fresh process; the Reply is alive at the peak)")
    head = "".join(f" {m + ' B/B':>15} {m + ' MB':>15}" for m in methods)
    print(f"{'input':<24} {'size':>6} {'mode':<8} {'chats':>8}{head}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (make, modes) in INPUTS.items():
            if args.only not in name:
                continue
            for label, size in sizes.items():
                path = Path(tmp) / "input.bin"
                path.write_bytes(make(size))
                for mode in modes:
                    cells, chats = "", 0
                    for method in methods:
                        r = measure(mode, path, method)
                        chats = r["chats"]
                        cells += f" {r['peak'] / r['size']:>15.1f} {r['peak'] / 1e6:>15.1f}"
                    print(f"{name:<24} {label:>6} {mode:<8} {chats:>8,}{cells}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
