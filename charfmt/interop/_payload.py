"""charfmt's payload in another format's message: its key, versions, checks and compact diagnostics.

An exporter puts the exchange under ``{"charfmt": {"v": 2, "id": ..., "x": ..., "shown": ...}}``
in the format's extension point of the exchange's first message; the other messages of the
exchange carry ``{"charfmt": {"v": 2, "of": <id>, "m": <index>}}``.

The payload is compact: the exchange without its default values, a segment whose text is
exactly what a message shows stored as ``{"m": k}`` (a reference to message ``k``), a foreign
message that is the document's own message stored as ``{"same": k}``. ``shown`` says, per
message, which chat it shows and a digest of the text it showed; an importer that finds a
message's text changed takes the visible edit (a plain chat, ``CF907``) and one that finds a
message gone drops its chat (``CF908``): a payload never silently wins over what a reader of
the format sees. Version 1 payloads (the whole exchange under ``"exchange"``) still read.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from charfmt._strict.envelope import Path
from charfmt.diagnostics import CODES
from charfmt.interop._document import Source, where
from charfmt.models import validation_message

if TYPE_CHECKING:
    from charfmt.prompt.character import Exchange

PAYLOAD_KEY: Final = "charfmt"
"""The key charfmt's data sits under in every format's extension point."""
PAYLOAD_VERSION: Final = 2
"""The payload version written; an importer reads 1 and 2 and refuses any other (CF902)."""
READS: Final = (1, 2)


def digest(text: str | None) -> str:
    """A short digest of the text a message shows (what ``shown`` records)."""
    return hashlib.blake2b((text or "").encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()


def marker(source: Source, ext: Any, path: Path) -> dict[str, Any] | None:
    """charfmt's entry in an extension object, checked: ``None`` if the message is foreign."""
    if not isinstance(ext, dict) or PAYLOAD_KEY not in ext:
        return None
    entry = ext[PAYLOAD_KEY]
    at = (*path, PAYLOAD_KEY)
    if not isinstance(entry, dict) or entry.get("v") not in READS:
        version = entry.get("v") if isinstance(entry, dict) else None
        raise source.fail(
            "CF902",
            f"{where(at)}: charfmt payload version {version!r}; this charfmt reads {' and '.join(map(str, READS))}",
            at,
        )
    if entry["v"] == 1:
        if "exchange" not in entry and entry.get("continued") is not True:
            raise source.fail("CF902", f"{where(at)}: charfmt payload holds neither an exchange nor a continuation", at)
    elif not (
        (isinstance(entry.get("x"), dict) and isinstance(entry.get("shown"), list) and isinstance(entry.get("id"), str))
        or (isinstance(entry.get("of"), str) and isinstance(entry.get("m"), int))
    ):
        raise source.fail("CF902", f"{where(at)}: charfmt payload holds neither an exchange nor a continuation", at)
    return entry


def exchange_of(source: Source, value: Any, at: Path) -> Exchange:
    """The exchange in a payload; CF902 naming the field if it does not validate."""
    from charfmt.prompt.character import Exchange  # noqa: PLC0415 (character loads prompts machinery)

    try:
        return Exchange.model_validate(value)
    except ValidationError as e:
        raise source.fail(
            "CF902", f"{where(at)}: charfmt payload is not an exchange: {validation_message(e)}", at
        ) from None


_DIAGNOSTIC_FIELDS: Final = ("code", "message", "line", "column", "offset", "end")


def short_diagnostic(d: dict[str, Any]) -> list[Any]:
    """A diagnostic as ``[code, message, line, column, offset, end]`` (+ an object of the rest)."""
    out: list[Any] = [d.get(k) for k in _DIAGNOSTIC_FIELDS]
    rest = {k: v for k, v in d.items() if k not in _DIAGNOSTIC_FIELDS}
    if rest.get("severity", "error") == CODES.get(str(d.get("code")), ("error",))[0]:
        rest.pop("severity", None)
    else:
        rest.setdefault("severity", "error")
    return [*out, rest] if rest else out


def long_diagnostic(d: Any) -> Any:
    """What ``short_diagnostic`` wrote, as a diagnostic's fields again (anything else as it is, for validation)."""
    if not isinstance(d, list) or len(d) not in (6, 7) or (len(d) == 7 and not isinstance(d[6], dict)):
        return d
    out = dict(zip(_DIAGNOSTIC_FIELDS, d, strict=False))
    out["severity"] = CODES.get(str(out["code"]), ("error",))[0]
    if len(d) == 7:
        out.update(d[6])
    return out
