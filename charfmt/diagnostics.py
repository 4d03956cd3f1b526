"""Diagnostics and errors: what went wrong, where in the raw input, and how bad it is."""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Literal

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from array import array

Severity = Literal["error", "warning", "info"]

CODES: Final[dict[str, tuple[Severity, str]]] = {
    # input
    "CF001": ("error", "input is not valid UTF-8"),
    "CF002": ("error", "input is larger than the configured maximum"),
    "CF003": ("error", "input is empty"),
    # envelope (JSON)
    "CF101": ("error", "invalid JSON"),
    "CF102": ("error", 'top level is not an object {"chats": [...]}'),
    "CF103": ("error", "a chat is not a JSON object"),
    "CF104": ("error", "a required key is missing"),
    "CF105": ("error", "unknown key"),
    "CF106": ("error", "duplicate key in a JSON object"),
    "CF107": ("error", 'chat type is not "C", "I" or "E"'),
    "CF108": ("error", "order is not an integer >= 1"),
    "CF109": ("error", "body is not a string"),
    "CF110": ("error", "JSON nested too deeply"),
    "CF111": ("error", "two chats share one order"),
    "CF112": ("warning", "orders are not 1..n: some are missing"),
    "CF113": ("warning", "chats are not listed in order; presented sorted"),
    # CF13x: tag roles (custom tags)
    "CF131": ("error", "a cue tag's value is not one of its values"),
    "CF132": ("warning", "a cue tag's value is not one of its values; kept as written (lenient)"),
    "CF133": ("warning", "a cue tag's value cut off at the end of the input, not one of its values: dropped"),
    # CF145-CF149: speakers (a scene of several characters)
    "CF145": ("error", "a chat's speaker is not a name (a string without markup)"),
    "CF146": ("warning", "a chat's speaker is not a name: dropped (lenient)"),
    # CF150-CF159: the bounds of a constrained reply
    "CF150": ("warning", "speech cut mid-sentence (at its length bound, or by the token budget): ended at a word"),
    # CF160-CF169: input as it arrives (encodings)
    "CF160": ("warning", "input is UTF-16 or UTF-32 (it starts with that byte order mark): decoded as such"),
    # body
    "CF201": ("error", "syntax error in a body"),
    "CF202": ("error", "element not closed before the end of the body"),
    "CF203": ("error", "text outside an element in a C body"),
    "CF204": ("error", "unknown tag"),
    "CF205": ("error", "closing tag does not match the open element"),
    "CF206": ("error", "elements must be separated by exactly one newline"),
    "CF207": ("error", "raw '<' or '&' in text, or an entity charfmt does not decode"),
    "CF208": ("error", "emotion key is empty, padded, or holds markup, an entity or a control character"),
    "CF209": ("error", "character not allowed in text (control character or lone surrogate)"),
    "CF210": ("error", "empty body"),
    "CF211": ("error", "elements do not nest"),
    "CF212": ("error", "tags take no attributes"),
    # meaning
    "CF301": ("error", "emotion key is not in the vocabulary"),
    "CF302": ("info", "emotion key read as a vocabulary key (case, spaces or an alias)"),
    "CF303": ("warning", "unknown emotion key replaced by the nearest vocabulary key"),
    "CF304": ("warning", "unknown emotion key replaced by the fallback key"),
    "CF305": ("warning", "unknown emotion key kept as written"),
    "CF306": ("error", "emotion key is not in the vocabulary of the chat's speaker"),
    "CF307": ("error", "the chat's speaker is not one of the scene's cast"),
    "CF308": ("error", "a C chat of a scene names no speaker"),
    "CF309": ("warning", "off-cast speaker or unknown emotion of a scene kept as written (lenient)"),
    # user input
    "CF401": ("warning", "shorthand word is not an emotion or action of the character; kept as text"),
    "CF402": ("warning", "control character or lone surrogate in typed text replaced by U+FFFD"),
    "CF501": ("error", "text is not a user block (the language of prompts/user.j2)"),
    # lenient parsing: the envelope and what surrounds it
    "CF600": ("info", "the reply is written in another dialect (named in the message)"),
    "CF601": ("warning", "text outside the reply dropped (prose, stray punctuation)"),
    "CF602": ("warning", "code fence dropped"),
    "CF603": ("warning", "reasoning dropped (<think>, analysis channel, a Thinking section)"),
    "CF604": ("warning", "special token dropped"),
    "CF605": ("warning", "comma repaired (trailing, stray or missing)"),
    "CF606": ("warning", "quoting repaired (single quotes, unquoted keys, bare words, Python literals)"),
    "CF607": ("warning", "unescaped double quote inside a string kept as text"),
    "CF608": ("warning", "invalid escape or raw control character inside a string"),
    "CF609": ("warning", "HTML-escaped JSON (&quot;) read unescaped"),
    "CF610": ("warning", "the reply was cut off; what arrived is kept"),
    "CF611": ("warning", "several JSON replies merged"),
    "CF612": ("warning", "shape normalised (bare array, single chat, fields, body as lines)"),
    "CF613": ("warning", "chat type repaired (alias, lower case, missing, tags in an I/E chat)"),
    "CF614": ("warning", "orders missing or repeated: chats numbered in reading order"),
    "CF615": ("warning", "unknown key or empty chat dropped"),
    "CF616": ("warning", "no JSON: the text itself read as the character's chat"),
    "CF617": ("warning", "an integer too long to convert read as a huge number"),
    "CF618": ("warning", "an escape cut off at the end of the input dropped"),
    "CF619": ("warning", "a number, boolean or object where text was expected, read as text"),
    "CF620": ("warning", "a value that cannot be read where it stands dropped (object, array, null)"),
    "CF621": ("warning", "comment inside the JSON dropped (// line or /* block */)"),
    "CF622": ("warning", "chat-template scaffolding dropped (<<SYS>>, [INST], <|im_start|>..., an echoed prompt turn)"),
    "CF623": ("warning", "prose or a tag after an unclosed JSON value ends the JSON there (never one chat per word)"),
    "CF624": ("warning", "the request form (<user_chats>) echoed beside the reply dropped"),
    "CF625": ("warning", "the player's own turn echoed: not the character's speech, dropped"),
    "CF626": ("warning", "elements written before the JSON reply read as a chat of their own"),
    "CF627": ("warning", 'JSON punctuation or a list mark outside an element dropped ("}]} after bare elements)'),
    "CF628": ("warning", "a body of '...' (the format spec's placeholder, echoed from the prompt) dropped"),
    "CF629": (
        "warning",
        'a body left open runs into the next reply ({"chats": on a later line), ending at its line break, or into'
        " a request form written after it, ending before the form's lines",
    ),
    "CF630": ("warning", "the request form's <user_chats> or <chat> inside a body dropped: markup, never a segment"),
    "CF631": ("warning", "the prompt's own text echoed (a line of it, or a section written like it) dropped"),
    "CF632": ("warning", "a turn that is not this reply dropped: the player's (echoed or imagined), or the next one"),
    "CF633": ("warning", "a speaker label (Rex:, User:, model) dropped: a name is no speech"),
    "CF634": ("warning", 'a key written in a JSON array, no object around it ("id": "a0d8…"), dropped with its value'),
    "CF635": ("warning", "a line of the echoed form speaking to the character by name (Hi Wren!) is the player's"),
    "CF636": ("warning", "a preamble announcing the reply (Sure! Here is Rex:) dropped: no speech"),
    "CF637": ("warning", 'a JSON key naming a cue the body already gives ("mood" beside <emo>) dropped'),
    "CF638": ("warning", "markup the reader cannot read (a namespaced tag, a tag that lost its '>') dropped or opened"),
    "CF639": ("warning", "a language's name alone on its line (Français) before the reply: a label, no speech"),
    "CF640": ("warning", "elements after a chat's </chat> closed by a second </chat> read as that chat's"),
    "CF641": ("warning", "a bracketed label opening a line ([English: …], [User Context: …]) dropped: no speech"),
    "CF642": ("warning", "a line in the player's voice (I'm the deckhand: the prompt's name for the player) dropped"),
    "CF643": ("warning", "a scene's C chat naming no speaker read as the one cast member whose emotion keys it holds"),
    "CF650": ("warning", "an object where a key is due: its members read into the object before it, closed early"),
    "CF651": ("warning", "a tag written as text (&lt;/answer&gt;, <thought?>) between elements is markup: dropped"),
    # lenient parsing: bodies
    "CF701": ("info", "elements not separated by exactly one newline"),
    "CF702": ("warning", "element not closed (closed by the next tag or the end), or empty emotion dropped"),
    "CF703": ("warning", "mismatched closing tag or </> closes the open element"),
    "CF704": ("info", "tag spelling normalised (case, spaces, long name, full-width brackets, padded key)"),
    "CF705": ("warning", "attribute, self-closing or dot-notation tag converted"),
    "CF706": ("warning", "text outside an element read as speech (or narration as action)"),
    "CF707": ("info", "a '<' that starts no tag kept as text"),
    "CF708": ("warning", "unknown tag kept as a segment under its own name"),
    "CF709": ("warning", "an emotion inside a message splits the message"),
    "CF710": ("warning", "a tag named after an emotion read as that emotion"),
    "CF711": ("warning", "double-escaped newline read as a newline"),
    "CF712": ("warning", "closing tag with nothing open dropped"),
    "CF713": ("warning", "bracket tag, role-play markup or front matter read as an element"),
    "CF714": ("warning", "control characters or lone surrogates replaced by U+FFFD"),
    "CF715": ("info", "inline markup inside text removed (<b>, <i>, <span>...), its text kept"),
    "CF716": ("warning", "an entity cut off at the end of the input dropped"),
    "CF717": ("warning", "emotion key repaired (entities decoded, whitespace collapsed, stripped)"),
    "CF718": ("warning", "an emotion that cannot be a key (markup characters) kept as an action"),
    "CF720": ("warning", "markup cut off at the end: a half bracket tag dropped, an open mark read closed"),
    "CF721": ("warning", "an element left open ends at its line: the next line is read on its own"),
    "CF722": ("warning", "a sentence written as an emotion or a cue value read as speech or narration"),
    "CF723": ("warning", "an emotion key of the vocabulary alone on its line read as an emotion, not speech"),
    "CF724": ("info", "a bracket in running text that names no emotion of the vocabulary kept as text"),
    # streaming
    "CF801": ("error", "the stream left the format after max_size characters: the rest could not be repaired"),
    # SDK stream objects (iter_events, aiter_events): what is not reply text
    "CF821": ("error", "the model refused to answer (its refusal text or stop reason in the message)"),
    "CF822": ("warning", "the model called a tool: the call is not part of the reply (its name in the message)"),
    "CF823": ("error", "the provider's safety or content filter stopped the reply or blocked the prompt"),
    "CF824": ("warning", "the provider stopped the reply at a token limit: it may be cut off"),
    "CF825": ("warning", "a stream item charfmt does not read (not text, no known SDK object, a later choice) skipped"),
    "CF826": ("error", "the provider reported an error in the stream"),
    "CF827": ("info", "the provider paused a long-running turn ('pause_turn'): send the reply back to continue it"),
    "CF828": ("warning", "serve: an emotion key has no name the --reply-format's front end knows: written as the key"),
    # interop: documents of other formats (charfmt.interop)
    "CF901": ("error", "not a document of the format: a required key is missing or has another type"),
    "CF902": ("error", "charfmt's payload in the document is of an unknown version or not an exchange"),
    "CF903": ("info", "foreign text read as a plain chat: speech, or an I chat for system and tool messages"),
    "CF904": ("warning", "foreign content charfmt has no place for (media, tool, reference) kept in Exchange.foreign"),
    "CF905": ("info", "foreign model reasoning (PAM is_thought, Ailoy thinking) read as Reply.reasoning"),
    "CF906": ("warning", "foreign message without text kept only in Exchange.foreign"),
    "CF907": ("warning", "a message charfmt wrote was edited elsewhere: its visible text read as a plain chat"),
    "CF908": ("warning", "a message of charfmt's exchange is missing, or a continuation lost its payload"),
    "CF909": ("error", "a number JSON cannot carry (NaN, Infinity, out of range) in a conversation document"),
    "CF910": ("error", "convert --from jsonl: the input is one JSON document, not JSON Lines"),
    "CF911": ("warning", "PAM branching: only the first branch read as chats; the others kept in Exchange.foreign"),
    "CF912": ("warning", "group chat document of an unknown major version: read as 1.0.0"),
    "CF913": ("warning", "group chat sender 'system' not in user_details: read as a system (I) message"),
    # character cards (charfmt.prompt.cards)
    "CF920": ("info", "the card names no emotions: a default vocabulary is used"),
    "CF921": ("warning", "a mes_example block has no line of the character: kept in the card only"),
    "CF922": ("warning", "a card's emotion asset is not a usable emotion key: skipped"),
    "CF923": ("warning", "a card field is null: read as empty"),
    "CF924": ("warning", "a card's extensions is null or a list, not an object: read as {}"),
    "CF925": ("warning", "a PNG card's ccv3 chunk is unreadable: its chara chunk read instead"),
    "CF926": ("info", "card fields kept (written back on export) but not used in prompts"),
    "CF927": ("warning", "card fields edited elsewhere since charfmt wrote them: read from the card"),
    # CF928-CF929: macros; CF940-CF949: lorebooks (World Info)
    "CF928": ("warning", "an unknown macro (or one with bad arguments) left as written"),
    "CF929": ("error", "macro expansion would pass its output bound"),
    "CF930": ("warning", "a bracket tag's intensity is outside 0–1: clamped to 1, dropped below 0 (emotion kept)"),
    "CF931": ("warning", "a PNG card holds a card chunk (chara, ccv3) more than once: the first read"),
    "CF932": ("warning", "a card's mes_example is longer than charfmt reads as few-shots: the rest kept in the card"),
    "CF933": (
        "warning",
        "a scene's member card's system_prompt or post_history_instructions not sent: one prompt for the cast",
    ),
    "CF934": ("warning", "an item of a card's list field (a greeting, a tag) is not text: kept in the card, not used"),
    "CF940": ("info", "lorebook entries activated for this turn (named in the message)"),
    "CF941": ("warning", "lorebook entries activated but left out: the lorebook's token budget was reached"),
    "CF942": ("warning", "a lorebook regex key is not used: invalid, needs the regex package, or ran out of time"),
    "CF943": ("warning", "a lorebook entry or field charfmt cannot read: skipped"),
    "CF944": ("info", "lorebook features charfmt does not apply (groups, timed effects, vector matching)"),
    "CF945": ("warning", "lorebook entries at a depth placed after the character: the provider has no system turns"),
    "CF946": ("warning", "the same lorebook given twice (the card's own book again, a copy): read once"),
    "CF947": ("warning", "lorebook entries activated but left out: the prompt's token budget was reached"),
    "CF960": ("warning", "a chat's order does not fit a 64-bit integer: null in a table's order column"),
    "CF961": ("error", "the server sent invalid UTF-8: each bad byte read as U+FFFD"),
    "CF999": ("error", "internal error in lenient recovery (a bug: please report it)"),
}
"""Every diagnostic code charfmt emits: default severity and a one-line title.

Codes are stable: a code keeps its meaning forever; new problems get new codes.
"""


def too_long(size: int, maximum: int, *, in_bytes: bool) -> str:
    """The message of ``CF002`` (``max_size`` counts characters of ``str`` input, bytes of ``bytes``)."""
    unit = "bytes" if in_bytes else "characters"
    return f"input is {size:,} {unit} long; the maximum is {maximum:,} (max_size)"


def in_body(chat: int, message: str) -> str:
    """A diagnostic message about the body of chat ``chat`` (every reader words it this way)."""
    return f"chat {chat} body: {message}"


def _width(ch: str) -> int:
    """Terminal columns a character takes: 2 for East Asian wide and full-width ones."""
    import unicodedata  # noqa: PLC0415 (only snippets need it)

    return 2 if unicodedata.east_asian_width(ch) in "WF" else 1


def line_col(source: str, offset: int) -> tuple[int, int]:
    """1-based line and column of ``offset`` in ``source`` (columns count code points)."""
    offset = max(0, min(offset, len(source)))
    if len(source) < 4096:
        line = source.count("\n", 0, offset) + 1
        return line, offset - (source.rfind("\n", 0, offset) + 1) + 1
    # A damaged reply can have a diagnostic per line: index the newlines once, then bisect.
    newlines = _newlines(source)
    k = bisect.bisect_left(newlines, offset)
    return k + 1, offset - (newlines[k - 1] + 1 if k else 0) + 1


_NEWLINES: list[tuple[str, array[int]]] = []
"""The newline index of the last few sources, found by identity: a cache keyed by equality
would compare a whole megabyte reply with an equal copy on every lookup."""


def _newlines(source: str) -> array[int]:
    for known, index in _NEWLINES:
        if known is source:
            return index
    from array import array  # noqa: PLC0415 (import cost: only a source of 4,096 characters or more)

    index = array("q", (m.start() for m in re.finditer("\n", source)))
    _NEWLINES.insert(0, (source, index))
    del _NEWLINES[4:]
    return index


class Diagnostic(BaseModel):
    """One problem (or repair) found in the raw input."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    code: str
    """Stable code such as ``CF201``; see ``docs/FORMAT.md`` for the list."""
    message: str
    """What is wrong, in words, naming what was found and what was expected."""
    severity: Severity = "error"
    """``error`` makes strict parsing fail; ``warning`` and ``info`` do not."""
    line: int
    """1-based line in the raw input."""
    column: int
    """1-based column (in code points) in the raw input."""
    offset: int
    """0-based offset (in code points) in the raw input."""
    end: int
    """0-based offset just past the raw span concerned (``== offset`` for a point)."""
    chat: int | None = None
    """Index of the chat in the JSON ``chats`` array, or ``None`` for the envelope."""

    @classmethod
    def at(
        cls,
        source: str,
        code: str,
        message: str,
        offset: int,
        end: int | None = None,
        *,
        chat: int | None = None,
        severity: Severity | None = None,
    ) -> Diagnostic:
        """Build a diagnostic for ``source[offset:end]``; the one place positions are computed."""
        offset = max(0, min(offset, len(source)))
        end = offset if end is None else max(offset, min(end, len(source)))
        line, column = line_col(source, offset)
        return cls(
            code=code,
            message=message,
            severity=severity or CODES[code][0],
            line=line,
            column=column,
            offset=offset,
            end=end,
            chat=chat,
        )

    def snippet(self, source: str) -> str:
        """The raw input line holding the problem, with carets under the span."""
        start = source.rfind("\n", 0, self.offset) + 1
        stop = source.find("\n", self.offset)
        if stop == -1:
            stop = len(source)
        text = source[start:stop]
        width = max(1, min(self.end, stop) - self.offset)
        # Keep very long lines (a whole reply on one line) readable: show a window.
        lo = max(0, self.offset - start - 40)
        hi = min(len(text), self.offset - start + width + 40)
        shown = ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")
        pad = (1 if lo else 0) + (self.offset - start - lo)
        caret_pad = "".join("\t" if ch == "\t" else " " * _width(ch) for ch in shown[:pad])
        carets = "^" * max(1, sum(_width(ch) for ch in shown[pad : pad + width]))
        gutter = f"{self.line} | "
        return f"{gutter}{shown}\n{' ' * len(gutter)}{caret_pad}{carets}"

    def __str__(self) -> str:
        return f"{self.line}:{self.column}: {self.code} {self.message}"


class CharfmtError(ValueError):
    """Base class of every error charfmt raises on purpose."""


class ParseError(CharfmtError):
    """Strict parsing found errors; ``diagnostics`` lists all of them in input order."""

    def __init__(self, diagnostics: Sequence[Diagnostic], source: str = "") -> None:
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        self.source = source
        first = next((d for d in self.diagnostics if d.severity == "error"), self.diagnostics[0])
        self.first: Diagnostic = first
        """The first error, the one ``str()`` names."""
        more = sum(d.severity == "error" for d in self.diagnostics) - 1
        tail = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
        super().__init__(f"{first.code} at line {first.line}, column {first.column}: {first.message}{tail}")

    @property
    def line(self) -> int:
        """Line of the first error."""
        return self.first.line

    @property
    def column(self) -> int:
        """Column of the first error."""
        return self.first.column

    def report(self, name: str = "<input>") -> str:
        """Every diagnostic as ``name:line:col: CODE message`` with its caret snippet."""
        parts = []
        for d in self.diagnostics:
            parts.append(f"{name}:{d}")
            if self.source:
                parts.append(d.snippet(self.source))
        return "\n".join(parts)
