"""charfmt.batch: Arrow rows per reply equal charfmt.parse(..., lenient=True), per record."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from conftest import ROOT, Case, load_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import charfmt
from charfmt.diagnostics import CODES
from charfmt.models import Chat, Segment
from charfmt.testing import damaged_replies, replies
from charfmt.writer import canonical_form, dumps

pa = pytest.importorskip("pyarrow", reason="charfmt.batch needs pyarrow (extra charfmt[arrow])")

from charfmt.batch import (  # noqa: E402 (after the skip: the module needs pyarrow)
    LOSES_TEXT,
    RESULT_COLUMNS,
    parse_array,
    parse_batches,
    parse_table,
    result_schema,
)

CASES = load_cases("batch_rows.txt")


def _strict_ok(text: str | bytes) -> bool:
    try:
        charfmt.parse(text)
    except charfmt.ParseError:
        return False
    return True


def _chats(value: list[dict[str, Any]]) -> list[Chat]:
    """The row's chats back as validated models."""
    return [Chat(type=c["type"], order=c["order"], segments=[Segment(**s) for s in c["segments"]]) for c in value]


def _check_row(text: str | bytes, row: dict[str, Any]) -> None:
    """One row against an independent reading of the same reply."""
    reply = charfmt.parse(text, lenient=True)
    assert _chats(row["chats"]) == reply.chats
    assert row["diagnostics"] == [d.model_dump() for d in reply.diagnostics]
    assert row["error_codes"] == [d.code for d in reply.diagnostics if d.severity == "error"]
    assert row["warning_codes"] == [d.code for d in reply.diagnostics if d.severity != "error"]
    assert row["dialect"] == reply.dialect
    assert row["reasoning"] == reply.reasoning
    assert row["valid"] is _strict_ok(text)  # the strict parser is the oracle, not the row's own rule
    assert row["empty"] is (not row["valid"] and not reply.chats)
    assert row["repaired"] is (not row["valid"] and bool(reply.chats))
    assert [row["valid"], row["repaired"], row["empty"]].count(True) == 1  # they split the replies
    assert row["keep"] or not row["valid"]  # every valid reply is kept (``{"chats": []}`` too)
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    assert row["size"] == len(raw)
    if not row["empty"]:
        assert row["canonical"] == dumps(canonical_form(reply))
    else:
        assert row["canonical"] is None
    if row["keep"]:
        # What is kept reads back strictly as every chat lenient parsing recovered (intensity aside).
        kept = charfmt.parse(row["canonical"]).chats
        bare = [c.model_copy(update={"segments": [s.model_copy(update={"intensity": None}) for s in c.segments]})
                for c in reply.chats]  # fmt: skip
        assert kept == bare
        assert not LOSES_TEXT.intersection(row["warning_codes"])
        assert not row["error_codes"]


_reply_texts = st.one_of(
    damaged_replies().map(lambda d: d.text),
    replies().map(dumps),
    st.text(max_size=60),
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(_reply_texts, min_size=1, max_size=6))
def test_rows_equal_lenient_parse_per_record(texts: list[str]) -> None:
    table = parse_table(pa.table({"id": list(range(len(texts))), "text": pa.array(texts, type=pa.string())}))
    assert table.column("id").to_pylist() == list(range(len(texts)))
    for text, row in zip(texts, table.to_pylist(), strict=True):
        _check_row(text, row)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Case) -> None:
    row = parse_table(pa.table({"text": [case.input]})).to_pylist()[0]
    _check_row(case.input, row)
    for line in case.expected:
        if line.startswith("! "):
            code = line[2:]
            assert code in row["error_codes"] + row["warning_codes"], (code, row["diagnostics"])
        else:
            name, _, value = line.partition(": ")
            assert str(row[name]).lower() == value.lower(), (name, row[name])


def test_schema_and_columns() -> None:
    table = parse_table(pa.table({"text": ["hi"]}))
    assert table.column_names == ["text", *RESULT_COLUMNS]
    assert table.schema.remove(0) == result_schema()


def test_loses_text_codes_are_registered() -> None:
    assert set(CODES) >= LOSES_TEXT


def test_bytes_and_invalid_utf8() -> None:
    raw = '{"chats": [{"type": "E", "order": 1, "body": "caf\u00e9 \xff"}]}'.encode("latin-1")
    table = parse_table(pa.table({"text": pa.array([raw], type=pa.binary())}))
    row = table.to_pylist()[0]
    _check_row(raw, row)
    assert "CF001" in row["warning_codes"] and row["keep"] is False


def test_null_reply_gives_null_results() -> None:
    table = parse_table(pa.table({"id": [1, 2], "text": pa.array(["hi", None], type=pa.string())}))
    second = table.to_pylist()[1]
    assert second["id"] == 2 and all(second[name] is None for name in RESULT_COLUMNS)
    structs = parse_array(pa.array(["hi", None]))
    assert structs.null_count == 1 and structs[1].as_py() is None
    assert structs[0].as_py()["dialect"] == "plain-text"


def test_lone_surrogate_is_replaced_in_the_table_only() -> None:
    text = json.loads('"{\\"chats\\": [{\\"type\\": \\"E\\", \\"order\\": 1, \\"body\\": \\"a\\ud800\\"}]}"')
    (row,) = parse_array([text]).to_pylist()
    _check_row(text, row)
    assert "CF714" in row["warning_codes"] and row["keep"] is False


def test_parse_array_accepts_chunked_arrays_and_sequences() -> None:
    texts = ["hi", '{"chats": []}']
    chunked = pa.chunked_array([texts[:1], texts[1:]])
    assert parse_array(chunked).to_pylist() == parse_array(texts).to_pylist()


def test_parse_batches_for_map_in_arrow() -> None:
    batches = pa.table({"text": ["hi", "there", "{}"]}).to_batches(max_chunksize=2)
    out = list(parse_batches(batches))
    assert [b.num_rows for b in out] == [2, 1]
    assert pa.Table.from_batches(out).equals(parse_table(pa.table({"text": ["hi", "there", "{}"]})))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (pa.table({"reply": ["x"]}), "no column 'text'"),
        (pa.table({"text": ["x"], "valid": [True]}), "already has column(s) valid"),
        (pa.table({"text": [1]}), "strings or bytes, not Arrow int64"),
    ],
)
def test_bad_tables_are_a_charfmt_error(table: Any, message: str) -> None:
    with pytest.raises(charfmt.CharfmtError, match=re.escape(message)):
        parse_table(table)


def test_sequence_of_other_values_is_a_charfmt_error() -> None:
    with pytest.raises(charfmt.CharfmtError, match="not int"):
        parse_array(["x", 3])


def test_vocabulary_is_applied() -> None:
    vocabulary = charfmt.Vocabulary(emotions=[{"key": "joy", "aliases": ["happy"]}])
    text = '{"chats": [{"type": "C", "order": 1, "body": "<emo>happy</emo>\\n<msg>Hi</msg>"}]}'
    (row,) = parse_array([text], vocabulary=vocabulary).to_pylist()
    assert row["chats"][0]["segments"][0]["text"] == "joy"
    assert "CF302" in row["warning_codes"]


def test_module_doctest() -> None:
    import doctest

    import charfmt.batch

    assert doctest.testmod(charfmt.batch).failed == 0


# -- docs/REPORTS.md's engine recipes run where their engine is installed --------------------------

REPORTS = (ROOT / "docs" / "REPORTS.md").read_text(encoding="utf-8")
RECIPES = dict(re.findall(r"```py\n# recipe: (\w+)\n(.*?)\n```", REPORTS, flags=re.DOTALL))


def test_readme_has_the_recipes() -> None:
    assert set(RECIPES) >= {"arrow", "ray", "duckdb", "polars", "spark"}


def run_recipe(engine: str) -> dict[str, Any]:
    """Run the arrow recipe (it defines ``log``), then ``engine``'s; the namespace after."""
    namespace: dict[str, Any] = {"charfmt": charfmt}
    for name in dict.fromkeys(("arrow", engine)):
        exec(compile(RECIPES[name], f"docs/REPORTS.md ({name} recipe)", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("engine", ["arrow", "duckdb", "polars"])
def test_readme_recipe(engine: str) -> None:
    modules = {"arrow": "pyarrow", "duckdb": "duckdb", "polars": "polars"}
    pytest.importorskip(modules[engine], reason=f"the {engine} recipe needs {modules[engine]}")
    rows = run_recipe(engine)["rows"]
    assert rows.column("id").to_pylist() == [1, 2]
    assert rows.column("valid").to_pylist() == [True, False]
    assert rows.column("dialect").to_pylist() == [None, "plain-text"]
