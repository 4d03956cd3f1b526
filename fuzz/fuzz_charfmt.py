"""Coverage-guided fuzzing of parse, stream and render with atheris (opt-in, not in the test run).

Run: .venv/bin/pip install atheris && .venv/bin/python fuzz/fuzz_charfmt.py -max_total_time=1800 fuzz/corpus

The corpus folder is seeded from tests/cases/ on first run. A crash is any exception
other than the ones charfmt promises (``ParseError`` from strict parsing,
``CharfmtError`` subclasses from rendering), or a broken invariant: lenient parsing
reports an internal error, a stream disagrees with the batch result, a rendered user
turn does not read back. libFuzzer writes the input as ``crash-*``; turn each into a
named case in tests/cases/fuzz_regressions.txt.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

with atheris.instrument_imports():
    import charfmt  # noqa: F401 (instrumented for coverage)
    from charfmt.fuzz import check as check_invariants


def check(data: bytes) -> None:
    """One fuzz input, as bytes or as text, in chunks whose size the input picks."""
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, 2)
    chunk = fdp.ConsumeIntInRange(1, 9)
    raw = fdp.ConsumeBytes(fdp.remaining_bytes())
    if mode == 0:
        check_invariants(raw, chunk)
    else:
        check_invariants(raw.decode("utf-8", errors="surrogateescape" if mode == 1 else "replace"), chunk)


def seed(corpus: Path) -> None:
    """Fill an empty corpus with every case input of the test suite."""
    corpus.mkdir(parents=True, exist_ok=True)
    if any(corpus.iterdir()):
        return
    cases = Path(__file__).resolve().parent.parent / "tests" / "cases"
    n = 0
    for path in sorted(cases.glob("*.txt")):
        for block in path.read_text(encoding="utf-8").split("\n=== ")[1:]:
            body = block.partition("\n")[2].rpartition("\n---\n")[0].replace("\u2038", "")
            (corpus / f"seed-{n:04d}").write_bytes(b"\x01" + body.encode())
            n += 1


if __name__ == "__main__":
    corpus_args = [a for a in sys.argv[1:] if not a.startswith("-")]
    for folder in corpus_args:
        seed(Path(folder))
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()
