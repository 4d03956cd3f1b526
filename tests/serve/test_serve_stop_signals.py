"""``charfmt serve`` stopped by a signal closes its store first (found by a newcomer's trial).

SIGTERM (docker, systemd) left a SQLite store's write-ahead log (``-wal``, ``-shm``) beside it: uvicorn raises
the signal again once the server has stopped, SIGTERM's default action ended the process there, and the store
was closed only in a ``finally`` that never ran. Ctrl-C, the way the banner says to stop it, ended with
``charfmt: error: interrupted`` after a clean stop; it now says the server stopped (still exit 130).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

REX = ROOT / "examples" / "characters" / "rex.toml"
sys.path.insert(0, str(Path(__file__).parents[1] / "prompt"))
from test_lore_prompt import CARD  # noqa: E402


def _serve_then(sig: signal.Signals, store: Path) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "charfmt", "serve", "--character", str(REX), "--upstream", "http://127.0.0.1:9/v1",
           "--port", "0", "--store", str(store)]  # fmt: skip
    with subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True) as app:
        try:
            assert app.stderr is not None
            seen = []
            while not seen or ("startup complete" not in seen[-1] and seen[-1]):  # uvicorn's: serving
                seen.append(app.stderr.readline())
            assert store.exists() and Path(f"{store}-wal").exists(), seen  # (open: its log beside it)
            app.send_signal(sig)
            code = app.wait(30)
        finally:
            app.kill()
        return code, "".join(seen) + (app.stderr.read() if app.stderr else "")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_server_has_closed_its_store(sig: signal.Signals, tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite3"
    code, err = _serve_then(sig, store)
    assert code == (-signal.SIGTERM if sig == signal.SIGTERM else 130), err  # (a shell says 143 / 130)
    assert "Traceback" not in err and "error" not in err.lower(), err
    assert not Path(f"{store}-wal").exists() and not Path(f"{store}-shm").exists(), sorted(tmp_path.iterdir())
    said = "charfmt serve: stopped (Ctrl-C)" if sig == signal.SIGINT else "charfmt serve: stopped (SIGTERM)"
    assert err.rstrip().endswith(said), err  # (SIGTERM said nothing: found by a newcomer's trial)


def test_a_book_given_twice_is_said_as_the_server_starts(tmp_path: Path) -> None:
    """``serve --character card.json --lorebook card.json`` read the card's book once, as it should, but said
    nothing (``render`` warns CF946): found by a newcomer's trial."""
    card = tmp_path / "mira.json"
    card.write_text(json.dumps(CARD), encoding="utf-8")  # (a V2 card with a character_book)
    cmd = [sys.executable, "-m", "charfmt", "serve", "--character", str(card), "--lorebook", str(card), "--upstream",
           "http://127.0.0.1:9/v1", "--port", "0", "--memory"]  # fmt: skip
    with subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True) as app:
        try:
            assert app.stderr is not None
            seen = [app.stderr.readline()]
            while "listening on" not in seen[-1] and seen[-1]:
                seen.append(app.stderr.readline())
        finally:
            app.kill()
    assert any("warning: CF946 lorebook" in line and "read once" in line for line in seen), seen
