"""Character cards: SillyTavern / TavernAI cards read as charfmt characters, and characters written as cards.

Read (``Character.load`` does it for a card file; ``read_card`` is the step underneath):

- **V2** (``chara_card_v2``): JSON, base64-encoded in a PNG ``tEXt`` chunk ``chara``;
- **V3** (``chara_card_v3``): the same in a ``ccv3`` chunk (preferred when both exist), a plain
  JSON file, or a CHARX zip holding ``card.json`` and its assets;
- **V1** (TavernAI): a plain object with ``name``, ``description``... at the top.

What a card says becomes the character: the persona from ``description``, ``personality`` and
``scenario``; ``mes_example`` read with the lenient role-play reader into few-shots (``*waves*
Welcome`` is an action and a message); V3 assets of type ``emotion`` become emotion keys with
their sprites (named by one of SillyTavern's labels, with its aliases). A card without emotions gets
``DEFAULT_EMOTIONS`` (``CF920``). Macros
(``{{char}}``, ``{{user}}``, TavernAI's ``<BOT>``/``<USER>``, ``{{random:…}}``...) are kept as
written and expanded each time a prompt is rendered (``charfmt.prompt.macros``), with the player's name
of that prompt. The greetings (``first_mes``, ``alternate_greetings``: :func:`greeting`), the
lorebook (``character_book``), ``system_prompt`` and ``post_history_instructions`` are read from
``Character.card`` when a prompt or a session needs them (``charfmt.prompt._card_prompt``). Everything
of the card (creator notes, assets, ``extensions`` byte for byte) is kept in ``Character.card``
and written back by ``export_card``.

A card from a stranger is read in bounded time and memory (``docs/UNTRUSTED.md``): only the PNG
chunks of a card are inflated, within ``limit`` for the whole file; a CHARX is refused when it is
a bomb, encrypted, or holds a name twice; ``extensions.charfmt`` of another shape than charfmt
writes is an error naming the member; ``mes_example`` is read in linear time, at most
``MAX_EXAMPLE_TURNS`` turns of it as few-shots (``CF932``).

Write: ``export_card(character, "json" | "png")`` is a V3 card (a PNG carries a V2 ``chara``
chunk too, for older readers) with charfmt's own data (emotions, tags, stage map, examples)
under ``extensions.charfmt``, so that reading it back gives the same character.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from charfmt._grammar.lexical import NOT_TEXT_CHAR
from charfmt._grammar.static import terminal_regex
from charfmt._png import CARD_KEYWORDS, PngError, Texts, blank_png, read_texts, with_text_chunks
from charfmt.diagnostics import CharfmtError, Diagnostic
from charfmt.models import Chat, Reply, Segment, Vocabulary, validation_message
from charfmt.parser import parse
from charfmt.prompt.userinput import UserTurn, parse_shorthand
from charfmt.tags import DEFAULT_TAGS
from charfmt.writer import canonical_form

if TYPE_CHECKING:
    from charfmt.prompt.character import Character

__all__ = [
    "CHARFMT_VERSION",
    "DEFAULT_EMOTIONS",
    "MAX_CHARX_ENTRIES",
    "MAX_CHARX_EXPANSION",
    "MAX_CHARX_RATIO",
    "MAX_EXAMPLE_TEXT",
    "MAX_EXAMPLE_TURNS",
    "OWN",
    "OWN_CHARACTER",
    "CardError",
    "CardInfo",
    "CardRead",
    "card_json",
    "card_text",
    "export_card",
    "greeting",
    "greeting_count",
    "is_card",
    "is_generated",
    "read_card",
]

CHARFMT_VERSION: Final = 1
"""The version of what ``extensions.charfmt`` holds."""

DEFAULT_EMOTIONS: Final = (
    ("neutral", "Calm; the default.", ("calm",)),
    ("joy", "Happy, pleased, amused.", ("happy", "amusement", "smile")),
    ("sadness", "Sad, hurt, lonely.", ("sad", "grief")),
    ("anger", "Angry, annoyed.", ("angry", "annoyance", "annoyed")),
    ("surprise", "Surprised, startled.", ("surprised", "shock")),
    ("fear", "Afraid, nervous.", ("afraid", "nervousness", "scared")),
    ("embarrassment", "Embarrassed, shy, flustered.", ("embarrassed", "shy", "blush")),
    ("love", "Affectionate, caring.", ("caring", "affection")),
)
"""The vocabulary of a card without emotions: SillyTavern's expression labels most cards' sprites use."""

# The V3 data fields with their defaults: a card read is completed with them, so a V2 or V1
# card written back as V3 and read again is the same.
_V3_DATA_FIELDS: Final[tuple[tuple[str, Any], ...]] = (
    ("name", ""),
    ("description", ""),
    ("personality", ""),
    ("scenario", ""),
    ("first_mes", ""),
    ("mes_example", ""),
    ("creator_notes", ""),
    ("system_prompt", ""),
    ("post_history_instructions", ""),
    ("alternate_greetings", []),
    ("tags", []),
    ("creator", ""),
    ("character_version", ""),
    ("group_only_greetings", []),
)
_V3_ONLY: Final = frozenset(
    {"assets", "nickname", "creator_notes_multilingual", "source", "group_only_greetings", "creation_date",
     "modification_date"}
)  # fmt: skip
"""Fields a V2 card (the PNG's ``chara`` chunk written for older readers) leaves out."""


class CardError(CharfmtError):
    """A file that is not a readable character card; ``key`` says which field, where one is at fault."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key


class CardInfo(BaseModel):
    """What a character card holds beyond what charfmt reads from it: kept, and written back on export."""

    model_config = ConfigDict(frozen=True)

    data: dict[str, Any]
    """The card's ``data`` object as read (lorebook, system prompt, greetings, assets...), ``extensions`` left out."""
    extensions: str = "{}"
    """``data.extensions`` as the card's raw JSON text, byte for byte (charfmt's own entry left out)."""
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    """What reading the card had to say (a default vocabulary, few-shots that could not be read)."""


# --- reading -------------------------------------------------------------------------------------


def is_card(data: bytes) -> bool:
    """Whether ``data`` looks like a card (PNG, zip, or a JSON object) rather than TOML."""
    return data.startswith((b"\x89PNG", b"PK\x03\x04")) or data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")


def card_text(data: bytes, *, limit: int, key: str | None = None) -> str:
    """The card JSON of a PNG (``ccv3`` preferred to ``chara``, or ``key``), a CHARX zip or a JSON file."""
    if not data.strip():
        raise CardError("empty file")
    if data.startswith(b"\x89PNG"):
        chunks = _png_chunks(data, limit)
        return _png_card(chunks, key or _png_key(chunks))
    if data.startswith(b"PK\x03\x04"):
        return _decode_utf8(_charx_member(data, "card.json", limit), "card.json")
    return _decode_utf8(data, "the card").removeprefix("\ufeff")


def _png_chunks(data: bytes, limit: int) -> Texts:
    """The card chunks of a PNG, read once (``limit`` bounds what they inflate to); a ``CardError`` if damaged."""
    try:
        return read_texts(data, limit=limit, keywords=CARD_KEYWORDS)
    except PngError as e:
        raise CardError(str(e)) from None


def _png_key(chunks: Texts) -> str:
    """The chunk a PNG's card is read from: ``ccv3`` where there is one, else ``chara``."""
    for key in ("ccv3", "chara"):
        if key in chunks.texts:
            return key
    raise CardError("a PNG without a character card (no 'ccv3' or 'chara' text chunk)")


def _png_card(chunks: Texts, key: str) -> str:
    """The card JSON in a PNG's chunk ``key`` (base64 of UTF-8)."""
    try:
        raw = base64.b64decode(chunks.texts[key].strip(), validate=True)
    except (binascii.Error, ValueError):
        raise CardError(f"the PNG's {key!r} chunk is not base64") from None
    return _decode_utf8(raw, f"the PNG's {key!r} chunk")


def _decode_utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CardError(f"{what} is not UTF-8: byte 0x{raw[e.start]:02X} at offset {e.start}") from None


MAX_CHARX_ENTRIES: Final = 10_000
"""The most entries a CHARX may hold (the zip reader keeps one record per entry in memory)."""
MAX_CHARX_EXPANSION: Final = 16
"""A CHARX's entries may expand to this many times the size limit of the file, all together."""
MAX_CHARX_RATIO: Final = 200
"""The most an entry over ``_RATIO_FLOOR`` bytes may expand (deflate's own ceiling is about 1,000)."""
_RATIO_FLOOR: Final = 1 << 20
"""Entries this small may compress as well as they like (a card of repeated keys does)."""
_CHARX_METHODS: Final = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
"""How ``card.json`` may be compressed (other methods need more memory than the card is worth, or a library)."""
_ZIP_ERRORS: Final = (
    zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, OSError, RuntimeError, ValueError,
    struct.error, zlib.error, OverflowError,
)  # fmt: skip
"""What the standard zip reader raises for a damaged or unusual file (RuntimeError: encrypted)."""


def _charx_member(data: bytes, name: str, limit: int) -> bytes:
    """One file of a CHARX zip, at most ``limit`` bytes uncompressed; a bomb, a duplicate, an encrypted or
    damaged entry is a ``CardError`` naming it."""
    # The zip reader holds every entry's record: count them before it reads the directory.
    if data.count(b"PK\x01\x02") > MAX_CHARX_ENTRIES:
        raise CardError(f"a CHARX file with more than {MAX_CHARX_ENTRIES:,} entries")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            infos = z.infolist()
            _check_charx(infos, limit)
            try:
                info = z.getinfo(name)
            except KeyError:
                raise CardError(f"a CHARX file without {name}") from None
            _check_charx_member(info, limit)
            with z.open(info) as f:
                out = f.read(limit + 1)
            if len(out) > limit:
                raise CardError(f"{name} is larger than {limit:,} bytes")
            return out
    except CardError:
        raise
    except _ZIP_ERRORS as e:
        raise CardError(f"not a readable CHARX (zip) file: {e or type(e).__name__}") from None


def _check_charx(infos: list[zipfile.ZipInfo], limit: int) -> None:
    """The whole zip: no name twice, no bomb (what the entries expand to, all together and each)."""
    seen: set[str] = set()
    for info in infos:
        if info.filename in seen:
            raise CardError(f"a CHARX file with two entries named {info.filename!r} (which one is meant?)")
        seen.add(info.filename)
    total = sum(info.file_size for info in infos)
    if total > MAX_CHARX_EXPANSION * limit:
        raise CardError(
            f"a CHARX file whose entries expand to {total:,} bytes (more than {MAX_CHARX_EXPANSION} times"
            f" {limit:,}: a zip bomb?)"
        )
    for info in infos:
        if info.file_size > _RATIO_FLOOR and info.file_size > MAX_CHARX_RATIO * max(info.compress_size, 1):
            ratio = info.file_size // max(info.compress_size, 1)
            raise CardError(
                f"the CHARX entry {info.filename!r} expands {ratio:,} times (more than {MAX_CHARX_RATIO}: a zip bomb?)"
            )


def _check_charx_member(info: zipfile.ZipInfo, limit: int) -> None:
    """The entry charfmt reads: not encrypted, compressed in a way it reads, within the limit."""
    if info.flag_bits & 0x1:
        raise CardError(f"{info.filename} is encrypted (charfmt reads CHARX files without a password)")
    if info.compress_type not in _CHARX_METHODS:
        methods = " or ".join(_CHARX_METHODS.values())
        raise CardError(f"{info.filename} is compressed with zip method {info.compress_type} (charfmt reads {methods})")
    if info.file_size > limit:
        raise CardError(f"{info.filename} is larger than {limit:,} bytes")


def read_card(data: bytes, *, limit: int, user_name: str | None = None) -> CardRead:
    """A card's bytes as the ``Character`` fields it gives and the card's ``CardInfo``; raises ``CardError``.

    ``user_name``: what ``{{user}}`` becomes (the player's name; ``None``: ``User``, or what charfmt wrote).
    """
    if not data.startswith(b"\x89PNG"):
        return _read_card(card_text(data, limit=limit), [], user_name)
    chunks = _png_chunks(data, limit)
    notes = [
        _note("CF931", f"the PNG holds {n} {key!r} text chunks: the first read, the others skipped")
        for key, n in chunks.counts.items()
        if n > 1
    ]
    key = _png_key(chunks)
    try:
        return _read_card(_png_card(chunks, key), list(notes), user_name)
    except CardError as e:
        if key != "ccv3" or "chara" not in chunks.texts:
            raise
        note = _note("CF925", f"the PNG's 'ccv3' chunk is unreadable ({e}): its 'chara' chunk read instead")
        return _read_card(_png_card(chunks, "chara"), [*notes, note], user_name)


_V1_FIELDS: Final = ("description", "personality", "first_mes", "mes_example")
"""What a V1 (TavernAI) card has besides ``name``: an object with none of them is not a card."""


def _read_card(text: str, notes: list[Diagnostic], user_name: str | None) -> CardRead:
    try:
        card = json.loads(text)
    except ValueError as e:
        raise CardError(f"the card is not JSON: {e}") from None
    if not isinstance(card, dict):
        raise CardError("the card is not a JSON object")
    spec = card.get("spec")
    if spec in ("chara_card_v2", "chara_card_v3"):
        fields = card.get("data")
        if not isinstance(fields, dict):
            raise CardError(f"a {spec} card has a data object", "data")
        extensions = _raw_member(text, ("data", "extensions"))
    elif spec is None and "name" in card and any(key in card for key in _V1_FIELDS):
        fields, extensions = card, None  # V1 (TavernAI): the fields at the top
    elif spec is None:
        raise CardError(
            "not a character card: no spec (chara_card_v2, chara_card_v3) and not a V1 card"
            f" (name with {', '.join(_V1_FIELDS)})",
            "spec",
        )
    else:
        raise CardError(f"unknown card spec {spec!r} (charfmt reads chara_card_v2 and chara_card_v3)", "spec")
    extensions = extensions or "{}"
    fields = dict(fields)
    for key, default in _V3_DATA_FIELDS:
        if key in fields and fields[key] is None:  # SillyTavern exports null for fields never set
            notes.append(_note("CF923", f"data.{key} is null: read as empty"))
            fields[key] = type(default)()
        value = fields.get(key, default)
        if not isinstance(value, type(default)):
            raise CardError(f"{key} is not a {'list' if isinstance(default, list) else 'string'}", f"data.{key}")
        odd = [n for n, item in enumerate(value) if not isinstance(item, str)] if isinstance(value, list) else []
        if odd:
            more = f" and {len(odd) - 5} more" if len(odd) > 5 else ""
            places = ", ".join(f"data.{key}[{n}]" for n in odd[:5]) + more
            notes.append(_note("CF934", f"{places} not text: kept in the card, not used"))
    notes += _greeting_macros(fields)
    if not fields.get("name", "").strip():
        raise CardError("the card has no name", "data.name")
    try:
        ext = json.loads(extensions)
    except ValueError:
        ext = None
    if not isinstance(ext, dict):
        if ext not in (None, []) and ext != {}:
            raise CardError("extensions is not a JSON object", "data.extensions")
        notes.append(_note("CF924", f"data.extensions is {extensions.strip()}, not an object: read as {{}}"))
        ext, extensions = {}, "{}"
    notes += _unused_extensions(ext)
    kept = {key: fields.get(key, default) for key, default in _V3_DATA_FIELDS}
    kept.update({k: v for k, v in fields.items() if k != "extensions"})
    if "charfmt" not in ext:
        character, read = _from_fields(kept, user_name or "User")
        return CardRead(character, CardInfo(data=kept, extensions=extensions, diagnostics=[*notes, *read]))
    if sum(name == "charfmt" for name, *_span in _members(extensions, 0)) > 1:
        raise CardError("extensions holds charfmt twice (which one is meant?)", "data.extensions.charfmt")
    foreign = _without_member(extensions, "charfmt")
    character, written, said = _own_data(ext["charfmt"])
    said += notes
    if user_name is not None:
        character = {**character, "user_name": user_name}
    changed = [k for k in _DIGESTED if k in written and written[k] != _digest(kept[k])]
    if changed:  # edited elsewhere (SillyTavern) since charfmt wrote it: the card's fields win
        character = _edited(character, kept, changed, user_name or character.get("user_name") or "User")
        edited = ", ".join(changed)
        said.append(_note("CF927", f"card fields edited since charfmt wrote them ({edited}): read from the card"))
    return CardRead(character, CardInfo(data=kept, extensions=foreign, diagnostics=said), OWN_CHARACTER)


OWN: Final = "data.extensions.charfmt"
"""Where charfmt's own data stands in a card (what errors about it name)."""
OWN_CHARACTER: Final = (*OWN.split("."), "character")
"""Where the character charfmt wrote stands in a card: the place of its validation errors."""


class CardRead(NamedTuple):
    """What ``read_card`` reads of a card."""

    fields: dict[str, Any]
    """The ``Character`` fields the card gives."""
    info: CardInfo
    """What the card holds beyond them."""
    at: tuple[str, ...] = ()
    """Where in the card the fields were written, when they were written whole (charfmt's own
    ``extensions.charfmt.character``): an error in them is named from there."""


def _kind(value: Any) -> str:
    """What a JSON value is, in a few words (for messages naming what was found)."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return f"the number {value!r}" if len(repr(value)) <= 20 else "a number"
    kinds: dict[type, str] = {str: "a string", list: "a list", dict: "an object"}
    return kinds.get(type(value), type(value).__name__)


def _member_kind(obj: dict[str, Any], key: str) -> str:
    """What member ``key`` of ``obj`` is, in a few words (``missing`` where there is none)."""
    return _kind(obj[key]) if key in obj else "missing"


def _own_data(own: Any) -> tuple[dict[str, Any], dict[str, str], list[Diagnostic]]:
    """charfmt's own data in a card (``extensions.charfmt``): the character, the fields' digests, the notes.

    Only charfmt writes it, and never with another shape: anything else is a ``CardError`` naming it.
    """
    if not isinstance(own, dict):
        raise CardError(f"charfmt is {_kind(own)}, not an object (charfmt's own data)", OWN)
    if own.get("version") != CHARFMT_VERSION:
        raise CardError(f"version is {_member_kind(own, 'version')}, not {CHARFMT_VERSION}", f"{OWN}.version")
    character = own.get("character")
    if not isinstance(character, dict):
        raise CardError(f"character is {_member_kind(own, 'character')}, not an object", f"{OWN}.character")
    for key, kind in (("user_name", str), ("emotions", list)):  # read here before the character is checked
        if key in character and not isinstance(character[key], kind):
            wanted = "a string" if kind is str else "a list"
            raise CardError(f"{key} is {_kind(character[key])}, not {wanted}", f"{OWN}.character.{key}")
    written = own.get("fields", {})
    if not isinstance(written, dict) or not all(isinstance(v, str) for v in written.values()):
        raise CardError("fields is an object of field names and their digests (strings)", f"{OWN}.fields")
    said = own.get("diagnostics", [])
    if not isinstance(said, list):
        raise CardError(f"diagnostics is {_kind(said)}, not a list", f"{OWN}.diagnostics")
    notes = []
    for n, item in enumerate(said):
        try:
            notes.append(Diagnostic.model_validate(item))
        except ValidationError as e:
            raise CardError(validation_message(e), f"{OWN}.diagnostics[{n}]") from None
    return character, written, notes


_KANA: Final = re.compile(r"[\u3040-\u30ff]")
_HAN: Final = re.compile(r"[\u4e00-\u9fff]")
_HANGUL: Final = re.compile(r"[\uac00-\ud7af]")


def _script_language(text: str) -> str:
    """The language the card is written in, as far as its script says (``en`` by default)."""
    if _KANA.search(text):
        return "ja"
    if _HANGUL.search(text):
        return "ko"
    return "zh" if _HAN.search(text) else "en"


def _greeting_macros(fields: dict[str, Any]) -> list[Diagnostic]:
    """``CF928`` for each greeting that holds an unknown macro: a greeting is expanded at a chat's start, where no
    render reports what it left as written (the persona's and the instructions' are reported by each render)."""
    from charfmt.prompt.macros import MacroError, Macros, expand  # noqa: PLC0415 (import cost: only cards with macros)

    greetings = [("first_mes", fields.get("first_mes"))]
    greetings += [(f"alternate_greetings[{n}]", text) for n, text in enumerate(fields.get("alternate_greetings") or [])]
    notes = []
    for key, text in greetings:
        if not isinstance(text, str) or "{{" not in text:
            continue
        try:
            _written, said = expand(text, Macros("", ""), where=f"data.{key}")
        except MacroError:  # (said where the greeting is used: CF929)
            continue
        notes += [_note(d.code, d.message) for d in said]
    return notes


def _note(code: str, message: str) -> Diagnostic:
    return Diagnostic.at("", code, message, 0)


_DIGESTED: Final[tuple[str, ...]] = ("name", "description", "personality", "scenario", "first_mes", "mes_example")
"""The card fields charfmt reads: ``extensions.charfmt.fields`` holds a digest of each as written."""


def _digest(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _edited(own: dict[str, Any], fields: dict[str, Any], changed: list[str], user: str) -> dict[str, Any]:
    """charfmt's character with what the edited card ``fields`` say in place of what they said when written."""
    try:
        derived, _notes = _from_fields(fields, user, emotions=own.get("emotions"))
    except ValidationError as e:  # the emotions charfmt wrote, read with the edited fields
        raise CardError(validation_message(e), f"{OWN}.character") from None
    out = dict(own)
    if {"description", "personality", "scenario"} & set(changed):
        out["persona"] = derived["persona"]
    if "name" in changed:
        out["name"] = derived["name"]
    if {"first_mes", "mes_example"} & set(changed):
        out["examples"] = derived["examples"]
    return out


def _from_fields(
    fields: dict[str, Any], user: str = "User", *, emotions: list[Any] | None = None
) -> tuple[dict[str, Any], list[Diagnostic]]:
    """The ``Character`` fields a card (without charfmt's own data) gives, and what reading it noted.

    The card's macros (``{{char}}``, ``{{user}}``, ``{{random:…}}``...) are kept as written: they
    are expanded when a prompt is rendered (``charfmt.prompt.macros``), so the player's name and the
    turn's time are the prompt's, not the reading's.
    """
    name = fields["name"].strip()
    notes: list[Diagnostic] = []

    def text(key: str) -> str:
        return str(fields.get(key) or "").strip()

    unused = [label for key, label in _UNUSED if fields.get(key)]
    if unused:
        notes.append(_note("CF926", f"kept in the card but not used in prompts: {', '.join(unused)}"))

    parts = [text("description")]
    if text("personality"):
        parts.append(f"{{{{char}}}}'s personality: {text('personality')}")
    if text("scenario"):
        parts.append(f"Scenario: {text('scenario')}")
    persona = "\n\n".join(p for p in parts if p) or name
    if emotions is None:
        emotions = _emotion_assets(fields.get("assets"), notes)
    if not emotions:
        emotions = [{"key": k, "description": d, "aliases": list(a)} for k, d, a in DEFAULT_EMOTIONS]
        keys = ", ".join(k for k, _d, _a in DEFAULT_EMOTIONS)
        notes.append(_note("CF920", f"the card names no emotions: the default vocabulary ({keys}) is used"))
    vocabulary = Vocabulary.model_validate({"emotions": emotions})
    examples = []
    speakers = _speakers(fields, name, user)
    examples += _examples(text("mes_example"), name, speakers, vocabulary=vocabulary, notes=notes)
    character = {
        "name": name,
        "persona": persona,
        "language": _script_language(persona),
        "user_name": user,
        "emotions": emotions,
        "examples": examples,
    }
    return character, notes


def _speakers(fields: dict[str, Any], name: str, user: str) -> tuple[list[str], list[str]]:
    """How ``mes_example`` lines name the character and the player: the macros, then the names."""
    nickname = fields.get("nickname")
    chars = ["{{char}}", "<BOT>", "<CHAR>", name]  # (TavernAI's <BOT>: charfmt.prompt.macros expands it as {{char}})
    chars += [nickname.strip()] if isinstance(nickname, str) and nickname.strip() else []
    return chars, ["{{user}}", "<USER>", user]


def greeting(character: Character, index: int, expand: Callable[[str], str]) -> Reply | None:
    """The card's greeting ``index`` (0: ``first_mes``; 1...: ``alternate_greetings``) as a reply, or ``None``.

    ``expand``: the macros of the session's start (``charfmt.prompt.macros``), applied before the
    greeting is read with the lenient role-play reader (``*waves* Welcome!``).
    """
    card = character.card
    if card is None:
        return None
    texts = [card.data.get("first_mes"), *(card.data.get("alternate_greetings") or [])]
    if not 0 <= index < len(texts) or not isinstance(texts[index], str) or not texts[index].strip():
        return None
    return _reply(expand(texts[index]), character.vocabulary)


def greeting_count(character: Character) -> int:
    """How many greetings the card has (``first_mes`` and the alternates; 0 without a card)."""
    card = character.card
    if card is None:
        return 0
    alternates = card.data.get("alternate_greetings")
    return 1 + (len(alternates) if isinstance(alternates, list) else 0)


def _emotion_assets(assets: Any, notes: list[Diagnostic]) -> list[dict[str, Any]]:
    """V3 assets of type ``emotion``: each name an emotion key (a known label with its aliases), its URI the sprite."""

    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for asset in assets if isinstance(assets, list) else ():
        if not isinstance(asset, dict) or asset.get("type") != "emotion":
            continue
        key, uri = asset.get("name"), asset.get("uri")
        if not isinstance(key, str) or not terminal_regex("KEY").fullmatch(key) or key.casefold() in seen:
            notes.append(_note("CF922", f"emotion asset {key!r} is not a usable emotion key: skipped"))
            continue
        seen.add(key.casefold())
        out.append({"key": key, "sprite": uri if isinstance(uri, str) else None})
    taken = set(seen)
    return [{**emotion, **_known_label(emotion["key"], taken)} for emotion in out]


def _known_label(key: str, taken: set[str]) -> dict[str, Any]:
    """The description and aliases of a sprite named by one of SillyTavern's labels (``DEFAULT_EMOTIONS``).

    An asset named ``anger`` or ``angry`` gets the label's other names as aliases, so the player's
    ``[angry]`` finds it; names an asset or an earlier alias already holds (``taken``, casefolded) are left
    out, and the ones given are added to it.
    """
    for label, description, aliases in DEFAULT_EMOTIONS:
        names = (label, *aliases)
        if key.casefold() in names:
            others = [n for n in names if n != key.casefold() and n not in taken]
            taken.update(others)
            return {"description": description, "aliases": others}
    return {}


_UNUSED: Final = (("group_only_greetings", "group_only_greetings"),)
"""Card fields charfmt keeps (and writes back) but does not put in its prompts."""


def _unused_extensions(ext: dict[str, Any]) -> list[Diagnostic]:
    """What SillyTavern's extensions of a card would change in its prompts that charfmt does not apply (``CF926``):
    a linked World Info book (``world``, a file of SillyTavern's, not in the card) and regex scripts."""
    unused = []
    if isinstance(ext.get("world"), str) and ext["world"].strip():
        unused.append(f"extensions.world (the linked World Info {ext['world'].strip()!r}: give it with --lorebook)")
    if isinstance(ext.get("regex_scripts"), list) and ext["regex_scripts"]:
        unused.append(f"extensions.regex_scripts ({len(ext['regex_scripts'])} of SillyTavern's regex scripts)")
    return [_note("CF926", f"kept in the card but not used in prompts: {'; '.join(unused)}")] if unused else []


_START: Final = re.compile(r"^[^\S\n]*<START>[^\S\n]*$", re.IGNORECASE | re.MULTILINE)
"""A ``<START>`` line. Spaces only within the line: ``\\s*`` would cross line breaks, and a run of
blank lines would be scanned again from each of them (quadratic)."""


def _blocks(text: str) -> list[str]:
    return [b for b in _START.split(text) if b.strip()]


MAX_EXAMPLE_TURNS: Final = 1_000
"""The most turns of ``mes_example`` read as few-shots (each is read leniently, as a model's reply is)."""
MAX_EXAMPLE_TEXT: Final = 1 << 20
"""The most characters of ``mes_example`` turns read as few-shots (more than any context window holds)."""


class _Budget:
    """What is left to read of ``mes_example`` as few-shots: turns and characters."""

    def __init__(self) -> None:
        self.turns, self.chars, self.spent = MAX_EXAMPLE_TURNS, MAX_EXAMPLE_TEXT, False

    def take(self, text: str) -> bool:
        """Whether one more turn of ``text`` may be read (``spent`` from the first that may not)."""
        if self.turns <= 0 or len(text) > self.chars:
            self.spent = True
            return False
        self.turns -= 1
        self.chars -= len(text)
        return True


def _examples(
    text: str, name: str, speakers: tuple[list[str], list[str]], *, vocabulary: Vocabulary, notes: list[Diagnostic]
) -> list[dict[str, Any]]:
    """The few-shot exchanges of ``mes_example``, within ``MAX_EXAMPLE_TURNS`` and ``MAX_EXAMPLE_TEXT``."""
    examples: list[dict[str, Any]] = []
    budget = _Budget()
    for n, block in enumerate(_blocks(text)):
        exchanges = list(_exchanges(block, speakers, vocabulary, budget))
        if budget.spent:
            notes.append(
                _note(
                    "CF932",
                    f"mes_example is longer than charfmt reads as few-shots ({MAX_EXAMPLE_TURNS:,} turns,"
                    f" {MAX_EXAMPLE_TEXT:,} characters): read up to block {n + 1}, all of it kept in the card",
                )
            )
            return examples + exchanges
        if not exchanges:
            notes.append(_note("CF921", f"mes_example block {n + 1} has no line of {name}: kept in the card only"))
        examples += exchanges
    return examples


def _exchanges(
    block: str, speakers: tuple[list[str], list[str]], vocabulary: Vocabulary, budget: _Budget
) -> Iterator[dict[str, Any]]:
    """The exchanges of one ``<START>`` block: each ``{{user}}: ...`` line answered by the ``{{char}}: ...`` lines.

    Linear in the block's length; stops at the first turn ``budget`` has no room for.
    """
    chars, users = speakers
    names = sorted({*chars, *users}, key=len, reverse=True)
    line_start = re.compile(rf"^({'|'.join(re.escape(n) for n in names)})\s*:\s?(.*)$", re.IGNORECASE)
    lowered = {n.lower() for n in users} - {n.lower() for n in chars}
    turns: list[tuple[bool, list[str]]] = []  # (the player's?, lines)
    for line in block.split("\n"):
        m = line_start.match(line)
        if m:
            turns.append((m.group(1).lower() in lowered, [m.group(2)]))
        elif turns:
            turns[-1][1].append(line)  # (joined once: a line added to a string each time is quadratic)
    pending: UserTurn | None = None
    replies: list[Chat] = []

    def flush() -> Iterator[dict[str, Any]]:
        if replies:
            chats = [c.model_copy(update={"order": i + 1}) for i, c in enumerate(replies)]
            yield {"user": (pending or UserTurn()).model_dump(), "reply": Reply(chats=chats).model_dump()}
        replies.clear()

    for player, lines in turns:
        text = "\n".join(lines)
        if not budget.take(text):
            break
        if player:
            yield from flush()
            pending = parse_shorthand(text.strip() or "...", vocabulary=vocabulary)
            pending = pending.model_copy(update={"diagnostics": []})
        else:
            reply = _reply(text, vocabulary)
            replies.extend(reply.chats if reply is not None else [])
    yield from flush()


_EMOTION: Final = DEFAULT_TAGS.emotion.name


def _reply(text: str, vocabulary: Vocabulary) -> Reply | None:
    """Role-play text (``*waves* Welcome!``) read leniently, in canonical form; emotions off the vocabulary dropped.

    A card's text is whole, not a model's stream cut short: markup left open at its end (``Hi [there``, a
    terminal's ``\x1b[31m``), which the reader drops as cut off (``CF720``), is kept as its words (what text
    never holds, U+FFFD)."""
    whole = text.strip()
    read = parse(whole, lenient=True, vocabulary=vocabulary)
    reply = canonical_form(read)
    chats: list[Chat] = []
    for chat in reply.chats:
        segments = [s for s in chat.segments if s.tag != _EMOTION or vocabulary.resolve(s.text) is not None]
        if segments:
            chats.append(Chat(type=chat.type, order=len(chats) + 1, segments=segments))
    cut = next((d for d in read.diagnostics if d.code == "CF720"), None)
    tail = NOT_TEXT_CHAR.sub("\ufffd", whole[cut.offset :]).strip() if cut is not None else ""  # (as the reader does)
    if tail:
        chats = _with_words(chats, tail, gap=cut is not None and whole[cut.offset - 1 : cut.offset].isspace())
    return Reply(chats=chats) if chats else None


def _with_words(chats: list[Chat], words: str, *, gap: bool) -> list[Chat]:
    """``chats`` with ``words`` said at their end: the last chat's speech goes on, else a new one says them."""

    speech = DEFAULT_TAGS.speech.name
    last = chats[-1] if chats else None
    if last is not None and last.type == "C" and last.segments and last.segments[-1].tag == speech:
        said = last.segments[-1]
        joined = said.model_copy(update={"text": said.text + (" " if gap else "") + words})
        return [*chats[:-1], last.model_copy(update={"segments": [*last.segments[:-1], joined]})]
    return [*chats, Chat(type="C", order=len(chats) + 1, segments=[Segment(tag=speech, text=words)])]


# --- raw JSON members: extensions kept byte for byte ----------------------------------------------


def _members(text: str, start: int) -> Iterator[tuple[str, int, int, int]]:
    """The members of the JSON object at ``text[start]``: (key, key start, value start, value end)."""
    decoder = json.JSONDecoder()
    ws = re.compile(r"[ \t\n\r]*")
    i = ws.match(text, start + 1).end()  # type: ignore[union-attr]
    if text[i : i + 1] == "}":
        return
    while True:
        key, after = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
        j = ws.match(text, after).end()  # type: ignore[union-attr]
        j = ws.match(text, j + 1).end()  # type: ignore[union-attr]  # past ':'
        _value, end = decoder.raw_decode(text, j)
        yield key, i, j, end
        i = ws.match(text, end).end()  # type: ignore[union-attr]
        if text[i] == "}":
            return
        i = ws.match(text, i + 1).end()  # type: ignore[union-attr]  # past ','


def _raw_member(text: str, path: tuple[str, ...]) -> str | None:
    """The raw text of the value at ``path`` in a JSON document (the last of a repeated key), or ``None``."""
    start = len(text) - len(text.lstrip())
    for key in path:
        if text[start : start + 1] != "{":
            return None
        found = None
        for name, _k, value, end in _members(text, start):
            if name == key:
                found = (value, end)
        if found is None:
            return None
        start = found[0]
        last_end = found[1]
    return text[start:last_end]


def _without_member(obj: str, key: str) -> str:
    """The raw JSON object ``obj`` without its member ``key`` (what surrounds it kept as written)."""
    members = list(_members(obj, 0))
    for n, (name, k, _value, end) in enumerate(members):
        if name == key:
            if n > 0:  # from the comma after the previous member
                return obj[: members[n - 1][3]] + obj[end:]
            if len(members) > 1:  # up to the next member
                return obj[:k] + obj[members[1][1] :]
            return obj[:k] + obj[end:]
    return obj


def _with_member(obj: str, key: str, value: str) -> str:
    """The raw JSON object ``obj`` with the member ``"key": value`` added at its end."""
    obj = _without_member(obj, key)
    member = f"{json.dumps(key)}: {value}"
    members = list(_members(obj, 0))
    if members:  # right after the last value: _without_member takes exactly this away again
        last = members[-1][3]
        return obj[:last] + ", " + member + obj[last:]
    close = obj.rstrip().rfind("}")
    return obj[:close] + member + obj[close:]


# --- writing -------------------------------------------------------------------------------------


def _roleplay_text(reply: Any) -> str:
    """A reply as role-play text: ``*action* message`` per chat, a line each."""
    lines = []
    for chat in reply.chats:
        words = []
        for seg in chat.segments:
            if seg.tag == "act":
                words.append(f"*{seg.text}*")
            elif seg.tag in ("msg", "text"):
                words.append(seg.text)
        if words:
            lines.append(" ".join(words))
    return "\n".join(lines)


def _generated(character: Character) -> dict[str, Any]:
    """The card fields a character without a card of its own is written with."""
    examples = list(character.examples)
    first = ""
    if examples and not examples[0].user.chats:
        first = _roleplay_text(examples.pop(0).reply)
    blocks = []
    for ex in examples:
        said = " ".join(s.text for chat in ex.user.chats for s in chat.segments if s.tag == "msg")
        lines = ["<START>"]
        if ex.user.chats:
            lines.append(f"{{{{user}}}}: {said}")
        lines.append(f"{{{{char}}}}: {_roleplay_text(ex.reply)}")
        blocks.append("\n".join(lines))
    fields: dict[str, Any] = {
        key: (list(default) if isinstance(default, list) else default) for key, default in _V3_DATA_FIELDS
    }
    fields.update(name=character.name, description=character.persona, first_mes=first, mes_example="\n".join(blocks))
    assets = [{"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png"}]
    for e in character.emotions:
        if e.sprite:
            ext = e.sprite.rsplit(".", 1)[-1].lower() if "." in e.sprite.rsplit("/", 1)[-1] else "png"
            assets.append({"type": "emotion", "uri": e.sprite, "name": e.key, "ext": ext})
    fields["assets"] = assets
    return fields


def card_json(character: Character, *, spec: Literal["chara_card_v3", "chara_card_v2"] = "chara_card_v3") -> str:
    """``character`` as a card's JSON text (V3 by default); reading it back gives the same character."""
    card = character.card
    fields = dict(card.data) if card is not None else _generated(character)
    if card is not None:  # the character changed since the card was read: write what it is now
        derived, _notes = _from_fields(fields, character.user_name, emotions=character.model_dump()["emotions"])
        if derived["persona"] != character.persona:
            fields.update(description=character.persona, personality="", scenario="")
        if derived["name"] != character.name:
            fields["name"] = character.name
    digests = {key: _digest(fields.get(key, default)) for key, default in _V3_DATA_FIELDS if key in _DIGESTED}
    if spec == "chara_card_v2":
        fields = {k: v for k, v in fields.items() if k not in _V3_ONLY}
    own: dict[str, Any] = {
        "version": CHARFMT_VERSION,
        "character": character.model_dump(mode="json", exclude={"card"}),
        "fields": digests,
    }
    if card is not None and card.diagnostics:  # what reading the card first said (a default vocabulary)
        own["diagnostics"] = [d.model_dump(mode="json") for d in card.diagnostics]
    extensions = _with_member(
        card.extensions if card is not None else "{}", "charfmt", json.dumps(own, ensure_ascii=False)
    )
    marker = "\u0000charfmt-extensions\u0000"
    document = {
        "spec": spec,
        "spec_version": "3.0" if spec == "chara_card_v3" else "2.0",
        "data": {**fields, "extensions": marker},
    }
    text = json.dumps(document, ensure_ascii=False, allow_nan=False)
    return text.replace(json.dumps(marker), extensions, 1)


def export_card(character: Character, fmt: Literal["json", "png"] = "json", *, image: bytes | None = None) -> bytes:
    """``character`` as a V3 card file: JSON, or a PNG (``image`` or a blank one) with ``ccv3`` and ``chara``."""
    if fmt not in ("json", "png"):
        raise ValueError(f'export_card: fmt is "json" or "png", not {fmt!r}')
    if fmt == "json":
        return card_json(character).encode("utf-8")
    v3 = base64.b64encode(card_json(character).encode("utf-8")).decode("ascii")
    v2 = base64.b64encode(card_json(character, spec="chara_card_v2").encode("utf-8")).decode("ascii")
    try:
        return with_text_chunks(image if image is not None else blank_png(), {"chara": v2, "ccv3": v3})
    except PngError as e:
        raise CardError(f"image: {e}") from None


def is_generated(character: Character, info: CardInfo) -> bool:
    """Whether a card's fields are exactly what ``export_card`` writes for ``character`` (nothing foreign kept)."""
    return info.extensions.strip() == "{}" and not info.diagnostics and info.data == _generated(character)
