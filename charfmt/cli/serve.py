"""``charfmt serve``: flags into ``charfmt.serve.Settings``, then uvicorn runs ``create_app(settings)``, guarded."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import ipaddress
import logging
import math
import os
import re
import secrets
import shlex
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from charfmt.cli._command import Subcommand
from charfmt.cli._io import (
    EXIT_INTERRUPTED,
    check_greeting,
    check_model_name,
    load_character,
    load_lorebooks,
    read,
    usable_file,
)
from charfmt.cli._options import add_cast_inputs, add_decoding, add_tokenizer, open_store_of, positive, whole
from charfmt.constrain.engines import SERVERS
from charfmt.diagnostics import CharfmtError
from charfmt.llm._model_clients import API_KEY_ENV, api_key_from, chat_formats, endpoint_url, llama_logs
from charfmt.llm.loading import check_gguf

_SECONDS: Final = positive("seconds", 3600)
"""The type of the flags that take seconds: more than 0, at most an hour."""


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The flags of ``charfmt serve``."""
    from charfmt.serve.formats import REPLY_FORMAT_HELP, REPLY_FORMAT_NAMES  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.serve.settings import DEFAULT_MAX_TOKENS  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.serve.upstreams import KINDS  # noqa: PLC0415 (import cost: every CLI command loads this module)

    add_cast_inputs(
        sp, scene="a scene TOML file: a cast of characters and a narrator", opens="a new session", memory=True,
        user=" (default: the file's, else User); a front end may name its player each turn"
        " (/v1/turn's user_name, a chat message's name)",
    )  # fmt: skip
    where = sp.add_mutually_exclusive_group(required=True)
    for kind in KINDS:  # one flag per upstream kind (``charfmt.serve.upstreams``)
        where.add_argument(kind.flag, metavar=kind.metavar, help=kind.help)
    sp.add_argument("--api-key-env", metavar="NAME",
                    help="the environment variable holding --upstream's API key, sent as 'Authorization: Bearer'"
                    " (default OPENAI_API_KEY, where set); credentials in the URL are never sent")  # fmt: skip
    sp.add_argument("--server", choices=SERVERS, default="llama-server",
                    help="what --upstream runs: which request field carries the grammar or schema")  # fmt: skip
    sp.add_argument("--model-name", metavar="NAME",
                    help="the model name sent upstream (default: none: its default; --server openai needs one)")
    sp.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    sp.add_argument("--port", type=whole(0, 65535), default=8000, help="port, 0-65535 (default 8000; 0: any free port)")
    sp.add_argument("--reply-format", choices=REPLY_FORMAT_NAMES, default=REPLY_FORMAT_NAMES[0], help=REPLY_FORMAT_HELP)
    add_decoding(
        sp, constrained="send the reply grammar or schema upstream (default)", free="send no grammar",
        max_tokens=DEFAULT_MAX_TOKENS, tokens_help=f"tokens per reply (default {DEFAULT_MAX_TOKENS})",
    )  # fmt: skip
    sp.add_argument("--n-ctx", type=whole(64), default=8192, metavar="N",
                    help="the model's context window in tokens (default 8192; set the upstream's)")  # fmt: skip
    add_tokenizer(sp, "for --n-ctx with --upstream (--model counts with its own)")
    sp.add_argument("--timeout", type=_SECONDS, default=120.0, metavar="S",
                    help="seconds the upstream may send no event (default 120; comments do not count)")  # fmt: skip
    sp.add_argument("--token", metavar="TOKEN",
                    help="require 'Authorization: Bearer TOKEN', at least 16 characters: one trusted front end "
                    "(default: $CHARFMT_TOKEN)")  # fmt: skip
    sp.add_argument("--tokens", metavar="FILE",
                    help="per-player tokens, a 'NAME sha256:HEX' line each: each token's sessions "
                    "its own")  # fmt: skip
    sp.add_argument("--new-token", metavar="NAME", action=_TokenAction,
                    help="print a new token's --tokens line for NAME (the token itself on stderr), "
                    "and exit")  # fmt: skip
    sp.add_argument("--hash-token", metavar="NAME", action=_TokenAction,
                    help="print the --tokens line for NAME of the token read from stdin, and exit")  # fmt: skip
    sp.add_argument("--cors", action="append", default=[], metavar="ORIGIN",
                    help="allow this browser origin (http[s]://host[:port]; * any)")  # fmt: skip
    sp.add_argument("--log", metavar="FILE.jsonl", help="append each turn to this JSON Lines file (charfmt report)")
    sp.add_argument("--max-sessions", type=whole(1), metavar="N",
                    help=f"sessions kept; past it the least recently written is evicted, and logged (default "
                    f"{MAX_SESSIONS['memory']:,} in memory, {MAX_SESSIONS['store']:,} in a store)")  # fmt: skip
    sp.add_argument("--max-age", type=positive("days", 36500), metavar="DAYS",
                    help="evict (and log) a session unwritten for DAYS days (default: kept until evicted "
                    "by number)")  # fmt: skip
    sp.add_argument("--max-request-bytes", type=whole(1024), default=1 << 20, metavar="N",
                    help="bytes of a request body or WebSocket message (default 1 MiB)")  # fmt: skip
    sp.add_argument("--chat-format", metavar="NAME",
                    help="--model's chat format, a llama-cpp-python name (gemma, chatml...; default: the GGUF's own "
                    "template, with a warning where it has none), as charfmt chat's")  # fmt: skip
    sp.add_argument("--verbose", action="store_true", help="show --model's llama.cpp log lines on standard error")
    _add_transport(sp)


def _add_transport(sp: argparse.ArgumentParser) -> None:
    """The flags of what a connection may do: the hosts answered, the HTTP parser, the transport guard's bounds."""
    from charfmt.serve.guard import Limits  # noqa: PLC0415 (import cost: every CLI command loads this module)

    sp.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                    help="also answer requests for this Host name (a LAN name, a proxy's; *.lan: a domain; *: any,"
                    " the DNS-rebinding guard off); loopback names and the address a request came in on always are,"
                    " and this machine's names where --host is 0.0.0.0 or ::")  # fmt: skip
    sp.add_argument("--http", choices=("auto", "httptools", "h11"), default="auto",
                    help="uvicorn's HTTP parser (auto: httptools where installed); the bounds below hold with"
                    " either")  # fmt: skip
    d = Limits()
    sp.add_argument("--max-connections", type=whole(1), default=d.max_connections, metavar="N",
                    help=f"connections open at once; each beyond: 503 (default {d.max_connections:,})")  # fmt: skip
    sp.add_argument("--header-timeout", type=_SECONDS, default=d.header_seconds, metavar="S",
                    help=f"seconds a request's head may take, then 408 (default {d.header_seconds:g})")  # fmt: skip
    sp.add_argument("--body-timeout", type=_SECONDS, default=d.body_seconds, metavar="S",
                    help=f"seconds a request's body may take after its head, then 408"
                    f" (default {d.body_seconds:g})")  # fmt: skip
    sp.add_argument("--keep-alive", type=_SECONDS, default=d.idle_seconds, metavar="S",
                    help=f"seconds an idle connection waits for its next request"
                    f" (default {d.idle_seconds:g})")  # fmt: skip


def settings_from(args: argparse.Namespace) -> Any:
    """``Settings`` from the parsed flags (the character loaded; a bad file is one error line)."""

    from charfmt.serve.settings import Settings  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.serve.upstreams import KINDS  # noqa: PLC0415 (import cost: every CLI command loads this module)

    if args.max_tokens >= args.n_ctx:
        args.parser.error(f"--max-tokens {args.max_tokens} leaves no room for the prompt in --n-ctx {args.n_ctx}")
    if args.chat_format is not None and args.model is None:
        args.parser.error("argument --chat-format: only with --model (the server at --upstream has its own template)")
    if args.chat_format is not None and not args.chat_format.startswith("chat_template."):
        known = chat_formats()  # (llama-cpp-python missing: its one error line, exit 1)
        if args.chat_format not in known:
            args.parser.error(f"argument --chat-format: {args.chat_format[:80]!r} is not one of: {', '.join(known)}")
    if args.model is not None:
        _model_file(args.model)
    if not 0 < args.timeout <= 3600:
        args.parser.error(f"--timeout must be more than 0 and at most 3600 seconds, not {args.timeout:g}")
    if args.upstream is not None:
        try:
            endpoint_url(args.upstream)  # a bad URL is a usage error now, not at the first turn
        except CharfmtError as e:
            args.parser.error(str(e).replace("--endpoint", "--upstream"))
        check_model_name(args, "charfmt serve")
    for origin in args.cors:  # as a browser sends it: scheme://host[:port], no path, no slash at the end
        if origin != "*" and _ORIGIN.fullmatch(origin) is None:
            args.parser.error(f"argument --cors: {origin!r} is not an origin (http[s]://host[:port], or *)")
    if args.tokenizer is not None and args.model is not None:
        args.parser.error("argument --tokenizer: a model run in-process (--model) counts with its own tokenizer")
    allowed_hosts = _allowed_hosts(args)
    api_key = key_env = None
    if args.upstream is not None:
        key_env = args.api_key_env or API_KEY_ENV
        api_key = api_key_from(args.api_key_env)
        if api_key is None and args.api_key_env is not None:
            args.parser.error(f"argument --api-key-env: the environment variable {args.api_key_env} is not set")
    scene = None
    if args.scene is not None:
        from charfmt.prompt.scene import Scene  # noqa: PLC0415 (import cost: every CLI command loads this module)

        read(args.scene, args.max_size)  # a file that cannot be read at all (missing, a folder): exit 2
        scene = Scene.load(args.scene, max_size=args.max_size)
        if args.greeting:  # (0, the default, and none: a scene opens without a greeting either way)
            args.parser.error(f"argument --greeting: {args.greeting}: a scene opens without a greeting")
        if args.user_name is not None:  # (the scene's player; its cast's {{user}})
            scene = scene.model_copy(update={"user_name": args.user_name})
        character = next(iter(scene.cast.values()))
    else:
        character = load_character(args.character, args.max_size, args.user_name)
        check_greeting(args, character, args.greeting)
    kind = next(kind for kind in KINDS if getattr(args, kind.dest) is not None)  # (one is required)
    if kind.file is not None:  # (a file missing or a folder: exit 2, as for --character)
        usable_file(getattr(args, kind.dest), kind.file)
    kind.check(getattr(args, kind.dest))  # a target that cannot be served stops the start (exit 1)
    settings = Settings(
        character=character, scene=scene, upstream_kind=kind.name, upstream_target=getattr(args, kind.dest),
        server=args.server, chat_format=args.chat_format, model_name=args.model_name,
        reply_format=args.reply_format,
        api_key=api_key, api_key_env=key_env,
        constrained=args.constrained, max_tokens=args.max_tokens, n_ctx=args.n_ctx, timeout=args.timeout,
        tokenizer=args.tokenizer,
        token=_token(args), cors=tuple(args.cors),
        log=Path(args.log) if args.log else None, max_request_bytes=args.max_request_bytes,
        tokens=_tokens(args),
        max_session_age=args.max_age * 86400 if args.max_age is not None else None,
        max_sessions=args.max_sessions or MAX_SESSIONS["memory" if args.memory else "store"],
        lorebooks=tuple(load_lorebooks(args.lorebook, args.max_size)), greeting=args.greeting,
        allowed_hosts=allowed_hosts,
    )  # fmt: skip
    _usable(args, settings)
    return settings


def _token(args: argparse.Namespace) -> str | None:
    """``--token``, else ``$CHARFMT_TOKEN``, else none; one that is empty or short is a usage error (an empty one
    would turn auth off unsaid), by the rule every token of the server keeps (``owners.token_problem``)."""

    from charfmt.serve.owners import token_problem  # noqa: PLC0415 (import cost: every CLI command loads this module)

    given, where = (args.token, "argument --token") if args.token is not None else (
        os.environ.get("CHARFMT_TOKEN"), "the environment variable CHARFMT_TOKEN")  # fmt: skip
    if given is None:
        return None
    if (why := token_problem(given)) is not None:
        off = "; to run without auth, leave it out" if args.token is not None else "; to run without auth, unset it"
        args.parser.error(f"{where}: {why}{off}")
    return given


def _allowed_hosts(args: argparse.Namespace) -> tuple[str, ...]:
    """The ``Host`` names answered besides loopback and the address a request came in on: ``--allow-host``'s,
    ``--host`` where it is a name, and this machine's names where ``--host`` listens on every address."""
    import socket  # noqa: PLC0415 (import cost: only where --allow-host is checked)

    from charfmt.serve.hosts import LOOPBACK_NAMES, host_name  # noqa: PLC0415 (import cost: every CLI command loads this module)

    names = list(args.allow_host)
    for name in names:
        if name != "*" and host_name(name.removeprefix("*.")) is None:
            args.parser.error(f"argument --allow-host: {name!r} is not a host name (a name, an address, *.domain, *)")
    try:
        ipaddress.ip_address(args.host)  # (an address: a request that came in on it is answered anyway)
    except ValueError:
        if host_name(args.host) is not None:
            names.append(args.host)
    if args.host in ("0.0.0.0", "::", ""):  # every address: the names the LAN knows this machine by
        machine = socket.gethostname()
        names += [machine, f"{machine}.local", socket.getfqdn()]
    # (loopback names are answered anyway: a machine whose fully qualified name is 'localhost' adds nothing)
    return tuple(dict.fromkeys(n.lower() for n in names if n and n.lower() not in LOOPBACK_NAMES))


def _tokens(args: argparse.Namespace) -> tuple[tuple[str, str], ...]:
    """``--tokens FILE``'s entries: a file that cannot be read is a usage error (exit 2), one that holds
    something else than token lines invalid input (exit 1)."""

    from charfmt.serve.owners import read_tokens  # noqa: PLC0415 (import cost: every CLI command loads this module)

    if args.tokens is None:
        return ()
    if not os.path.isfile(args.tokens):
        args.parser.error(f"argument --tokens: {args.tokens} is not a file (make one with --new-token NAME)")
    try:
        return read_tokens(args.tokens)
    except CharfmtError as e:
        if "cannot read" in str(e):
            args.parser.error(f"argument --tokens: {e}")
        raise


def _model_file(path: str) -> None:
    """``--model`` checked before anything is loaded or listens, as ``charfmt chat`` checks it: a file that
    cannot be used (missing, a directory) exit 2, one that is not a GGUF model exit 1."""

    usable_file(path, "model file")
    check_gguf(path)


def _usable(args: argparse.Namespace, settings: Any) -> None:
    """Flags that cannot be served are usage errors (exit 2): too few --max-tokens for one reply, a --log
    that cannot be opened (a directory, a missing folder, no permission)."""
    from charfmt.serve.logs import TurnLog  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.serve.turns import reply_bounds  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.serve.upstreams import source  # noqa: PLC0415 (import cost: every CLI command loads this module)

    local = (found := source(settings)) is not None and found[0].local
    try:  # (--model: its tokens per character are measured once it loads; at least 1, the fewest any model takes)
        reply_bounds(settings, 1.0 if local else None)
    except CharfmtError as e:
        args.parser.error(f"argument --max-tokens: {e}")
    if settings.tokenizer is not None:
        from charfmt.prompt.tokens import counter_for  # noqa: PLC0415 (import cost: every CLI command loads this module)

        counter_for(tokenizer=settings.tokenizer)  # one that cannot load stops the start (exit 1), not each turn
    if settings.log is not None:
        try:
            TurnLog(settings.log).close()  # (created here if new, as the server would at its start)
        except CharfmtError as e:
            args.parser.error(f"argument --log: {e}")


def run(args: argparse.Namespace) -> int:
    """Run the server until interrupted."""
    try:
        import uvicorn  # noqa: F401, PLC0415 (checked before the server starts; run in _serve)
    except ImportError as e:
        raise CharfmtError(f"charfmt serve needs uvicorn ({e}): pip install 'charfmt[serve]'") from None

    from charfmt.serve import create_app  # noqa: PLC0415 (import cost: every CLI command loads this module)

    settings = _loaded(settings_from(args), verbose=args.verbose)
    store = open_store_of(args)  # (closed when the server has stopped)
    try:
        _serve(args, create_app(dataclasses.replace(settings, store=store)), store.close)
    except KeyboardInterrupt:  # Ctrl-C: the way to stop it, after a clean stop (not an error)
        print("charfmt serve: stopped (Ctrl-C)", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    finally:
        store.close()
    return 0


def _serve(args: argparse.Namespace, app: Any, stopped: Callable[[], None]) -> None:
    """Run ``app`` until it is stopped; ``stopped`` (closing the store) runs once it has, before the signal that
    stopped it is raised again (SIGTERM's default action ends the process there: no ``finally`` after it runs)."""
    import uvicorn  # noqa: PLC0415 (optional dependency: uvicorn, charfmt[serve])

    from charfmt.serve.hosts import is_loopback  # noqa: PLC0415 (import cost: every CLI command loads this module)

    state = app.state.charfmt
    settings = state.settings
    for d in [*state.names.diagnostics(), *_lore_notes(settings)]:  # an emotion the front end will ignore (CF828)
        print(f"charfmt serve: {d.severity}: {d.code} {d.message}", file=sys.stderr)
    _ready(settings)
    sock = _bind(args.host, args.port)  # a bind failure is one error line (exit 1), not uvicorn's log
    beyond = not is_loopback(args.host)
    if beyond and settings.token is None and not settings.tokens:
        print(f"charfmt serve: warning: listening on {args.host} with no --token or --tokens", file=sys.stderr)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="info", **_transport(args, settings))
    _console(settings)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"charfmt serve: listening on http://{shown}:{port} (Ctrl-C stops it)", file=sys.stderr, flush=True)
    if beyond:
        names = ", ".join(["localhost", "its addresses", *settings.allowed_hosts])
        print(f"charfmt serve: answering requests for {names} (more: --allow-host)", file=sys.stderr, flush=True)
    from charfmt.serve.owners import auth_mode  # noqa: PLC0415 (import cost: every CLI command loads this module)

    print(f"charfmt serve: {auth_mode(settings.token, settings.tokens)}", file=sys.stderr, flush=True)
    _said_store(settings.store, state.scope, args.store)

    class Server(uvicorn.Server):
        signal: int | None = None

        def handle_exit(self, sig: int, frame: Any) -> None:
            state.stopping = True  # a turn cut by the stop is logged as the server's, not the client's
            self.signal = sig
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():  # (which raises a caught SIGTERM or SIGINT again as it ends)
                try:
                    yield
                finally:
                    stopped()
                    if self.signal not in (None, signal.SIGINT):  # (Ctrl-C's line: ``run``'s, after it)
                        print(f"charfmt serve: stopped ({signal.Signals(self.signal).name})", file=sys.stderr)

    with sock:
        Server(config).run(sockets=[sock])


def _lore_notes(settings: Any) -> list[Any]:
    """What merging the character's books says once for every turn: a book given twice (the card's own book
    again as ``--lorebook``) is read once (``CF946``)."""
    from charfmt.prompt._card_prompt import card_books, merged  # noqa: PLC0415 (import cost: as above)

    if settings.scene is not None:
        return []
    books = [b for b in (*card_books(settings.character), *settings.lorebooks) if b.entries]
    return [d for d in merged(books).diagnostics if d.code == "CF946"] if len(books) > 1 else []


MAX_SESSIONS: Final = {"memory": 1000, "store": 10_000}
"""``--max-sessions``'s default: in memory, and in a store (at most 256 KiB of history each: 2.5 GiB at worst)."""


def _said_store(store: Any, served: str, given: str | None) -> None:
    """Say where the sessions are kept, how many there are (a restart keeps them, or not), how many this
    character's, and those of an earlier definition of it (an edited card) that it will not resume."""
    from charfmt.store.memory import MemoryStore  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.store.scopes import character_of, legacy  # noqa: PLC0415 (import cost: as above)

    if isinstance(store, MemoryStore):
        print("charfmt serve: sessions kept in memory only (--memory): a restart forgets them", file=sys.stderr)
        return
    every = store.sessions()
    name = character_of(f"turn/{served}")
    mine = sum(s.key.namespace.partition("/")[2] == served for s in every)
    earlier = [s for s in every if legacy(s.key.namespace) is not None and s.key.namespace.partition("/")[2] != served
               and character_of(s.key.namespace) == name]  # fmt: skip
    print(f"charfmt serve: sessions kept in {store.target} ({len(every):,} now, {mine:,} of {name})", file=sys.stderr)
    if earlier:
        where = "" if given is None else " --store DSN" if "://" in given else f" --store {shlex.quote(given)}"
        print(
            f"charfmt serve: note: {len(earlier):,} {'session' if len(earlier) == 1 else 'sessions'} of another"
            f" definition of {name} (edited since?) {'is' if len(earlier) == 1 else 'are'} kept but not resumed;"
            f" this one's are turn/{served} and chat/{served}: charfmt sessions list{where} shows each namespace",
            file=sys.stderr,
        )


class _TokenAction(argparse.Action):
    """``--new-token NAME`` / ``--hash-token NAME``: print a ``--tokens`` line and exit, before any other flag
    is checked (as ``--help`` does)."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: Any = None
    ) -> None:

        from charfmt.serve.owners import token_line  # noqa: PLC0415 (import cost: every CLI command loads this module)

        name = str(values)
        token = secrets.token_urlsafe(32) if self.dest == "new_token" else _read_token(parser)
        try:
            line = token_line(name, token)
        except CharfmtError as e:
            parser.error(f"argument {option_string}: {e}")
        print(line, flush=True)
        if self.dest == "new_token":
            print(f"charfmt serve: {name}'s token (give it to them; only its hash is kept): {token}", file=sys.stderr)
        parser.exit(0)


def _read_token(parser: argparse.ArgumentParser) -> str:
    """The token to hash: typed unseen at a terminal, else standard input's one line (more is a usage error:
    which line was meant cannot be known, and a silent pick hashes the wrong one)."""
    if sys.stdin is None:
        parser.error("argument --hash-token: the token is read from standard input, which is closed")
    if sys.stdin.isatty():
        import getpass  # noqa: PLC0415 (import cost: only for --hash-token)

        return getpass.getpass("token: ")
    lines = [line.strip() for line in sys.stdin.read(4096).splitlines() if line.strip()]
    if len(lines) > 1:
        parser.error(f"argument --hash-token: standard input holds {len(lines)} lines: give one token, alone")
    return lines[0] if lines else ""


def _transport(args: argparse.Namespace, settings: Any) -> dict[str, Any]:
    """uvicorn's settings of the connections: its HTTP parser behind the transport guard, the WebSocket's bound."""

    from uvicorn.config import HTTP_PROTOCOLS  # noqa: PLC0415 (optional dependency: uvicorn, charfmt[serve])
    from uvicorn.importer import import_from_string  # noqa: PLC0415 (optional dependency: uvicorn, charfmt[serve])

    from charfmt.serve.guard import Limits, protocol_class  # noqa: PLC0415 (import cost: every CLI command loads this module)

    limits = Limits(
        header_seconds=args.header_timeout, body_seconds=args.body_timeout,
        idle_seconds=args.keep_alive, max_connections=args.max_connections,
    )  # fmt: skip
    _open_files_for(limits.max_connections)
    return {
        "http": protocol_class(import_from_string(HTTP_PROTOCOLS[args.http]), limits),
        "ws_max_size": settings.max_request_bytes, "timeout_graceful_shutdown": 5,
        # the guard's bounds are met first: h11's own above them, uvicorn's keep-alive after the guard's
        "h11_max_incomplete_event_size": limits.head.request_line + limits.head.head_bytes + 4096,
        "timeout_keep_alive": math.ceil(limits.idle_seconds) + 1,
    }  # fmt: skip


def _open_files_for(connections: int) -> None:
    """Room for ``connections`` sockets (and the upstream's, the files): the soft limit of open files raised
    toward the hard one where it is lower (a warning where it cannot be)."""
    try:
        import resource  # noqa: PLC0415 (POSIX only: the open-files limit)
    except ImportError:  # (not on Windows)
        return
    need = connections + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    room = need if hard == resource.RLIM_INFINITY else min(need, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (room, hard))
    except (ValueError, OSError):
        room = soft
    if room < need:
        print(f"charfmt serve: warning: --max-connections {connections} needs {need} open files;"
              f" this process may open {room} (ulimit -n)", file=sys.stderr)  # fmt: skip


def _console(settings: Any) -> None:
    """The console's lines (uvicorn's, the failed turns', the guard's refusals) in uvicorn's form, redacted."""
    from charfmt._redact import Redactor  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.serve.logs import redact_console  # noqa: PLC0415 (import cost: every CLI command loads this module)

    logging.getLogger("uvicorn.error").addFilter(_no_denial_error)
    console = logging.getLogger("charfmt.serve")  # failed turns and refusals, beside uvicorn's lines
    console.handlers, console.propagate = list(logging.getLogger("uvicorn").handlers), False
    console.setLevel(logging.INFO)
    redact_console(Redactor(settings.secrets()), ("uvicorn", "uvicorn.access", "charfmt.serve"))


_ORIGIN: Final = re.compile(r"https?://[^/?#\s]+")
"""What a browser's ``Origin`` header holds."""


def _no_denial_error(record: logging.LogRecord) -> bool:
    """Leave out uvicorn's error for a WebSocket handshake the app refused with an HTTP answer (401, 403):
    its sans-I/O protocol logs every such refusal as "returned without completing handshake". The app
    always accepts or refuses (``charfmt.serve.turn_stream._refuse``), so the line says nothing wrong."""
    return record.getMessage() != "ASGI callable returned without completing handshake."


def _ready(settings: Any) -> None:
    """Load what every turn needs before the first one (a missing extra stops the start, exit 1), then
    freeze what the start made (``gc.freeze``): the collector's full passes then scan what requests
    make, not the modules, grammars and models of the start (tens of milliseconds a pass, measured)."""

    import charfmt.serve.turn_stream  # noqa: PLC0415 (the /v1/turn and completions routes' modules)
    import charfmt.speech  # noqa: PLC0415 (import cost: every CLI command loads this module)
    import charfmt.stage  # noqa: PLC0415 (import cost: every CLI command loads this module)
    import charfmt.stream  # noqa: F401, PLC0415 (import cost: every CLI command loads this module)
    from charfmt.serve.upstreams import source  # noqa: PLC0415 (import cost: every CLI command loads this module)

    try:
        import websockets  # noqa: F401, PLC0415 (uvicorn's WebSocket protocol: /v1/turn/ws)
    except ImportError as e:
        raise CharfmtError(f"charfmt serve needs websockets ({e}): pip install 'charfmt[serve]'") from None
    found = source(settings)
    if found is not None:
        found[0].require()  # (the extra its kind needs: aiohttp, llama-cpp-python)
    gc.collect()
    gc.freeze()


def _loaded(settings: Any, *, verbose: bool = False) -> Any:
    """The settings with ``--model`` loaded as their upstream, before the server starts: a model llama.cpp
    cannot load stops the start (exit 1), a GGUF without a chat template is one warning line, and
    llama.cpp's own log lines stay off standard error unless ``--verbose`` (as ``charfmt chat``)."""
    from charfmt.serve.upstreams import source  # noqa: PLC0415 (import cost: every CLI command loads this module)

    found = source(settings)
    if found is None or not found[0].local or settings.upstream is not None:
        return settings

    from charfmt.serve.upstreams.llama import LocalUpstream, load_local  # noqa: PLC0415 (import cost: every CLI command loads this module)

    llama_logs(verbose=verbose)  # llama.cpp's own lines (a Gemma load's SWA note) off stderr, as chat
    upstream: LocalUpstream = load_local(found[1], n_ctx=settings.n_ctx, chat_format=settings.chat_format, warn=False)
    if upstream.model.missing_template is not None:
        print(f"charfmt serve: warning: {upstream.model.missing_template}", file=sys.stderr, flush=True)
    return dataclasses.replace(settings, upstream=upstream)


def _bind(host: str, port: int) -> Any:
    """A listening socket on ``host:port``, or a ``CharfmtError`` saying why not (in use, unknown host)."""
    import socket  # noqa: PLC0415 (import cost: only when the server binds)

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise CharfmtError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise CharfmtError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


COMMAND: Final = Subcommand(
    add_arguments,
    run,
    help="serve a character over HTTP: OpenAI-compatible, events, playground",
    ok="the server ran and was stopped (Ctrl-C: 130; SIGTERM stops it gracefully and ends with the signal, 143)",
    invalid=(
        "the server could not start: the address cannot be bound (a port in use, an unknown host),"
        " the --character/--scene or --tokens file is invalid, or the --store cannot be opened"
    ),
    # The optional extras it needs: Starlette, uvicorn and aiohttp (``charfmt[serve]``); llama-cpp-python for
    # ``--model`` (``charfmt[local]``); psycopg for a ``postgresql://`` ``--store`` (``charfmt[postgres]``). Each is
    # checked before the server starts.
    extras=("serve", "local", "postgres"),
)
