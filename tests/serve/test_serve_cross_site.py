"""A GET that runs a turn (``/v1/turn?say=…``, EventSource's door) is refused when another site's page sends it.

Found by a new user's trial: an ``<img src>`` or an ``EventSource`` on any page could run (and store, and pay
for) a turn on a default server, whatever its ``Origin`` and ``Sec-Fetch-Site`` said. Each case of
``cases`` below is the request's headers and whether the turn runs.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from charfmt import Character  # noqa: E402
from charfmt.serve import Settings, create_app  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback  # noqa: E402

REX = ROOT / "examples" / "characters" / "rex.toml"
T = 10.0
GAME = "http://game.example"
CASES: list[tuple[str, dict[str, str], bool]] = [
    ("img from another site", {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, False),
    ("img from a sibling port", {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors"}, False),
    ("EventSource of another site", {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, False),
    ("an Origin alone", {"Origin": "https://evil.example"}, False),
    ("an old browser's img", {"Referer": "https://evil.example/page.html"}, False),
    ("the --cors front end", {"Origin": GAME, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}, True),
    ("the server's own page", {"Sec-Fetch-Site": "same-origin", "Referer": "{base}/"}, True),
    ("the server's own page, Origin sent", {"Origin": "{base}", "Sec-Fetch-Site": "same-origin"}, True),
    ("a typed address", {"Sec-Fetch-Site": "none"}, True),
    ("a script or curl", {}, True),
]


@pytest.fixture(scope="module")
def upstream() -> Iterator[Scripted]:
    yield Scripted()


@pytest.fixture(scope="module")
def base(upstream: Scripted) -> Iterator[str]:
    with loopback(upstream.app) as up:
        app = create_app(Settings(character=Character.load(REX), upstream_url=up + "/v1", cors=(GAME,)))
        with loopback(app) as served:
            yield served


@pytest.mark.parametrize(("headers", "runs"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_turn_by_get_runs_only_for_the_players_own_pages(
    headers: dict[str, str], runs: bool, base: str, upstream: Scripted
) -> None:
    """A foreign page's GET: 403 naming why, no upstream request, no session; the allowed ones: the turn's events."""
    sent = {k: v.format(base=base) for k, v in headers.items()}
    before = len(upstream.requests)
    session = f"victim-{abs(hash(tuple(sent.items())))}"
    r = httpx.get(base + "/v1/turn", params={"session": session, "say": "hi"}, headers=sent, timeout=T)
    if runs:
        assert r.status_code == 200, r.text
        assert '"kind":"reply"' in r.text.replace(" ", "")
        assert len(upstream.requests) == before + 1
        assert httpx.get(base + f"/v1/sessions/turn/{session}", timeout=T).status_code == 200
        return
    assert r.status_code == 403, r.text
    error: dict[str, Any] = r.json()["error"]
    assert "another site" in error["message"] and "--cors" in error["message"]
    assert len(upstream.requests) == before
    stored = httpx.get(base + f"/v1/sessions/turn/{session}", timeout=T)
    assert stored.status_code == 404, stored.text


def test_a_post_and_the_session_reads_are_untouched(base: str) -> None:
    """Only the GET that runs a turn is checked: a JSON POST from the --cors front end still runs."""
    r = httpx.post(base + "/v1/turn", json={"say": "hi"}, headers={"Origin": GAME}, timeout=T)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == GAME
