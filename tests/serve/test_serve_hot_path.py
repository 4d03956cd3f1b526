"""The shortcuts on serve's per-chunk path write and read exactly what the general forms do.

``Completion.text_chunk`` (an event written into a frame made once per answer) against
``Completion.chunk`` (the whole object encoded); the template views, built as templates read
them, against every field a template may read; the upstream's proxy, read once from the
environment; the missing extra named.
"""

from __future__ import annotations

import json
import re
import sys
from types import SimpleNamespace

import pytest
from conftest import ROOT
from hypothesis import given
from hypothesis import strategies as st

from charfmt import Character
from charfmt.diagnostics import CharfmtError

pytest.importorskip("starlette")

from charfmt.serve.completions import Completion
from charfmt.serve.settings import Settings
from charfmt.serve.state import ServerState
from charfmt.serve.upstreams.openai import env_proxy, require_aiohttp

EXAMPLES = ROOT / "examples"
REX = Character.load(EXAMPLES / "characters" / "rex.toml")


def _completion(model: str) -> Completion:
    state = ServerState(Settings(character=REX, upstream_url="http://127.0.0.1:9/v1", reply_format="tags"))
    engine = SimpleNamespace(scene=None, model=model, tags=REX.tags)
    return Completion(state, engine, None, REX.shorthand("hi"), {})  # type: ignore[arg-type]


@given(st.text(), st.text(max_size=12))
def test_a_text_chunk_is_the_chunk_object_encoded(text: str, model: str) -> None:
    call = _completion(model)
    fast = call.text_chunk(text)
    assert fast == call.chunk({"content": text})
    assert json.loads(fast.removeprefix(b"data: "))["choices"][0]["delta"] == {"content": text}


def test_a_view_reads_each_field_when_a_template_asks_and_no_other() -> None:
    from charfmt.prompt.render import template_view

    view = template_view(REX)
    assert view._fields == {}  # nothing viewed yet
    assert view.name == REX.name and list(view.actions) == REX.actions
    assert set(view._fields) == {"name", "actions"}
    assert view.vocabulary.keys == tuple(REX.vocabulary.keys)  # a property (``_EXTRA``), viewed too
    for name in (*type(REX).model_fields, "vocabulary"):
        assert getattr(view, name) is getattr(view, name)  # viewed once, then kept

    def shown(record: object) -> str:  # (a method's view shows its address)
        return re.sub(r" at 0x[0-9a-f]+", "", repr(record))

    assert shown(view) == shown(template_view(REX))  # every field, whichever were read first
    with pytest.raises(AttributeError):
        _ = view.model_dump  # a method of the model that no template is given
    with pytest.raises(AttributeError):
        view.name = "x"


@pytest.mark.parametrize(
    ("env", "url", "expected"),
    [
        ({}, "http://127.0.0.1:8080/v1", None),
        ({"HTTP_PROXY": "http://proxy:3128"}, "http://model.example/v1", "http://proxy:3128"),
        ({"HTTP_PROXY": "http://proxy:3128"}, "https://model.example/v1", None),
        ({"HTTPS_PROXY": "http://proxy:3128"}, "https://model.example/v1", "http://proxy:3128"),
        ({"ALL_PROXY": "http://all:1"}, "https://model.example/v1", "http://all:1"),
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "127.0.0.1,localhost"}, "http://127.0.0.1:8080/v1", None),
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": ".example"}, "http://model.example/v1", None),
    ],
)
def test_the_upstream_proxy_is_the_environment_s(
    env: dict[str, str], url: str, expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert env_proxy(url) == expected


def test_a_missing_aiohttp_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # import aiohttp raises ImportError
    with pytest.raises(CharfmtError, match=r"needs aiohttp .*pip install 'charfmt\[serve\]'"):
        require_aiohttp()
