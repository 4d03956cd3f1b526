"""The allowed hosts: a request (or a WebSocket handshake) is answered only for a ``Host`` that is this server's.

DNS rebinding: a page of another site points a name of its own (``rebind.evil.example``) at
127.0.0.1, then drives the server from the browser as if it were that site: same origin, so
neither CORS nor an ``Origin`` check sees anything wrong, but the ``Host`` header still holds
the attacker's name. The server answers only for loopback names (``localhost``, ``*.localhost``,
``127.x.x.x``, ``::1``), the address the request came in on (its IP, which a rebinding page
cannot name), and the names given with ``--allow-host`` (``charfmt serve`` adds the machine's
own names when it listens beyond loopback); any other is refused with 421 before any route,
token check or CORS answer.

Cross-site GETs: a ``GET /v1/turn?say=…`` runs a turn (it is ``EventSource``'s door), and a page of
another site can send one without any preflight (an ``<img src>``, a link, its own ``EventSource``).
:func:`cross_site_refusal` says why such a request is refused: an ``Origin`` that is neither this
server's nor one given with ``--cors``, a ``Sec-Fetch-Site`` of ``cross-site`` or ``same-site``
without such an ``Origin``, and (for a browser that sends neither) a ``Referer`` of another origin.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final

from charfmt.serve.framing import NO_HOST, TWO_HOSTS

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
"""Names that always mean this machine (with ``*.localhost``, which browsers resolve to loopback themselves)."""

_NAME: Final = re.compile(r"[a-z0-9._-]{1,253}")
"""What a host name may hold (an IPv6 address is in brackets, read apart)."""


def host_name(value: str) -> str | None:
    """The host of a ``Host`` header's value (``name``, ``name:port``, ``[v6]:port``), lowercased; None if malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        inside, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not re.fullmatch(r":\d{1,5}", rest)):
            return None
        try:
            return str(ipaddress.IPv6Address(inside))
        except ValueError:
            return None
    name, colon, port = value.partition(":")
    if colon and not re.fullmatch(r"\d{1,5}", port):
        return None
    name = name.rstrip(".")  # (``localhost.`` is ``localhost``)
    return name if _NAME.fullmatch(name) else None


def is_loopback(name: str) -> bool:
    """Whether the host ``name`` is this machine whatever the DNS says (a loopback name or address)."""
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


_FOREIGN_FETCH: Final = frozenset({"cross-site", "same-site"})
"""``Sec-Fetch-Site`` values that say a page of another origin sent the request (``same-origin`` and ``none``,
a typed address or a bookmark, are the player's own)."""


def _origin_of(url: str) -> str:
    """The origin (``scheme://host[:port]``) of a URL such as a ``Referer``, lowercased."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{re.split(r'[/?#]', rest, maxsplit=1)[0]}".lower()


def _own_origin(origin: str, host: str | None) -> bool:
    """Whether ``origin`` (a page's) is this server's own: the same ``Host``."""
    scheme, _, rest = origin.partition("://")
    return host is not None and scheme in ("http", "https") and rest.lower() == host.lower()


def cross_site_refusal(headers: Mapping[str, str], cors: Iterable[str]) -> str | None:
    """Why a state-changing GET with these request ``headers`` is refused as sent by another site (None: allowed).

    Allowed: no sign of a foreign page (a script, ``curl``, a typed address), this server's own page, or
    an ``Origin`` given with ``--cors`` (``*`` allows every origin)."""
    allowed = {o.lower() for o in cors}
    host = headers.get("host")
    origin = headers.get("origin")
    if origin is not None:
        if "*" in allowed or origin.lower() in allowed or _own_origin(origin, host):
            return None
        return (f"a GET that runs a turn may not come from the page {origin[:100]!r} (another site; give its"
                " origin with --cors to allow it; see docs/SECURITY.md)")  # fmt: skip
    site = headers.get("sec-fetch-site", "").strip().lower()
    if site in _FOREIGN_FETCH:
        return (f"a GET that runs a turn may not come from a page of another site (Sec-Fetch-Site: {site}) without"
                " an Origin given with --cors (see docs/SECURITY.md)")  # fmt: skip
    referer = headers.get("referer")
    if not site and referer and "*" not in allowed:
        page = _origin_of(referer)
        if page not in allowed and not _own_origin(page, host):
            return (f"a GET that runs a turn may not come from the page {page[:100]!r} (another site; give its"
                    " origin with --cors to allow it; see docs/SECURITY.md)")  # fmt: skip
    return None


class AllowedHosts:
    """The hosts a server answers for: loopback, the address a request came in on, and the names given."""

    def __init__(self, names: Iterable[str]) -> None:
        given = [n.strip().lower().rstrip(".") for n in names if n.strip()]
        self.any = "*" in given
        """``*`` was given: every host is answered (the check is off)."""
        self.names = frozenset(n for n in given if not n.startswith("*."))
        self.suffixes = tuple(n[1:] for n in given if n.startswith("*."))
        """``*.lan`` given: any name ending in ``.lan``."""

    def allows(self, name: str, local: str | None) -> bool:
        """Whether the host ``name`` (:func:`host_name`) is this server's, for a request that came in on ``local``."""
        if self.any or is_loopback(name) or name in self.names or name.endswith(self.suffixes):
            return True
        if local is None:
            return False
        try:  # the address the client connected to (an IPv4-mapped IPv6 one written as IPv4)
            address = ipaddress.ip_address(local)
            mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
            return ipaddress.ip_address(name) in (address, mapped)
        except ValueError:
            return False


class HostCheck:
    """ASGI middleware: every HTTP request and WebSocket handshake whose ``Host`` is not allowed is refused (421)."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = AllowedHosts(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.allowed.any:
            await self.app(scope, receive, send)
            return
        why = self.refusal(scope)
        if why is None:
            await self.app(scope, receive, send)
            return
        await _refuse(scope, receive, send, *why)

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        """The status and message refusing this request's ``Host``; None where it is allowed."""
        hosts = [value for key, value in scope["headers"] if key == b"host"]
        if len(hosts) > 1:
            return 400, TWO_HOSTS
        if not hosts:  # (an HTTP/1.0 client may send none; no browser leaves it out)
            return None if scope.get("http_version") == "1.0" else (400, NO_HOST)
        shown = hosts[0].decode("latin-1")
        name = host_name(shown)
        if name is None:
            return 400, f"the Host header {shown[:100]!r} is not a host name"
        server = scope.get("server")
        local = str(server[0]) if server else None
        if self.allowed.allows(name, local):
            return None
        return 421, (
            f"this server does not answer for the host {name[:100]!r}: only for localhost, its own address and the"
            " names given with --allow-host (see docs/SECURITY.md: a guard against DNS rebinding)"
        )


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    """The refusal, OpenAI-shaped: an HTTP answer, or a WebSocket handshake's (where the server can answer one
    with a response; else the handshake closed, which it sends as 403)."""
    from starlette.responses import JSONResponse  # noqa: PLC0415 (the names above need no Starlette: the CLI)
    from starlette.websockets import WebSocket  # noqa: PLC0415 (import cost: starlette's WebSocket only to refuse one)

    from charfmt.serve.wire import error_body  # noqa: PLC0415 (import cost: starlette, pydantic load on first use)

    response = JSONResponse(error_body(status, message), status_code=status)
    if scope["type"] == "http":
        await response(scope, receive, send)
        return
    ws = WebSocket(scope, receive, send)
    if "websocket.http.response" in scope.get("extensions", {}):
        await ws.send_denial_response(response)
    else:
        await ws.close(code=1008, reason=message[:120])
