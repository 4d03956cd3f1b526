"""The tag table: the one place that says which tags a chat body may use.

The grammar (``grammars/body.lark``), the models, the writer and every later
consumer (renderer, streamer, strategies, exported grammars) read this table;
nothing else keeps a list of tag names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

ContentKind = Literal["key", "text"]


@dataclass(frozen=True, slots=True)
class TagSpec:
    """One element of the ``C`` body language."""

    name: str
    """The tag name as written between the brackets: ``emo`` in ``<emo>joy</emo>``."""
    content: ContentKind
    """``key``: an identifier such as an emotion key; ``text``: escaped free text."""
    shown: bool
    """Whether the content is meant for the player (``thought`` is inner voice, hidden)."""
    description: str
    """One line for documentation and system prompts."""

    @property
    def open(self) -> str:
        """The opening tag, e.g. ``<emo>``."""
        return f"<{self.name}>"

    @property
    def close(self) -> str:
        """The closing tag, e.g. ``</emo>``."""
        return f"</{self.name}>"

    @property
    def terminal(self) -> str:
        """Stem of the grammar's terminal names: ``EMO`` gives ``EMO_OPEN``/``EMO_CLOSE``."""
        return self.name.upper()


TAGS: Final[tuple[TagSpec, ...]] = (
    TagSpec("emo", "key", True, "the character's emotion, a key from its vocabulary"),
    TagSpec("act", "text", True, "what the character does"),
    TagSpec("msg", "text", True, "what the character says"),
    TagSpec("thought", "text", False, "the character's inner voice, not shown to the player"),
)
"""The elements of a ``C`` body, in the order documentation lists them."""

TAG_BY_NAME: Final[dict[str, TagSpec]] = {t.name: t for t in TAGS}

TEXT_TAG: Final = "text"
"""The segment tag of an untagged ``I``/``E`` body."""

CHAT_TYPES: Final[dict[str, str]] = {
    "C": "chat: the character's turn, a body of tag elements",
    "I": "info: a system log line, plain text",
    "E": "event: something that happened in the game, plain text",
}
"""Chat types and what their bodies hold."""

TAGGED_TYPES: Final[frozenset[str]] = frozenset({"C"})
"""Chat types whose bodies are tag elements; the others hold plain text."""

ELEMENT_SEPARATOR: Final = "\n"
"""What stands between two elements of a ``C`` body."""

# --- what models write instead (lenient parsing) ---------------------------------------
# One table per question, each the only place that answers it.

TAG_SYNONYMS: Final[dict[str, str]] = {
    "emo": "emo", "emotion": "emo", "emotions": "emo", "expression": "emo", "mood": "emo", "face": "emo",
    "feeling": "emo", "feel": "emo",
    "act": "act", "action": "act", "actions": "act", "motion": "act", "gesture": "act", "move": "act",
    "msg": "msg", "message": "msg", "speak": "msg", "speech": "msg", "say": "msg", "said": "msg",
    "dialogue": "msg", "dialog": "msg", "line": "msg", "content": "msg", "text": "msg", "saying": "msg",
    "reply": "msg", "response": "msg", "talk": "msg",
    "thought": "thought", "thoughts": "thought", "thinking": "thought", "think": "thought", "inner": "thought",
    "inner_voice": "thought", "monologue": "thought", "mind": "thought",
}  # fmt: skip
"""Tag names (lower case) models use, mapped to the canonical tag. Also the JSON field
names of the design study's pattern A (``{"emotion": ..., "content": ...}``)."""

TYPE_ALIASES: Final[dict[str, str]] = {
    "c": "C", "chat": "C", "character": "C", "assistant": "C", "say": "C", "dialogue": "C", "message": "C",
    "i": "I", "info": "I", "information": "I", "system": "I", "log": "I", "narration": "I", "narrator": "I",
    "e": "E", "event": "E", "events": "E", "game": "E",
}  # fmt: skip
"""Chat type spellings (lower case) mapped to ``C``, ``I`` or ``E``."""

REASONING_TAGS: Final[frozenset[str]] = frozenset(
    {"think", "thinking", "thought", "reasoning", "reflection", "analysis"}
)
"""Tags that wrap a model's reasoning when they stand outside the reply: dropped, never shown."""
