"""What the dialects of a reply look like: the patterns and keys the dialect table and the readers both look for.

Apart from the table (``charfmt.dialects``) because the table names the readers, and the
readers need these too.
"""

from __future__ import annotations

import re
from typing import Final

from charfmt import _control_strings as cs


def _one_of(*markers: str) -> str:
    """A regex matching any of the chat-template control strings ``markers``."""
    return "|".join(map(re.escape, markers))


FORM_WRAPPER: Final = r"user[_-](?:chats?|messages?)"
"""The request form's wrapper as models name it: ``user_chats``, ``user_chat``, ``user-chats``, ``user_message`` (a
tag of the form's kind under another name: the fifth set's #2 and its corpus test's odile-1)."""
FORM_ELEMENT: Final = rf"{FORM_WRAPPER}(?:[_-]type)?|chat(?:_type)?"
"""The request form's elements by name: its wrapper and ``<chat>`` (``<user-chat_type="C">`` mangled)."""


SCAFFOLDING: Final = re.compile(
    rf"""(?P<sys_open>{_one_of(*cs.SYSTEM_OPENERS)}|<<?[ \t]*+SYS[ \t]*+(?:>>?\]?|\]))
      | (?P<sys_close>{_one_of(*cs.SYSTEM_CLOSERS)}|<<?[ \t]*+/[ \t]*+SYS[ \t]*+(?:>>?\]?|\]))
      | (?P<inst_open>{_one_of(cs.INST_OPEN)})
      | (?P<inst_close>{_one_of(cs.INST_CLOSE)})
      | {_one_of(cs.CHATML_START)}[ \t]*+(?P<chatml>[A-Za-z_][\w\-]*+)?[ \t]*+\n?
      | {_one_of(cs.GEMMA_START)}[ \t]*+(?P<gemma>[A-Za-z_][\w\-]*+)?[ \t]*+\n?
      | {_one_of(cs.HEADER_START)}[ \t]*+(?P<llama3>[^<>|\n]{{0,30}}?)[ \t]*+{_one_of(cs.HEADER_END)}[ \t]*+\n{{0,2}}
      | <\|(?P<phi>{_one_of(*cs.PHI_ROLES)})\|>[ \t]*+\n?
      | (?P<end>{_one_of(*cs.TURN_ENDS)})
      | (?P<placeholder>[<＜][/／]?[A-Z][A-Z0-9]*+(?:[-_][A-Z0-9]++)++
            (?:[>＞](?:[/／][A-Z][A-Z0-9_\-]*+)*+[>＞]?|(?=[<＜]))
          | \[/?(?:[A-Z][A-Z0-9]*+(?:[-_][A-Z0-9]++)++|SYS|USER|ASSISTANT|SYSTEM)\])
      | (?P<angles>>>++[ \t]*+SYS(?!\w)|<<++|>>++)""",
    re.X,
)
"""Chat-template scaffolding a model echoes from its prompt: never a tag, never speech.

llama-2 (``<<SYS>>``, ``[INST]``), Mistral (``[SYSTEM_PROMPT]``), ChatML (``<|im_start|>role``,
``<|im_end|>``), Gemma (``<start_of_turn>role``, ``<end_of_turn>``), Llama 3
(``<|start_header_id|>role<|end_header_id|>``, ``<|eot_id|>``), Phi (``<|user|>``, ``<|end|>``),
upper-case placeholders (``<USER-CHAT-ID>``, ``[/USER-CONTEXT]``: the format's tags are never
written so; an upper-case path right after one, ``<USER-CHAT>/MYCHAT/DEFAULT>``, is part of it; one cut by
the next, ``<USER_LIKES<USER_LIKES>``, is one too),
a ``<<SYS>>`` or ``<</SYS>>`` mangled (``<<SYS >>]``, ``<<SYS]``, ``</SYS>>``, ``<SYS>``, ``>>SYS``),
and runs of ``<<`` or ``>>`` left of another.
"""
SCAFFOLDING_HINT: Final = re.compile(
    _one_of(
        *cs.SYSTEM_OPENERS, *cs.SYSTEM_CLOSERS, cs.INST_OPEN, cs.INST_CLOSE,
        cs.CHATML_START, cs.GEMMA_START, cs.HEADER_START, *cs.TURN_ENDS,
    )
    + r"|<\||<<|>>|<[ \t/]*+S|<[/／]?[A-Z]|＜[/／]?[A-Z]|\[/?[A-Z]"
)  # fmt: skip
"""What every match of ``SCAFFOLDING`` holds (its control strings, ``<|``, ``<<`` or ``>>``, a mangled ``<SYS``, an
upper-case placeholder's start): text without it holds no scaffolding. A test before ``SCAFFOLDING``'s scan, which
tries a dozen alternatives at every character (16 ms over 300 KB; this one, each branch opened by a literal, 1.5 ms).
``tests/lenient/test_shortcuts.py`` holds it to that."""
SCAFFOLD_PROMPT_ROLES: Final = frozenset({"system", "user", "human", "tool", "ipython", "developer"})
"""Turns of these roles are the prompt echoed, not the character's reply: their text is dropped."""
FRONT_MATTER: Final = re.compile(r"\A\s*---[ \t]*\n((?:[^\n]*\n)*?)---[ \t]*(?:\n|\Z)")
"""Pattern C: a ``---`` block of ``key: value`` lines at the very start."""
TAGGED: Final = re.compile(r"[<＜]\s*+(?:[/／]\s*+)?[^\W\d][\w.\-:]*+[^<>＜＞]*+[>＞]")
"""Anything that looks like a tag."""
HYBRID_BODY: Final = frozenset({"chat_body", "chatbody"})
"""Pattern D's body key."""
HYBRID_EMOTION: Final = frozenset({"emotion_summary", "emotionsummary"})
"""Pattern D's emotion key."""
CHATS_KEYS: Final = (
    "chats", "messages", "replies", "responses", "chat", "reply", "response", "answer", "output", "result",
)  # fmt: skip
"""Keys that hold the list of chats (``chats`` and what models write instead)."""
CHAT_KEYS: Final = ("type", "order", "body")
"""A chat object's own keys."""
HARMONY_HEADER: Final = re.compile(
    rf"""(?:{_one_of(cs.HARMONY_START)}[ \t]*+[\w\-]*+[ \t]*+)?
      {_one_of(cs.HARMONY_CHANNEL)}[ \t]*+(?P<channel>[\w\-]*+)[^<\n]{{0,40}}?
      (?:{_one_of(cs.HARMONY_CONSTRAIN)}[ \t]*+[\w\-]*+[ \t]*+)?{_one_of(cs.HARMONY_MESSAGE)}""",
    re.X,
)
"""A gpt-oss "harmony" message's header: ``<|start|>assistant<|channel|>analysis<|message|>`` (the role and the
``<|constrain|>`` part optional). Its channel names what follows: ``final`` the reply, any other the reasoning."""
HARMONY_END: Final = re.compile(_one_of(*cs.HARMONY_ENDS, cs.HARMONY_START, cs.HARMONY_CHANNEL))
"""What ends a harmony message's text: its end marker, or the next message's header."""
HARMONY_ROLE: Final = re.compile(rf"{_one_of(cs.HARMONY_START)}[ \t]*+[\w\-]*+[ \t]*+\n?")
"""A harmony message's role opener with no channel after it (``<|start|>assistant``): scaffolding, no speech."""

GENERIC_PLAYER: Final = frozenset({"user", "human", "player", "you", "the user", "q"})
"""Role names of the player's turn in transcripts (a Gemma turn written without its special tokens: ``user``; a
question's ``Q:``)."""
GENERIC_CHARACTER: Final = frozenset({"assistant", "model", "ai", "bot", "character", "char", "gpt", "a"})
"""Role names of the character's (the model's) turn (an answer's ``A:``: found by the seventh set's #3)."""
