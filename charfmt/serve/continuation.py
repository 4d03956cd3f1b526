"""What a turn asks beyond the player's words: instructions after the history, a continue, the player's line.

Front ends such as SillyTavern send more than "the player said X":

- **post-history instructions**: ``system`` messages after the last user message (a card's
  ``post_history_instructions``, SillyTavern's Post-History Instructions prompt). They join the
  prompt *after* the history, with the player's turn (``Ask.after``), not at the top: that is
  what they are for, and every chat template takes them there (a ``system`` message after the
  history is refused by the templates of Gemma, Mistral and others).
- **continue**: the last message is the character's (an ``assistant`` message; SillyTavern's
  Continue, with its "Continue the following message" nudge or with "Continue prefill"). The
  reply goes on from it (:class:`Continuation`): where the upstream takes a prefill
  (``PREFILL``), the reply so far is sent as the start of the model's answer, in canonical form
  and left open at its last words, and the model writes on from there; elsewhere it is sent as
  the model's last answer with ``prompts/continue.j2`` asking for the rest, which the model
  writes as a reply of its own. Either way the front end is answered with the continuation only.
- **impersonate**: a ``system`` message after the history asks for the *player's* next line
  (SillyTavern's Impersonate: "Write your next reply from the point of view of {{user}}...",
  recognised by ``IMPERSONATION``). The model writes it in the reply format (``prompts/impersonate.j2``
  says whose line it is), and the answer is that line in the player's shorthand
  (``[joy] *waves* Hi!``), whatever ``--reply-format`` says: the front end puts it in the
  player's input box, and charfmt reads it back from there as shorthand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from charfmt.events import Event
    from charfmt.models import Reply
    from charfmt.tags import TagTable

PREFILL: Final[dict[str, dict[str, Any]]] = {
    "llama-server": {},
    "vllm": {"continue_final_message": True, "add_generation_prompt": False},
    "sglang": {"continue_final_message": True, "add_generation_prompt": False},
    "ollama": {},
}
"""The servers that go on from a last ``assistant`` message (a prefill), with the request fields that
ask for it: llama-server does it by itself (unless started with ``--no-prefill-assistant``), as
ollama's templates do; vLLM and SGLang are asked with ``continue_final_message``. Every other
``--server`` (OpenAI, LM Studio, koboldcpp, LocalAI) is asked for the rest instead (``prompts/continue.j2``).
llama.cpp in-process (``serve --model``) is prefilled too: ``LocalModel`` writes the prompt up to the answer,
then the reply so far, and the model goes on from it."""

IMPERSONATION: Final = (
    re.compile(r"\W*write your next (?:reply|message|response) from the point of view of\b", re.IGNORECASE),
    re.compile(r"\W*impersonate\b", re.IGNORECASE),
    re.compile(r"\W*(?:write|reply|respond|answer)\b[^.\n]{0,40}?\bas (?:the )?(?:user|player)\b", re.IGNORECASE),
)
"""How a ``system`` message after the history that asks for the player's line instead of the character's
begins, first match wins: SillyTavern's impersonation prompt ("[Write your next reply from the point of view
of {{user}}..."), and the words other front ends use ("Impersonate the user", "Reply as the player"). Each is
matched at the start of the message, as a request: post-history instructions that say what *not* to do
("Never impersonate the user", "Do not write as the user") are no such request."""


def asks_for_the_player(text: str) -> bool:
    """Whether the ``system`` message ``text`` asks for the player's next line (``IMPERSONATION``)."""
    return any(pattern.match(text) for pattern in IMPERSONATION)


@dataclass(frozen=True, slots=True)
class Prefix:
    """A turn's piece: the events of the reply so far that a prefilled continue goes on from (read as the rest
    will be), which the front end shows already."""

    events: list[Event]


@dataclass(frozen=True)
class Continuation:
    """A reply to be gone on with: ``before`` (as the front end showed it) and how the model is asked.

    ``prefill``: ``before`` in canonical form, left open at its last words, sent as the start of the
    model's answer (the upstream goes on from it: ``PREFILL``); ``None``: the model is shown
    ``before`` whole and asked for the rest, as a reply of its own.
    """

    before: Reply
    prefill: str | None
    shown: str = ""
    """The reply so far as the front end sent it back (in its ``--reply-format``)."""

    def combine(self, reply: Reply) -> Reply:
        """The whole reply: ``reply`` itself where it was prefilled (it holds ``before``), else ``before``'s
        chats and then ``reply``'s, numbered in that order."""
        if self.prefill is not None:
            return reply
        chats = [*self.before.chats, *reply.chats]
        numbered = [chat.model_copy(update={"order": i}) for i, chat in enumerate(chats, 1)]
        return reply.model_copy(update={"chats": numbered})

    def rest(self, reply: Reply) -> Reply:
        """What ``reply`` (the whole, ``combine``'s) holds beyond ``before``: the words that went on in its
        last element, the elements and chats after it, as a reply of its own (``canonical`` answers it)."""
        from charfmt.models import Chat  # noqa: PLC0415 (import cost: pydantic loads on first use)

        chats: list[Chat] = []
        for c, chat in enumerate(reply.chats):
            had = self.before.chats[c].segments if c < len(self.before.chats) else []
            segments = []
            for s, segment in enumerate(chat.segments):
                old = had[s] if s < len(had) else None
                if old is None or old.tag != segment.tag or not segment.text.startswith(old.text):
                    segments.append(segment)
                elif len(segment.text) > len(old.text):
                    segments.append(segment.model_copy(update={"text": segment.text[len(old.text) :]}))
            if segments or c >= len(self.before.chats):
                chats.append(chat.model_copy(update={"order": len(chats) + 1, "segments": segments}))
        return reply.model_copy(update={"chats": chats})


def open_prefix(reply: Reply, tags: TagTable) -> str:
    """``reply`` in canonical form, left open where the model goes on: inside its last element where that
    element's text streams (speech, a thought), else after it; inside a plain chat's text."""
    from charfmt.writer import canonical_form, dumps  # noqa: PLC0415 (import cost: pydantic loads on first use)

    text = dumps(canonical_form(reply, tags=tags))
    end = '"}]}'
    if not text.endswith(end) or not reply.chats:  # (no chat: nothing to go on from)
        return text
    text = text[: -len(end)]
    last = reply.chats[-1]
    if last.segments:
        spec = tags.get(last.segments[-1].tag)
        close = f"</{last.segments[-1].tag}>"
        if spec is not None and spec.streamed and text.endswith(close):
            text = text[: -len(close)]
    return text


@dataclass(frozen=True)
class Ask:
    """What one turn asks of the model beyond the player's words (all optional)."""

    after: str = ""
    """Post-history instructions: after the history, with the player's turn (or the request for the rest)."""
    continuation: Continuation | None = None
    """A reply to go on with (a continue)."""
    impersonation: str | None = None
    """The front end's own request for the player's line (``""`` where it said nothing beyond asking):
    the model writes the player's next line, answered as shorthand, kept in no history."""
