"""No secret leaves the server: an upstream that quotes the key it was sent, and other secrets, in its errors.

A real ``charfmt serve`` process (its console and its ``--log`` file are read too) in front of an upstream whose
errors quote the ``Authorization`` it received and other secrets (``scripted_upstream.LEAKED``): a JSON 401 and
500, an HTML page, an error event in the middle of a stream. Every door a client has is asked (chat completions
whole and streamed, ``/v1/turn`` by POST and by ``EventSource``'s GET, the WebSocket) and every byte that comes
back, status line, headers and body, is searched, with the console and the log: neither the key (of a key's
usual shape, and of none), nor the ``--token``, nor any of the other secrets is there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("aiohttp")

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import LEAKED, Scripted, loopback  # noqa: E402
from serve_process import REX, ROOT, wait_until_answering  # noqa: E402

TOKEN = "tok-secret-99887766"
KEYS = ("sk-proj-LEAKME0123456789abcdefghij", "custom-secret-value-42")
"""A key of the usual shape, and one of no known shape (only the server's knowing it can hide it)."""
MODES = ("leak401", "leak500", "leakhtml", "leakstream")
T = 20.0


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[Scripted, str]]:
    up = Scripted()
    with loopback(up.app) as base:
        yield up, base + "/v1"


def _answers(base: str) -> list[str]:
    """Every door asked once: each answer as text (status, headers, body)."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    shown: list[str] = []

    def keep(r: httpx.Response) -> None:
        shown.append(f"{r.status_code} {r.headers.raw!r}\n{r.text}")

    keep(httpx.post(base + "/v1/chat/completions", json=chat, headers=auth, timeout=T))
    with httpx.stream("POST", base + "/v1/chat/completions", json={**chat, "stream": True}, headers=auth,
                      timeout=T) as r:  # fmt: skip
        r.read()
        keep(r)
    with httpx.stream("POST", base + "/v1/turn", json={"say": "hi"}, headers=auth, timeout=T) as r:
        r.read()
        keep(r)
    keep(httpx.get(base + "/v1/turn", params={"say": "hi", "token": TOKEN}, timeout=T))
    ws_client = pytest.importorskip("websockets.sync.client")
    with ws_client.connect(base.replace("http://", "ws://") + f"/v1/turn/ws?token={TOKEN}", open_timeout=T) as ws:
        ws.send(json.dumps({"say": "hi", "session": "s1"}))
        while True:
            message = str(ws.recv(timeout=T))
            shown.append(message)
            if json.loads(message)["kind"] in ("reply", "error"):
                break
    return shown


@pytest.mark.parametrize("key", KEYS)
def test_no_secret_in_any_answer_console_line_or_log_line(
    key: str, upstream: tuple[Scripted, str], tmp_path: Path
) -> None:
    """Four upstream errors quoting the key × five doors: every answer says what failed, none holds a secret;
    nor does the console (access lines, failed turns) or the turn log."""
    up, url = upstream
    log = tmp_path / "turns.jsonl"
    cmd = [sys.executable, "-m", "charfmt", "serve", "--character", str(REX), "--upstream", url, "--port", "0",
           "--token", TOKEN, "--log", str(log)]  # fmt: skip
    env = {**os.environ, "OPENAI_API_KEY": key}
    shown: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT) as app:
        try:
            assert app.stderr is not None
            first = app.stderr.readline()
            base = first.split()[4]
            wait_until_answering(int(base.rsplit(":", 1)[1]), time.monotonic() + 30)
            for mode in MODES:
                up.mode = mode
                shown += [f"{mode}: {text}" for text in _answers(base)]
        finally:
            up.mode = "ok"
            app.terminate()
            console = app.communicate(timeout=20)
    assert up.auth[-1] == f"Bearer {key}"  # (the key did go upstream, and came back quoted)
    everything = {"answers": "\n".join(shown), "console": first + "".join(console), "log": log.read_text()}
    for where, text in everything.items():
        for quoted in (key, TOKEN, *LEAKED, *(s.split()[-1] for s in LEAKED)):
            secret = quoted.rsplit("=", 1)[-1]  # (a query's value: the secret part of it)
            assert secret not in text, f"{secret!r} in the {where}"
    answers = everything["answers"]
    assert answers.count("Incorrect API key provided: Bearer ***") == 3 * 5, answers[:2000]
    assert answers.count("an HTML error page ('Bad key: Bearer ***')") == 5, answers[:2000]
    assert "refused charfmt's API key (check the environment variable OPENAI_API_KEY)" in answers
    assert "api_key=***" in answers and "hf_***" in answers  # (what each secret was is still said)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 4 * 5 and all(row["status"] >= 500 and "***" in row["error"] for row in rows), rows[:3]
    assert "token=***" in everything["console"] and "failed: 502 the upstream: HTTP 401" in everything["console"]


def test_a_traceback_on_the_console_is_redacted_too() -> None:
    """An exception's text in a console line (uvicorn's 'Exception in ASGI application'): the key, the token and
    key-shaped strings in its message are ``***`` as in any other line; the line's own words stay."""
    import io
    import logging

    from charfmt._redact import Redactor
    from charfmt.serve.logs import redact_console

    out = io.StringIO()
    logger = logging.getLogger("charfmt.test.console")
    handler = logging.StreamHandler(out)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        redact_console(Redactor([KEYS[1], TOKEN]), ("charfmt.test.console",))
        try:
            raise RuntimeError(f"upstream said: key {KEYS[1]} refused, token {TOKEN}, also {LEAKED[0]}")
        except RuntimeError:
            logger.exception("Exception in ASGI application for %s", f"/v1/turn?token={TOKEN}")
    finally:
        logger.removeHandler(handler)
    shown = out.getvalue()
    assert "Exception in ASGI application for /v1/turn?token=***" in shown and "Traceback" in shown
    assert "RuntimeError: upstream said: key *** refused, token ***, also sk-***" in shown, shown
    assert all(secret not in shown for secret in (KEYS[1], TOKEN, LEAKED[0])), shown
