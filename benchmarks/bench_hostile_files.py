"""Benchmark: cards, scenes and stage maps from strangers (issue 38): memory and time under attack.

Run: .venv/bin/python benchmarks/bench_hostile_files.py [--quick] [--rounds N]

1. **PNG bombs**: the peak resident memory (``VmHWM``) of a fresh child running
   ``charfmt render --character BOMB --say hi``, for each bomb (about 1 MB each: sixty 16 MiB
   ``zTXt``/``iTXt`` chunks) and for a plain card as the baseline. The bound: 100 MB.
2. **Misspelt stage keys**: CPU time to load (and fail on) a character file with 10,000
   ``[stage.emotions.*]`` tables naming no emotion key, with 10 and with 10,000 emotion keys
   (median of the rounds). The bound: 1 s.
3. **Example lines**: CPU time of ``Character.from_bytes`` and ``cards.greeting`` on a card whose
   ``mes_example`` or ``first_mes`` holds N/4 and N lines (N = 800,000; 200,000 for the greeting, which is read
   whole), the two sizes interleaved round after round from a collected heap; the figure is
   the median of the rounds' ratios (linear: 4x; the quadratic code this replaced: 16x or more).
   The bound: 6x.

CPU time is ``time.process_time`` (other load on the machine does not count); memory is the
child's own high-water mark. ``--quick``: a tenth of the sizes in part 3, three rounds.
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import charfmt
from charfmt._png import blank_png
from charfmt.prompt.cards import greeting

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20
PEAK_BOUND_MB = 100
STAGE_BOUND_S = 1.0
RATIO_BOUND = 6.0


# --- 1. PNG bombs ------------------------------------------------------------------------------------


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png(*chunks: bytes) -> bytes:
    image = blank_png()
    return image[:-12] + b"".join(chunks) + image[-12:]


def bombs() -> dict[str, bytes]:
    """Each PNG bomb, and a plain card (the baseline), by name."""
    zeros = zlib.compress(b"\0" * (16 * MiB), 9)
    letters = zlib.compress(b"A" * (16 * MiB), 9)
    card = base64.b64encode(json.dumps({"spec": "chara_card_v2", "data": {"name": "A", "description": "d"}}).encode())
    itxt = [_chunk(b"iTXt", k + b"\0\x01\x00\0\0" + zeros) for k in (b"ccv3", b"chara")]
    return {
        "plain card (baseline)": _png(_chunk(b"tEXt", b"chara\0" + card)),
        "60 x 16 MiB zTXt 'Comment'": _png(*[_chunk(b"zTXt", b"Comment\0\0" + zeros)] * 60),
        "60 x 16 MiB zTXt 'chara' (base64 text)": _png(*[_chunk(b"zTXt", b"chara\0\0" + letters)] * 60),
        "60 x 16 MiB iTXt 'ccv3'/'chara'": _png(*itxt * 30),
    }


_PEAK = (
    "import sys\n"
    "from charfmt.cli import main\n"
    "status = main(sys.argv[1:])\n"
    "with open('/proc/self/status') as f:\n"
    "    print(next(line.split()[1] for line in f if line.startswith('VmHWM:')), file=sys.stderr)\n"
)


def peak_mb(path: Path) -> tuple[float, float]:
    """``charfmt render --character PATH`` in a fresh child: its peak resident memory in MB, and seconds."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, "render", "--character", str(path), "--say", "hi"],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    return int(done.stderr.strip().splitlines()[-1]) / 1024, time.monotonic() - start


def part_bombs() -> bool:
    print(f"1. PNG bombs: peak memory of `charfmt render --character BOMB` (bound: {PEAK_BOUND_MB} MB)")
    ok = True
    with tempfile.TemporaryDirectory() as folder:
        for name, data in bombs().items():
            path = Path(folder) / "card.png"
            path.write_bytes(data)
            peak, seconds = peak_mb(path)
            ok &= peak < PEAK_BOUND_MB
            print(f"   {name:<42} {len(data) / 1e6:6.2f} MB file  {peak:6.1f} MB peak  {seconds:5.2f} s", flush=True)
    return ok


# --- 2. misspelt stage keys ----------------------------------------------------------------------------


def misspelt(keys: int, tables: int) -> str:
    """A character file: ``keys`` emotion keys, ``tables`` stage tables naming none of them."""
    lines = ['name = "Ann"', 'persona = "p"']
    for i in range(keys):
        lines += ["[[emotions]]", f'key = "emotion{i}"']
    for i in range(tables):
        lines += [f"[stage.emotions.emotoin{i}]", 'vrm = "happy"']
    return "\n".join(lines)


def cpu(fn: Callable[[], object]) -> float:
    gc.collect()
    start = time.process_time()
    fn()
    return time.process_time() - start


def _fails(text: str) -> None:
    try:
        charfmt.Character.from_toml(text, "c.toml")
    except charfmt.CharacterError:
        return
    raise AssertionError("the misspelt keys loaded")


def _timed_failure(text: str) -> float:
    return cpu(lambda: _fails(text))


def part_stage(rounds: int) -> bool:
    print(f"2. 10,000 misspelt stage keys: CPU time to load and fail (bound: {STAGE_BOUND_S:.0f} s)")
    ok = True
    for keys in (10, 10_000):
        text = misspelt(keys, 10_000)
        seconds = statistics.median(_timed_failure(text) for _ in range(rounds))
        ok &= seconds < STAGE_BOUND_S
        print(f"   with {keys:>6,} emotion keys: {seconds * 1e3:7.1f} ms", flush=True)
    return ok


# --- 3. example lines ------------------------------------------------------------------------------------


def card(**fields: str) -> bytes:
    return json.dumps({"spec": "chara_card_v2", "data": {"name": "Ann", "description": "d", **fields}}).encode()


SHAPES: dict[str, tuple[Callable[[int], bytes], int]] = {
    "mes_example: one reply turn of N lines": (lambda n: card(mes_example="{{char}}: hi\n" + "and on\n" * n), 800_000),
    "mes_example: N lines of turns": (lambda n: card(mes_example="{{user}}: a\n{{char}}: *b* c\n" * (n // 2)), 800_000),
    "mes_example: N blank lines": (lambda n: card(mes_example="{{char}}: hi" + "\n" * n + "x"), 800_000),
    "mes_example: N <START> lines": (lambda n: card(mes_example="<START>\n" * n + "{{char}}: hi"), 800_000),
    "first_mes: N lines": (lambda n: card(first_mes="*waves* Hello there.\n" * n), 200_000),
}


def _read(data: bytes) -> object:
    """A card read, its greeting too (``cards.greeting``: read when a session starts, not when the card loads)."""
    character = charfmt.Character.from_bytes(data, "c.json", max_size=len(data) + 1)
    return greeting(character, 0, lambda text: text)


def _timed_load(data: bytes) -> float:
    return cpu(lambda: _read(data))


def part_lines(rounds: int, quick: bool) -> bool:
    print(f"3. example lines: CPU time at N/4 and N lines, median ratio of {rounds} rounds (bound: {RATIO_BOUND:.0f}x)")
    ok = True
    for name, (make, full) in SHAPES.items():
        n = full // 10 if quick else full
        small, large = make(n // 4), make(n)
        _timed_load(small)  # caches (grammar tables) outside the timing
        smalls, larges = [], []
        for _ in range(rounds):
            smalls.append(_timed_load(small))
            larges.append(_timed_load(large))
        ratio = statistics.median(b / max(a, 1e-6) for a, b in zip(smalls, larges, strict=True))
        ok &= ratio < RATIO_BOUND
        print(
            f"   {name:<40} N={n:>9,}  {statistics.median(smalls) * 1e3:8.1f} ms -> "
            f"{statistics.median(larges) * 1e3:8.1f} ms  {ratio:4.1f}x",
            flush=True,
        )
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of the sizes in part 3, three rounds")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per measurement (default 5, --quick 3)")
    args = ap.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 5)
    ok = part_bombs() & part_stage(rounds) & part_lines(rounds, args.quick)
    print("all within their bounds" if ok else "OVER A BOUND")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
