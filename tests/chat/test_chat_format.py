"""``charfmt chat``'s chat format (no model): chosen, a missing template said, no system prompt lost.

A stand-in for ``llama_cpp.Llama`` (bytes as tokens, a scripted reply) goes through
llama-cpp-python's own chat handlers, so the prompt checked is the one a real model gets.
The same with the real Gemma 3 270M is in ``test_chat_gemma.py`` (``model`` marker).
"""

from __future__ import annotations

import io
import subprocess
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import ROOT

from charfmt.chat import (
    NoChatTemplate,
    TerminalView,
    chat_formats,
    chat_prompt,
    fold_system,
    has_system_role,
    local_model,
    take_turn,
)
from charfmt.cli import main
from charfmt.diagnostics import CharfmtError
from charfmt.llm._model_clients import fold_late_system
from charfmt.prompt.character import Character
from charfmt.prompt.render import render_messages

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'charfmt[local]')")

REX = str(ROOT / "examples" / "characters" / "rex.toml")
REPLY = '{"chats":[{"type":"C","order":1,"body":"<emo>neutral</emo>\\n<msg>Forty bolts.</msg>"}]}'

# Gemma's own template (google/gemma-3-270m-it): it has no system role and folds the system
# message into the first user turn itself.
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + '\n\n' %}"
    "{% set loop_messages = messages[1:] %}{% else %}{% set first = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + (first if loop.first else '') + message['content'] + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)


class FakeLlama:
    """What a chat handler uses of ``llama_cpp.Llama``: bytes as tokens, ``reply`` as the completion."""

    def __init__(self, reply: str = REPLY, *, template: str | None = None, architecture: str = "gemma3") -> None:
        self.metadata = {"general.architecture": architecture}
        self.model_path = "/models/gemma-3-270m-q4_k_m.gguf"
        self.verbose = False
        self.chat_handler = None
        self._chat_handlers: dict[str, Any] = {}
        self.chat_format = "llama-2"  # llama-cpp-python's fallback
        if template is not None:
            self.metadata["tokenizer.chat_template"] = template
            formatter = llama_cpp.llama_chat_format.Jinja2ChatFormatter(template, "<eos>", "<bos>")
            self._chat_handlers["chat_template.default"] = formatter.to_chat_handler()
            self.chat_format = "chat_template.default"
        self.reply = reply
        self.prompts: list[str] = []

    def n_ctx(self) -> int:
        return 8192

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        return list(text)

    def detokenize(self, tokens: list[int], prev_tokens: Any = None, special: bool = False) -> bytes:
        return bytes(tokens)

    def create_completion(self, prompt: list[int], **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.prompts.append(bytes(prompt).decode())
        assert kwargs["stream"] is True
        for i in range(0, len(self.reply), 4):
            yield self._chunk(self.reply[i : i + 4], None)
        yield self._chunk("", "stop")

    @staticmethod
    def _chunk(text: str, reason: str | None) -> dict[str, Any]:
        choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": reason}
        return {"id": "c", "object": "text_completion", "created": 0, "model": "m", "choices": [choice]}


def rex_messages(say: str = "Hi Rex!") -> list[dict[str, str]]:
    rex = Character.load(REX)
    messages: list[dict[str, str]] = render_messages(rex, [], rex.shorthand(say))["messages"]
    return messages


# --- folding the system prompt ------------------------------------------------------------------


def test_fold_system_opens_the_first_user_message_with_the_system_prompt() -> None:
    messages = [
        {"role": "system", "content": "You are Rex.\n"},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hm."},
        {"role": "user", "content": "Bye"},
    ]
    assert fold_system(messages) == [
        {"role": "user", "content": "You are Rex.\n\nHi"},
        {"role": "assistant", "content": "Hm."},
        {"role": "user", "content": "Bye"},
    ]
    assert messages[1]["content"] == "Hi"  # the caller's messages are left as they were
    assert fold_system(messages[1:]) == messages[1:]
    assert fold_system([{"role": "system", "content": "Alone"}]) == [{"role": "user", "content": "Alone"}]


@pytest.mark.parametrize("chat_format", ["chatml", "llama-2", "mistral-instruct", "gemma", None])
def test_lore_placed_in_the_history_as_a_system_message_reaches_the_prompt_where_it_was_placed(
    chat_format: str | None,
) -> None:
    """A lore entry at a depth with the system role is a system message mid-conversation, which
    llama-cpp-python's formats dropped without a word: it opens the next user message instead."""
    messages = [
        {"role": "system", "content": "You are Rex."},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "system", "content": "LORE AT DEPTH ONE"},
        {"role": "user", "content": "second question"},
        {"role": "system", "content": "LORE AT DEPTH ZERO"},
    ]
    llm = FakeLlama(template=GEMMA_TEMPLATE) if chat_format is None else FakeLlama()
    list(local_model(llm, gbnf=None, max_tokens=64, chat_format=chat_format)(messages))
    prompt = llm.prompts[-1]
    assert prompt.count("You are Rex.") == 1
    assert prompt.index("first answer") < prompt.index("LORE AT DEPTH ONE") < prompt.index("second question")
    assert prompt.index("second question") < prompt.index("LORE AT DEPTH ZERO")
    assert messages[3] == {"role": "system", "content": "LORE AT DEPTH ONE"}  # the caller's list as it was


def test_fold_late_system_leaves_a_conversation_without_one_as_it_is() -> None:
    messages = rex_messages()
    assert fold_late_system(messages) == messages
    assert fold_late_system([{"role": "user", "content": "u"}, {"role": "system", "content": "s"}]) == [
        {"role": "user", "content": "u\n\ns"}
    ]


def test_the_gemma_format_gets_the_persona_format_and_examples_in_the_first_user_turn() -> None:
    llm = FakeLlama()
    messages = rex_messages()
    system = messages[0]["content"].strip()
    generate = local_model(llm, gbnf=None, max_tokens=64, chat_format="gemma")
    assert "".join(generate(messages)) == REPLY
    prompt = llm.prompts[-1]
    assert prompt.startswith(f"<start_of_turn>user\n{system}\n\n<user_chats>")  # nothing dropped
    for kept in ("You are Rex", "## Emotions", "## Examples", "Put it here. 40 bolts."):
        assert kept in prompt
    assert prompt.endswith("<start_of_turn>model\n") and "[INST]" not in prompt and "<<SYS>>" not in prompt


def test_a_format_with_a_system_role_keeps_it_and_nothing_is_doubled() -> None:
    llm = FakeLlama()
    messages = rex_messages()
    list(local_model(llm, gbnf=None, max_tokens=64, chat_format="chatml")(messages))
    assert llm.prompts[-1].startswith("<|im_start|>system\nYou are Rex.")
    assert llm.prompts[-1].count("You are Rex. Stay in character") == 1

    templated = FakeLlama(template=GEMMA_TEMPLATE)  # folds the system message itself
    assert has_system_role(templated)  # so charfmt leaves the messages alone
    list(local_model(templated, gbnf=None, max_tokens=64)(messages))
    assert templated.prompts[-1].startswith("<bos><start_of_turn>user\nYou are Rex.")
    assert templated.prompts[-1].count("You are Rex. Stay in character") == 1


def test_has_system_role_is_read_from_the_prompt_each_format_writes() -> None:
    llm = FakeLlama()
    assert not has_system_role(llm, "gemma")
    assert has_system_role(llm, "chatml") and has_system_role(llm, "llama-2") and has_system_role(llm)
    assert "<<SYS>>" in chat_prompt(llm, [{"role": "system", "content": "S"}, {"role": "user", "content": "u"}])


# --- no template: said once, and which format would fit -------------------------------------------------


def test_a_gguf_without_a_template_is_warned_about_once_naming_the_fallback_and_a_fit() -> None:
    llm = FakeLlama()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        generate = local_model(llm, gbnf=None, max_tokens=64)
        list(generate(rex_messages("one")))
        list(generate(rex_messages("two")))
    assert [w.category for w in caught] == [NoChatTemplate]  # once, not once per turn
    message = str(caught[0].message)
    assert "gemma-3-270m-q4_k_m.gguf has no chat template" in message
    assert "'llama-2'" in message and "--chat-format gemma" in message and "gemma3" in message
    assert "<<SYS>>" in llm.prompts[-1]  # the fallback really was used


@pytest.mark.parametrize(
    ("llm", "chat_format"),
    [(FakeLlama(template=GEMMA_TEMPLATE), None), (FakeLlama(), "gemma"), (FakeLlama(), "llama-2")],
    ids=["own-template", "chosen-gemma", "chosen-llama-2"],
)
def test_no_warning_where_the_format_is_the_models_own_or_chosen(llm: FakeLlama, chat_format: str | None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(local_model(llm, gbnf=None, max_tokens=64, chat_format=chat_format)(rex_messages()))


def test_an_unknown_architecture_gets_no_guess() -> None:
    with pytest.warns(NoChatTemplate) as caught:
        local_model(FakeLlama(architecture="mamba"), gbnf=None, max_tokens=64)
    message = str(caught[0].message)
    assert "--chat-format (chat_format=) chooses the format it was trained on" in message


def test_an_unknown_chat_format_is_an_error_that_lists_the_known_ones() -> None:
    with pytest.raises(CharfmtError, match=r"unknown chat format 'gemma-9'; the known ones: .*chatml.*gemma"):
        local_model(FakeLlama(), gbnf=None, max_tokens=64, chat_format="gemma-9")
    assert {"gemma", "chatml", "llama-2"} <= set(chat_formats())
    assert chat_formats(FakeLlama(template=GEMMA_TEMPLATE))[0] == "chat_template.default"


def test_a_chat_turn_in_the_gemma_format_shows_the_reply() -> None:
    rex = Character.load(REX)
    llm = FakeLlama()
    out = io.StringIO()
    take_turn(rex, [], "Hi Rex!", local_model(llm, gbnf=None, max_tokens=64, chat_format="gemma"),
              view=TerminalView(rex, out))  # fmt: skip
    assert "Rex: Forty bolts." in out.getvalue().splitlines()
    assert llm.prompts[0].startswith("<start_of_turn>user\nYou are Rex.")


# --- the command line ---------------------------------------------------------------------------


def test_chat_format_with_an_endpoint_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--character", REX, "--endpoint", "http://127.0.0.1:9/v1", "--chat-format", "gemma"]) == 2
    assert "--chat-format is for a local model" in capsys.readouterr().err


def test_an_unknown_chat_format_is_refused_before_the_model_loads(tmp_path: Any) -> None:
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF" + b"\0" * 60)  # llama.cpp could not load it: the check must come first
    code = (f"import sys; from charfmt.cli import main; sys.exit(main(['chat', '--character', {REX!r}, "
            f"'--model', {str(fake)!r}, '--chat-format', 'gemma-9', '--say', 'hi']))")  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 2, done.stderr
    assert "--chat-format 'gemma-9' is not one of: " in done.stderr and "chatml" in done.stderr
    assert "Traceback" not in done.stderr


def test_chat_help_names_the_chat_format_and_verbose_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--chat-format NAME" in text and "system prompt in the first user message" in text
    assert "--verbose" in text and "llama.cpp's own log lines" in text
