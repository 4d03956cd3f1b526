"""The control strings of chat templates (Mistral, ChatML, Llama, Gemma, Phi, gpt-oss harmony), written once.

Both directions read them here. Rendering keeps every printed value free of them
(``charfmt.prompt.render.CONTROL_STRINGS``: raw completion servers that parse special tokens in
the prompt would read one as a turn boundary); lenient reading drops the turn markers a
model echoes from its prompt (``charfmt.dialects.SCAFFOLDING`` is built from the names
below).
"""

from __future__ import annotations

from typing import Final

SYSTEM_OPENERS: Final = ("<<SYS>>", "[SYSTEM_PROMPT]")
"""What opens a system prompt: Llama 2, Mistral."""
SYSTEM_CLOSERS: Final = ("<</SYS>>", "[/SYSTEM_PROMPT]")
INST_OPEN: Final = "[INST]"
"""What opens a user turn (Llama 2, Mistral)."""
INST_CLOSE: Final = "[/INST]"
CHATML_START: Final = "<|im_start|>"
"""What opens a turn, its role after it: ChatML (OpenAI, Qwen)."""
GEMMA_START: Final = "<start_of_turn>"
"""What opens a turn, its role after it: Gemma."""
HEADER_START: Final = "<|start_header_id|>"
"""What opens a turn, its role and ``HEADER_END`` after it: Llama 3."""
HEADER_END: Final = "<|end_header_id|>"
PHI_ROLES: Final = ("system", "user", "assistant")
"""Phi opens a turn with ``<|role|>``."""
TURN_ENDS: Final = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|eom_id|>", "<|end|>")
"""What ends a turn: ChatML, Gemma, Llama 3 (two), Phi."""

HARMONY_START: Final = "<|start|>"
"""gpt-oss "harmony": what opens a message, its role after it (``<|start|>assistant``)."""
HARMONY_CHANNEL: Final = "<|channel|>"
"""Harmony: what names a message's channel (``analysis``, ``commentary``: reasoning; ``final``: the reply)."""
HARMONY_CONSTRAIN: Final = "<|constrain|>"
HARMONY_MESSAGE: Final = "<|message|>"
"""Harmony: what opens a message's text, after its channel."""
HARMONY_ENDS: Final = ("<|end|>", "<|return|>", "<|call|>")
"""Harmony: what ends a message (``<|end|>`` is Phi's turn end too)."""
HARMONY_FINAL: Final = "final"
"""Harmony: the channel of the reply itself; every other channel's text is the model's reasoning."""

OTHER_CONTROL_STRINGS: Final = (
    # Mistral
    "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CONTENT]",
    "[THINK]", "[/THINK]",
    # ChatML (OpenAI, Qwen), Phi
    "<|im_sep|>", "<|endoftext|>",
    # Llama 2 and 3
    "<s>", "</s>", "<|begin_of_text|>", "<|end_of_text|>", "<|python_tag|>",
    # Gemma
    "<bos>", "<eos>",
)  # fmt: skip
"""Control strings that are not turn markers: tools, thinking, the start and end of a sequence."""

CONTROL_STRINGS: Final[tuple[str, ...]] = (
    *SYSTEM_OPENERS,
    *SYSTEM_CLOSERS,
    INST_OPEN,
    INST_CLOSE,
    CHATML_START,
    GEMMA_START,
    HEADER_START,
    HEADER_END,
    *(f"<|{role}|>" for role in PHI_ROLES),
    *TURN_ENDS,
    HARMONY_START,
    HARMONY_CHANNEL,
    HARMONY_CONSTRAIN,
    HARMONY_MESSAGE,
    *HARMONY_ENDS[1:],
    *OTHER_CONTROL_STRINGS,
)
"""Every chat-template control string: no printed value may contain one."""
