"""Every interop reader on documents with a value's type changed: exchanges or ``InteropError``, never a crash.

Each value path of each sample document (and of a document charfmt exported, payload
included) is replaced by each of ``null, 0, -1, 1e308, "", [], {}, true``; ``interop.read``
returns exchanges or raises ``InteropError``, and ``charfmt convert`` exits 0 or 1 with one
error line.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS

from charfmt import interop
from charfmt.cli import main
from charfmt.interop import InteropError
from charfmt.prompt.character import Character

HERE = TESTS / "interop"
REX = HERE.parent.parent / "examples" / "characters" / "rex.toml"
REPLACEMENTS: list[Any] = [None, 0, -1, 1e308, "", [], {}, True]

Path_ = tuple[str | int, ...]


def paths(value: Any, at: Path_ = ()) -> Iterator[Path_]:
    """Every path to a value inside ``value`` (containers included), the root left out."""
    if at:
        yield at
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*at, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from paths(item, (*at, i))


def replaced(doc: Any, at: Path_, new: Any) -> Any:
    out = copy.deepcopy(doc)
    node = out
    for step in at[:-1]:
        node = node[step]
    node[at[-1]] = copy.deepcopy(new)
    return out


def _documents(fmt: str) -> dict[str, Any]:
    sample = json.loads((HERE / "samples" / f"{fmt}.json").read_text(encoding="utf-8"))
    rex = Character.load(REX)
    history = interop.read(fmt, sample)
    exported = interop.export(fmt, history, rex, created_at="2025-01-01T00:00:00Z")
    return {"sample": sample, "exported": exported}


def _crashes(fmt: str, docs: dict[str, Any], as_text: bool) -> tuple[int, list[str]]:
    failures: list[str] = []
    tried = 0
    for name, doc in docs.items():
        for at in list(paths(doc)):
            for new in REPLACEMENTS:
                variant = replaced(doc, at, new)
                tried += 1
                for data in (variant, json.dumps(variant)) if as_text else (variant,):
                    try:
                        exchanges = interop.read(fmt, data)
                    except InteropError:
                        continue
                    except Exception as e:  # what this test looks for
                        failures.append(f"{name} {list(at)} = {new!r}: {type(e).__name__}: {e}"[:300])
                        break
                    assert isinstance(exchanges, list)
    return tried, failures


@pytest.mark.parametrize("fmt", list(interop.FORMATS))
def test_every_value_of_every_type_gives_exchanges_or_an_interop_error(fmt: str) -> None:
    tried, failures = _crashes(fmt, {"sample": _documents(fmt)["sample"]}, as_text=False)
    assert tried > 100
    assert not failures, f"{len(failures)} of {tried} variants crashed:\n" + "\n".join(failures[:30])


@pytest.mark.long
@pytest.mark.parametrize("fmt", list(interop.FORMATS))
def test_every_value_of_an_exported_document_too_as_text_and_decoded(fmt: str) -> None:
    tried, failures = _crashes(fmt, _documents(fmt), as_text=True)
    assert not failures, f"{len(failures)} of {tried} variants crashed:\n" + "\n".join(failures[:30])
    print(f"{fmt}: {tried} variants, each read decoded and as text: none crashed")


@pytest.mark.parametrize("value", [-1, 1e308, True, "x", None])
def test_convert_on_a_user_of_another_type_is_a_positioned_error(value: Any, tmp_path: Path, capsys: Any) -> None:
    doc = json.loads((HERE / "samples" / "groupchat.json").read_text(encoding="utf-8"))
    doc["conversation_meta"]["user_details"]["user_102"] = value
    path = tmp_path / "in.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    status = main(["convert", "--from", "groupchat", "--to", "pam", str(path), str(tmp_path / "out.json")])
    err = capsys.readouterr().err
    assert status == 1 and "Traceback" not in err
    assert err.startswith(f"{path}:1:") and " CF901 conversation_meta.user_details.user_102: " in err
    assert "a user object" in err.splitlines()[0]
    assert not (tmp_path / "out.json").exists()
