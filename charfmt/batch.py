"""Parse many replies at once, Arrow in and Arrow out: one row per reply (extra ``charfmt[arrow]``).

The same function serves every engine that passes Arrow batches: Ray Data
``map_batches(..., batch_format="pyarrow")``, DuckDB and Polars user functions, Spark
``mapInArrow`` (recipes in docs/REPORTS.md). Each reply is read with
``charfmt.parse(text, lenient=True)``; its row says what strict parsing would have
thought of it (``valid``), what lenient parsing made of it (``chats``, ``dialect``, the
codes), the canonical form to store or train on, and whether to keep it for fine-tuning.

>>> import pyarrow as pa
>>> from charfmt.batch import parse_table
>>> rows = parse_table(pa.table({"text": ['{"chats":[{"type":"E","order":1,"body":"Rain."}]}', "hi"]}))
>>> rows.column("valid").to_pylist(), rows.column("dialect").to_pylist()
([True, False], [None, 'plain-text'])
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from importlib import import_module
from typing import Any, Final

from charfmt.diagnostics import CharfmtError, Diagnostic
from charfmt.models import Reply, Vocabulary
from charfmt.parser import parse
from charfmt.tags import DEFAULT_TAGS, TAGGED_TYPES, TagTable
from charfmt.writer import canonical_form, dumps

ArrowTable = Any
"""A ``pyarrow.Table`` (pyarrow ships no type information, so annotations say ``Any``)."""
ArrowArray = Any
"""A ``pyarrow.Array``, ``ChunkedArray`` or ``StructArray``."""

LOSES_TEXT: Final = frozenset(
    {
        "CF001",  # bytes that are not UTF-8 became U+FFFD
        "CF610",  # the reply was cut off
        "CF615",  # an unknown key or a chat that could not be read was dropped
        "CF618",  # an escape cut off at the end was dropped
        "CF620",  # a value that cannot be read as text was dropped
        "CF714",  # control characters replaced by U+FFFD
        "CF716",  # an entity cut off at the end was dropped
    }
)
"""Repairs after which the reply no longer holds everything the model wrote: such a reply is not kept.

Dropping what surrounds the reply (prose, a code fence, reasoning, special tokens,
comments) loses none of the character's text, so those repairs do not count here.
"""

RESULT_COLUMNS: Final = (
    "valid",
    "repaired",
    "empty",
    "keep",
    "dialect",
    "error_codes",
    "warning_codes",
    "chats",
    "canonical",
    "reasoning",
    "diagnostics",
    "size",
)
"""The columns :func:`parse_table` adds, in order (see :func:`result_schema`)."""


def require_pyarrow() -> Any:
    """``pyarrow``, imported on first use; a clear error when the extra is missing."""
    try:
        # By name: an optional dependency without type information, loaded only here.
        return import_module("pyarrow")
    except ImportError:
        raise CharfmtError("charfmt.batch needs pyarrow: pip install 'charfmt[arrow]'") from None


@cache
def result_schema() -> Any:
    """The schema of the rows: one field per name of :data:`RESULT_COLUMNS`.

    - ``valid``: strict parsing accepts the reply as it is (``{"chats": []}``, the
      character staying silent, included);
    - ``repaired``: not valid, but lenient parsing recovered at least one chat;
    - ``empty``: not valid, and lenient parsing recovered no chat: nothing to use.
      Exactly one of ``valid``, ``repaired`` and ``empty`` holds for each reply;
    - ``keep``: fit for fine-tuning data: valid, or repaired with no error, nothing of
      the model's text lost (:data:`LOSES_TEXT`) and no segment the canonical form leaves out;
    - ``dialect``: the format the model wrote (``Reply.dialect``), null when it was valid;
    - ``error_codes``, ``warning_codes``: codes of the diagnostics, in input order
      (``warning_codes`` holds warnings and infos: every repair and note);
    - ``chats``: ``Reply.chats`` as structs (type, order, segments of tag, text, intensity;
      speaker, null outside a scene);
    - ``canonical``: ``dumps(canonical_form(reply))``, what a prompt shows and what to
      train on; null when the reply is ``empty``;
    - ``reasoning``: ``Reply.reasoning``; ``diagnostics``: ``Reply.diagnostics`` as structs;
    - ``size``: the reply's length in UTF-8 bytes.
    """
    pa = require_pyarrow()
    segment = pa.struct([("tag", pa.string()), ("text", pa.string()), ("intensity", pa.float64())])
    chat = pa.struct(
        [("type", pa.string()), ("order", pa.int64()), ("segments", pa.list_(segment)), ("speaker", pa.string())]
    )
    diagnostic = pa.struct(
        [
            ("code", pa.string()),
            ("severity", pa.string()),
            ("message", pa.string()),
            ("line", pa.int64()),
            ("column", pa.int64()),
            ("offset", pa.int64()),
            ("end", pa.int64()),
            ("chat", pa.int64()),
        ]
    )
    return pa.schema(
        [
            ("valid", pa.bool_()),
            ("repaired", pa.bool_()),
            ("empty", pa.bool_()),
            ("keep", pa.bool_()),
            ("dialect", pa.string()),
            ("error_codes", pa.list_(pa.string())),
            ("warning_codes", pa.list_(pa.string())),
            ("chats", pa.list_(chat)),
            ("canonical", pa.string()),
            ("reasoning", pa.string()),
            ("diagnostics", pa.list_(diagnostic)),
            ("size", pa.int64()),
        ]
    )


def sql_type() -> str:
    """The result struct as a SQL type, for a DuckDB user function: ``STRUCT("valid" BOOLEAN, ...)``."""
    pa = require_pyarrow()

    def spell(kind: Any) -> str:
        if pa.types.is_struct(kind):
            return "STRUCT(" + ", ".join(f'"{f.name}" {spell(f.type)}' for f in kind) + ")"
        if pa.types.is_list(kind):
            return spell(kind.value_type) + "[]"
        return {"bool": "BOOLEAN", "string": "VARCHAR", "int64": "BIGINT", "double": "DOUBLE"}[str(kind)]

    return spell(pa.struct(list(result_schema())))


INT64: Final = range(-(2**63), 2**63)
"""The orders an Arrow ``int64`` column holds; a chat's order outside it is null there (CF960)."""


def _table_orders(reply: Reply, source: str) -> tuple[list[int | None], list[Diagnostic]]:
    """Each chat's order as the table holds it, and a CF960 warning for each that does not fit ``int64``.

    The reply itself keeps the order exactly (``canonical`` holds its digits); only the
    ``chats.order`` column, a 64-bit integer, cannot, and is null there.
    """
    orders: list[int | None] = []
    found: list[Diagnostic] = []
    for i, chat in enumerate(reply.chats):
        if chat.order in INT64:
            orders.append(chat.order)
            continue
        orders.append(None)
        try:
            digits = str(chat.order)
        except ValueError:  # more digits than Python converts
            digits = ""
        offset = source.find(digits) if digits else -1
        shown = digits if len(digits) <= 24 else f"{digits[:10]}...({len(digits):,} digits)"
        found.append(
            Diagnostic.at(
                source,
                "CF960",
                f"chat {i}: order {shown or 'of more than 4,300 digits'} does not fit a 64-bit integer:"
                " null in the table's order column",
                max(offset, 0),
                max(offset, 0) + len(digits) if offset >= 0 else None,
                chat=i,
            )
        )
    return orders, found


def row(reply: Reply, size: int, source: str | bytes = "", tags: TagTable | None = None) -> dict[str, Any]:
    """The row of one parsed reply (``size``: its length in UTF-8 bytes), as plain Python values.

    ``source``: the raw reply, for the position of a diagnostic the table adds (CF960);
    ``tags``: the table it was read with.
    """
    table = DEFAULT_TAGS if tags is None else tags
    if isinstance(source, bytes):
        source = source.decode("utf-8", "replace")
    orders, table_notes = _table_orders(reply, source)
    if table_notes:
        reply = reply.model_copy(update={"diagnostics": [*reply.diagnostics, *table_notes]})
    errors = [d.code for d in reply.diagnostics if d.severity == "error"]
    warnings = [d.code for d in reply.diagnostics if d.severity != "error"]
    valid = reply.dialect is None and not errors
    empty = not valid and not reply.chats  # valid, repaired and empty split the replies
    left_out = any(seg.tag not in table for chat in reply.chats if chat.type in TAGGED_TYPES for seg in chat.segments)
    keep = valid or (not empty and not errors and not left_out and LOSES_TEXT.isdisjoint(warnings))
    return {
        "valid": valid,
        "repaired": not valid and not empty,
        "empty": empty,
        "keep": keep,
        "dialect": reply.dialect,
        "error_codes": errors,
        "warning_codes": warnings,
        "chats": [
            {
                "type": c.type,
                "order": order,
                "segments": [{"tag": s.tag, "text": s.text, "intensity": s.intensity} for s in c.segments],
                "speaker": c.speaker,
            }
            for c, order in zip(reply.chats, orders, strict=True)
        ],
        "canonical": None if empty else dumps(canonical_form(reply, table)),
        "reasoning": reply.reasoning,
        "diagnostics": [
            {
                "code": d.code,
                "severity": d.severity,
                "message": d.message,
                "line": d.line,
                "column": d.column,
                "offset": d.offset,
                "end": d.end,
                "chat": d.chat,
            }
            for d in reply.diagnostics
        ],
        "size": size,
    }


def rows(
    texts: Iterable[str | bytes | None], vocabulary: Vocabulary | None = None, tags: TagTable | None = None
) -> list[dict[str, Any] | None]:
    """:func:`row` of ``parse(text, lenient=True, vocabulary=..., tags=...)`` for each text; ``None`` for a missing one.

    ``tags``: a character's tag table (``Character.tags``), so its own tags (``<sfx>``) are
    read, counted valid and kept; ``vocabulary``: its emotions (``Character.vocabulary``).
    """
    out: list[dict[str, Any] | None] = []
    for text in texts:
        if text is None:
            out.append(None)
            continue
        size = len(text.encode("utf-8", "surrogatepass")) if isinstance(text, str) else len(text)
        out.append(row(parse(text, lenient=True, vocabulary=vocabulary, tags=tags), size, text, tags))
    return out


_ARROW_TEXT_TYPES: Final = ("string", "large_string", "string_view", "binary", "large_binary", "binary_view", "null")


def _arrow_texts(values: Any) -> list[str | bytes | None]:
    """The Python values of an Arrow array or chunked array of strings or bytes (or a plain sequence)."""
    pa = require_pyarrow()
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        if pa.types.is_dictionary(values.type) and str(values.type.value_type) in _ARROW_TEXT_TYPES:
            values = values.cast(values.type.value_type)  # dictionary-encoded (categorical) strings
        if str(values.type) not in _ARROW_TEXT_TYPES:
            raise CharfmtError(f"replies must be strings or bytes, not Arrow {values.type}")
        return list(values.to_pylist())
    texts = list(values)
    for value in texts:
        if value is not None and not isinstance(value, (str, bytes)):
            raise CharfmtError(f"replies must be strings or bytes, not {type(value).__name__}")
    return texts


def columns(found: Sequence[dict[str, Any] | None], names: Sequence[str] = RESULT_COLUMNS) -> list[ArrowArray]:
    """One Arrow array per result column in ``names``; a ``None`` row is null in every column."""
    schema = result_schema()
    return [array([None if r is None else r[name] for r in found], schema.field(name).type) for name in names]


def array(values: list[Any], kind: Any) -> ArrowArray:
    """``pyarrow.array(values, type=kind)``; lone surrogates (JSON allows ``"\\ud800"``) become U+FFFD.

    Arrow strings are UTF-8, which cannot hold a lone surrogate; a reply holding one is
    parsed as it is (lenient parsing replaces it and says so, CF714), and only the copy
    in the table is made writable.
    """
    pa = require_pyarrow()
    try:
        return pa.array(values, type=kind)
    except (UnicodeEncodeError, pa.ArrowException):
        return pa.array(_surrogates_replaced(values), type=kind)


def _surrogates_replaced(value: Any) -> Any:
    """``value`` with every lone surrogate in every string replaced by U+FFFD (lists and dicts walked)."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_surrogates_replaced(v) for v in value]
    if isinstance(value, dict):
        return {k: _surrogates_replaced(v) for k, v in value.items()}
    return value


def parse_array(texts: Any, *, vocabulary: Vocabulary | None = None, tags: TagTable | None = None) -> ArrowArray:
    """One struct per reply (fields of :func:`result_schema`); null where the text is null.

    ``texts``: an Arrow array or chunked array of strings or bytes, or a sequence of
    ``str``/``bytes``/``None``. The shape DuckDB and Polars user functions return.
    """
    pa = require_pyarrow()
    found = rows(_arrow_texts(texts), vocabulary, tags)
    mask = pa.array([r is None for r in found], type=pa.bool_())
    return pa.StructArray.from_arrays(columns(found), fields=list(result_schema()), mask=mask)


def parse_table(
    table: Any, *, field: str = "text", vocabulary: Vocabulary | None = None, tags: TagTable | None = None
) -> ArrowTable:
    """``table`` (Arrow table or record batch) with the result columns added after its own.

    The replies are read from column ``field``; every other column (an id, the model, the
    prompt version) is kept as it is. A null reply gives nulls in the result columns. The
    function Ray Data's ``map_batches(..., batch_format="pyarrow")`` takes.
    """
    pa = require_pyarrow()
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise CharfmtError(f"parse_table needs an Arrow table or record batch, not {type(table).__name__}")
    if field not in table.column_names:
        raise CharfmtError(f"no column {field!r} in the table (columns: {', '.join(table.column_names) or 'none'})")
    clash = [name for name in RESULT_COLUMNS if name in table.column_names]
    if clash:
        raise CharfmtError(f"the table already has column(s) {', '.join(clash)}, which parse_table adds")
    found = rows(_arrow_texts(table.column(field)), vocabulary, tags)
    for name, column in zip(RESULT_COLUMNS, columns(found), strict=True):
        table = table.append_column(result_schema().field(name), column)
    return table


def parse_batches(
    batches: Iterable[Any], *, field: str = "text", vocabulary: Vocabulary | None = None, tags: TagTable | None = None
) -> Iterator[Any]:
    """:func:`parse_table` of each record batch, as record batches: the function Spark's ``mapInArrow`` takes."""
    for batch in batches:
        yield from parse_table(batch, field=field, vocabulary=vocabulary, tags=tags).to_batches()
