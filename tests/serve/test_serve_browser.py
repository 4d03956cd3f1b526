"""The playground page in headless Chromium: load it, send a turn, see what it shows; a screenshot is kept."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import ROOT

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
pytest.importorskip("websockets")

from charfmt import Character  # noqa: E402
from charfmt.serve import Settings, create_app  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback  # noqa: E402

REX = ROOT / "examples" / "characters" / "rex.toml"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--window-size=1200,800",
)  # fmt: skip
ARTIFACT = Path(os.environ.get("CHARFMT_ARTIFACTS") or ROOT / ".artifacts")
"""Where the screenshot is kept ($CHARFMT_ARTIFACTS, else .artifacts/ in the checkout, which git ignores)."""


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class _Page:
    """A page in headless Chromium, driven over the DevTools protocol (Runtime.evaluate, Page.captureScreenshot)."""

    def __init__(self, browser: str, url: str, profile: str) -> None:
        self.proc = subprocess.Popen(
            [browser, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", url],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        port_file = Path(profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.is_file() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("Chromium did not open its DevTools port")
            time.sleep(0.05)
        port = port_file.read_text().split()[0]
        pages = []
        while not pages and time.monotonic() < deadline:
            listed = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=5).json()
            pages = [p for p in listed if p["type"] == "page"]
        from websockets.sync.client import connect

        self._socket = connect(pages[0]["webSocketDebuggerUrl"], max_size=64 << 20, open_timeout=10)
        self.ws = self._socket.__enter__()
        self._id = 0

    def call(self, method: str, **params: object) -> dict[str, object]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            answer = json.loads(self.ws.recv(timeout=30))
            if answer.get("id") == self._id:
                result: dict[str, object] = answer.get("result", {})
                return result

    def eval(self, expression: str) -> object:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")  # type: ignore[attr-defined] (undefined: the page is loading)

    def close(self) -> None:
        self._socket.__exit__(None, None, None)
        os.killpg(self.proc.pid, signal.SIGKILL)  # Chromium and every helper process it started
        self.proc.wait(10)


@pytest.mark.browser
def test_playground_shows_a_turn_in_chromium() -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium)")
    up = Scripted()
    up.mode = "slow"  # speech typed out over about a second
    with loopback(up.app) as upstream:
        app = create_app(Settings(character=Character.load(REX), upstream_url=upstream + "/v1"))
        with loopback(app) as base, tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
            page = _Page(browser, f"{base}/?say=%5Bjoy%5D%20*waves*%20hello%20Rex&session=browser", profile)
            try:
                typed: list[str] = []
                deadline = time.monotonic() + 60
                while page.eval("document.getElementById('status').textContent") != "done":
                    assert time.monotonic() < deadline, "the turn did not finish in the page"
                    typed.append(str(page.eval("document.getElementById('speech').textContent")))
                    time.sleep(0.05)
                text = {
                    name: page.eval(f"document.getElementById('{name}').innerText")
                    for name in ("name", "sprite", "speech", "cues", "sentences", "valid", "raw", "diagnostics")
                }
                shot = base64.b64decode(str(page.call("Page.captureScreenshot", format="png")["data"]))
                # a log chat's text is narration, not speech; an error after the first event stays the status
                logged = {"type": "I", "order": 2, "body": "Affection rose."}
                up.mode = "say:" + json.dumps({"chats": [{"type": "C", "order": 1, "body": "<msg>Hm.</msg>"}, logged]})
                later = _turn(page, "again", "done")
                up.mode = "cut"
                cut = _turn(page, "once more", "error")
            finally:
                page.close()
    ARTIFACT.mkdir(exist_ok=True)
    (ARTIFACT / "serve_playground.png").write_bytes(shot)
    assert text["name"] == "Rex"
    assert text["sprite"] == "rex_idle"  # the expression cue's sprite
    assert "You said" in str(text["speech"]) and "hello Rex" in str(text["speech"])
    assert any(0 < len(t) < len(str(text["speech"])) for t in typed)  # shown while it was being typed
    assert str(text["cues"]).splitlines() == ["action: beeps"]  # once: its motion cue maps nothing to add
    assert "Come back tomorrow." in str(text["sentences"])
    assert "strictly valid" in str(text["valid"])
    assert '"chats"' in str(text["raw"]) and text["diagnostics"] == ""
    assert up.requests and "hello Rex" in up.requests[0]["messages"][-1]["content"]
    assert shot.startswith(b"\x89PNG") and len(shot) > 1000
    assert later["speech"] == "Hm." and str(later["narration"]).endswith(": Affection rose.")
    assert cut["status"] == "error" and "error 502" in str(cut["diagnostics"])


def _turn(page: _Page, say: str, end: str) -> dict[str, object]:
    """Send ``say`` from the page; once its status reads ``end``, what it shows."""
    page.eval(f"send({json.dumps(say)})")
    deadline = time.monotonic() + 60
    while page.eval("document.getElementById('status').textContent") != end:
        assert time.monotonic() < deadline, f"the turn did not end with {end!r} in the page"
        time.sleep(0.05)
    return {name: page.eval(f"document.getElementById('{name}').innerText")
            for name in ("speech", "narration", "diagnostics", "status")}  # fmt: skip
