"""Constrained decoding on the engines people run: recipes, XGrammar structural tags, llama.cpp.

Everything here builds plain data (strings and dicts) from ``charfmt.grammar`` and
``charfmt.json_schema``; the engines themselves (``xgrammar``, ``llama_cpp``) are imported
only by the helpers that need them, with a ``CharfmtError`` naming the package to install
when they are missing.

- ``request_fields(server, ...)``: the extra request fields that make an OpenAI-compatible
  server constrain its reply: llama-server (``grammar``, GBNF), vLLM and SGLang
  (``structured_outputs``/``ebnf``, or the ``structural_tag`` response format), LM Studio
  and OpenAI (``response_format`` with a JSON schema).
- ``structural_tag(...)``: XGrammar's ``structural_tag`` response format, so a model may
  think freely in ``<think>…</think>`` and must then write the reply (the JSON envelope,
  or a bare ``C`` body as a sequence of tag elements).
- ``xgrammar_tokenizer_info(encoding)``: an ``xgrammar.TokenizerInfo`` from a tiktoken
  encoding (cl100k and friends), for checking grammars offline.
- ``load_llama_cpp()``: the ``llama_cpp`` module with its portable install hint; loading a model
  (``load_llama``, ``default_model_path``) is ``charfmt.llm.loading``'s.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Unpack

from charfmt.constrain._reply_constraints import ReplyConstraints, Speakers, constrains, constraints_of
from charfmt.diagnostics import CharfmtError
from charfmt.models import Vocabulary
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from charfmt.constrain.export import Bounds, Grammar

__all__ = [
    "LLAMA_INSTALL",
    "SERVERS",
    "EngineMissing",
    "llama_grammar",
    "llguidance_installed",
    "llguidance_processor",
    "load_llama_cpp",
    "load_xgrammar",
    "local_constraint",
    "request_fields",
    "structural_tag",
    "unpack_bits",
    "xgrammar_processor",
    "xgrammar_tokenizer_info",
]

SERVERS: Final = ("llama-server", "vllm", "sglang", "lmstudio", "openai", "ollama", "koboldcpp", "localai")
"""The OpenAI-compatible servers ``request_fields`` knows the constraint field of."""


LLAMA_INSTALL: Final = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF '
    '-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_OPENMP=OFF" pip install "charfmt[local]"'
)
"""How to install llama-cpp-python with a portable CPU build (the native build can crash on AVX-512/AMX code)."""


class EngineMissing(CharfmtError):
    """An optional engine (xgrammar, llama-cpp-python) or a model file is not installed."""


# --- recipes for OpenAI-compatible servers ------------------------------------------------------


@constrains
def request_fields(
    server: str,
    *,
    bounds: Bounds | None = None,
    speakers: Speakers | None = None,
    **constraints: Unpack[ReplyConstraints],
) -> dict[str, Any]:
    """The request fields that constrain a reply on ``server`` (merge them into the request body).

    ``llama-server``: ``{"grammar": <GBNF>}``; ``vllm``: ``{"structured_outputs": {"grammar":
    <Lark>}}`` (vLLM's default backend is XGrammar; the Lark export reads there and in llguidance);
    ``sglang``: ``{"ebnf": <GBNF>}``; ``lmstudio``: ``response_format`` with the JSON schema
    (standard patterns); ``openai``: ``response_format`` with the strict ``"openai"`` schema;
    ``ollama``: ``{"format": <JSON schema>}``; ``koboldcpp`` and ``localai``: ``{"grammar": <GBNF>}``.
    ``max_tokens`` bounds the reply so it fits (``charfmt.constrain.export.plan_bounds``, as ``grammar`` does)
    and is also sent as the request's ``max_tokens``. ``bounds``: these exact bounds
    (``charfmt chat`` and ``serve`` pass the ones they planned), instead of those ``max_tokens``
    gives; the grammar targets take them whole, the schema targets as body patterns. ``speakers``:
    a scene's cast (each ``C`` chat names one of them; a mapping, or ``character=`` a scene, gives
    each its own emotions).
    """
    c = constraints_of("request_fields", constraints, speakers)
    from charfmt.constrain.export import _gbnf_target, _lark_target, reply_grammar, resolve_bounds  # noqa: PLC0415 (Lark loads only here)
    from charfmt.constrain.schema import json_schema  # noqa: PLC0415 (import cost: every CLI command loads this module)

    if bounds is None:
        bounds = resolve_bounds(speakers=c.speakers, **constraints)

    def bounded(target: str) -> str:
        g = reply_grammar(c.vocabulary, c.tags, bounds=bounds, speakers=c.speakers)
        return _gbnf_target(g) if target == "gbnf" else _lark_target(g)

    fields: dict[str, Any]
    if server in ("llama-server", "koboldcpp", "localai"):  # each reads GBNF in ``grammar``
        fields = {"grammar": bounded("gbnf")}
    elif server == "vllm":
        fields = {"structured_outputs": {"grammar": bounded("lark")}}
    elif server == "sglang":
        fields = {"ebnf": bounded("gbnf")}
    elif server in ("lmstudio", "openai", "ollama"):
        provider = "openai" if server == "openai" else None
        schema = json_schema(provider, speakers=c.speakers, bounds=bounds, **constraints)
        schema.pop("$schema", None)
        if server != "openai":  # Ollama and LM Studio run llama.cpp's converter: patterns over the raw JSON text
            from charfmt.constrain.schema import for_engine  # noqa: PLC0415 (import cost: every CLI command loads this module)

            schema = for_engine(schema, "llama.cpp")
        fields = {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "charfmt_reply", "strict": True, "schema": schema},
            }
        }
        if server == "ollama":  # ollama's own field (its OpenAI route reads response_format as well)
            fields = {"format": schema}
    else:
        raise CharfmtError(f"unknown server {server!r}; expected one of {', '.join(SERVERS)}")
    if c.max_tokens is not None:
        fields["max_tokens"] = c.max_tokens
    return fields


# --- XGrammar structural tags -------------------------------------------------------------------


def _element_formats(
    vocabulary: Vocabulary | None, max_chars: int | None, tags: TagTable | None = None
) -> list[dict[str, Any]]:
    """One XGrammar ``tag`` format per element of the body grammar, its content a regex."""
    from charfmt.constrain.export import (  # noqa: PLC0415 (import cost: every CLI command loads this module)
        _ECMA,
        Bounds,
        Lit,
        Ref,
        Seq,
        _body_grammar,
        _bounded_body,
        _inline,
        _key,
        _write,
    )

    bounds = Bounds(max_chars=max_chars) if max_chars is not None else None
    table = DEFAULT_TAGS if tags is None else tags
    rules, terminals = _bounded_body(*_body_grammar(table), bounds, table)
    terminals = {**terminals, "KEY": _key(vocabulary, terminals["KEY"])}
    element = rules["element"]
    names = [n.name for n in getattr(element, "items", (element,)) if isinstance(n, Ref)]
    formats: list[dict[str, Any]] = []
    for name in names:
        rule = rules[name]
        if not (isinstance(rule, Seq) and len(rule.items) >= 2):
            raise CharfmtError(f"element rule {name} is not <open> content <close>")
        opener, *content, closer = rule.items
        begin, end = (_inline(n, rules, terminals) for n in (opener, closer))
        if not (isinstance(begin, Lit) and isinstance(end, Lit)):
            raise CharfmtError(f"element rule {name} does not open and close with literals")
        body = _inline(Seq(tuple(content)), rules, terminals) if content else Lit("")
        formats.append({
            "type": "tag",
            "begin": begin.text,
            "content": {"type": "regex", "pattern": _write(body, _ECMA, str)},
            "end": end.text,
        })  # fmt: skip
    return formats


@constrains
def structural_tag(
    *,
    think: bool = True,
    body: str = "reply",
    think_tokens: int | None = None,
    **constraints: Unpack[ReplyConstraints],
) -> dict[str, Any]:
    """XGrammar's ``structural_tag`` response format (vLLM, SGLang: ``response_format=...``).

    ``think``: the model first writes ``<think>`` free text ``</think>`` (at most
    ``think_tokens`` tokens where given), then must write the reply. ``body="reply"``: the
    reply is the JSON envelope (the GBNF export, bounded as ``grammar`` bounds it);
    ``body="elements"``: the reply is a bare ``C`` body, one or more tag elements separated by
    ``\\n``, each element an XGrammar ``tag`` whose content is its regular expression (read it
    with ``charfmt.body.parse_body("C", text)``); only ``max_chars`` bounds it (a budget, ``max_chats`` or
    ``max_elements`` is a ``CharfmtError``: the elements' count cannot be bounded there).
    """
    c = constraints_of("structural_tag", constraints)
    reply: dict[str, Any]
    if body == "reply":
        from charfmt.constrain.export import grammar  # noqa: PLC0415 (import cost: every CLI command loads this module)

        reply = {"type": "grammar", "grammar": grammar("gbnf", **constraints)}
    elif body == "elements":
        unbounded = [k for k in ("max_tokens", "max_chats", "max_elements") if constraints.get(k) is not None]
        if unbounded:  # (tags_with_separator counts no elements: a budget would be dropped in silence)
            raise CharfmtError(
                f"structural_tag(body='elements') cannot hold {unbounded[0]}: XGrammar's tags_with_separator bounds"
                " each element's length (max_chars), not how many there are; use body='reply' (the bounded grammar)"
            )
        reply = {
            "type": "tags_with_separator",
            "tags": _element_formats(c.vocabulary, c.max_chars, c.tags),
            "separator": "\n",
            "at_least_one": True,
        }
    else:
        raise CharfmtError(f"unknown structural tag body {body!r}; expected 'reply' or 'elements'")
    if not think:
        return {"type": "structural_tag", "format": reply}
    free: dict[str, Any] = {"type": "any_text"}
    if think_tokens is not None:
        free["max_tokens"] = think_tokens
    thinking = {"type": "tag", "begin": "<think>", "content": free, "end": "</think>"}
    return {
        "type": "structural_tag",
        "format": {"type": "sequence", "elements": [thinking, {"type": "const_string", "value": "\n"}, reply]},
    }


# --- XGrammar -----------------------------------------------------------------------------------


def load_xgrammar() -> Any:
    """The ``xgrammar`` module, or ``EngineMissing`` saying how to install it."""
    try:
        # transformers first: importing xgrammar first goes xgrammar -> transformers ->
        # huggingface_hub -> xgrammar (partly initialised) and fails with huggingface_hub 2.x.
        importlib.import_module("transformers")
        return importlib.import_module("xgrammar")
    except ImportError as exc:
        raise EngineMissing(
            f"XGrammar is not installed ({exc}): pip install 'charfmt[xgrammar]' "
            "(xgrammar needs torch; the CPU build: pip install torch==2.13.0)"
        ) from exc


def xgrammar_tokenizer_info(encoding: Any) -> Any:
    """An ``xgrammar.TokenizerInfo`` for a tiktoken ``encoding`` (raw byte tokens, ``<|endoftext|>`` stops)."""
    xgr = load_xgrammar()
    vocab: list[bytes] = [b""] * encoding.n_vocab
    for token, rank in encoding._mergeable_ranks.items():
        vocab[rank] = token
    stops: list[int] = []
    for name, rank in encoding._special_tokens.items():
        vocab[rank] = name.encode()
        if name == "<|endoftext|>":
            stops.append(rank)
    return xgr.TokenizerInfo(vocab, xgr.VocabType.RAW, vocab_size=encoding.n_vocab, stop_token_ids=stops)


# --- llama.cpp ----------------------------------------------------------------------------------


def load_llama_cpp() -> Any:
    """The ``llama_cpp`` module, or ``EngineMissing`` saying how to install it (portable build flags)."""
    try:
        return importlib.import_module("llama_cpp")
    except ImportError as exc:
        raise EngineMissing(f"llama-cpp-python is not installed ({exc}); install it with: {LLAMA_INSTALL}") from exc


def llguidance_installed() -> bool:
    """Whether llguidance can be imported (``charfmt[engines]``)."""
    return importlib.util.find_spec("llguidance") is not None


def local_constraint(grammar: Grammar) -> dict[str, str]:
    """How llama.cpp in this process is held to ``grammar`` (``charfmt.constrain.export.reply_grammar``), for
    ``charfmt chat --model`` and ``charfmt serve --model`` alike: ``{"lark": ...}``, sampled through
    llguidance, wherever it is installed (it keeps the speed of free generation, where llama.cpp's
    GBNF sampler checks every token of the vocabulary at every step); ``{"grammar": <GBNF>}`` otherwise.
    ``LocalModel.chunks`` takes either (``lark=``, ``gbnf=``)."""
    from charfmt.constrain.export import gbnf_text, lark_text  # noqa: PLC0415 (import cost: every CLI command loads this module)

    if llguidance_installed():
        return {"lark": lark_text(grammar)}
    return {"grammar": gbnf_text(grammar)}


def llama_grammar(gbnf: str) -> Any:
    """A ``llama_cpp.LlamaGrammar`` from GBNF text (``charfmt.grammar("gbnf", ...)``)."""
    return load_llama_cpp().LlamaGrammar.from_string(gbnf, verbose=False)


def llguidance_processor(llm: Any, grammar: str) -> Callable[[Any, Any], Any]:
    """A llama-cpp-python ``logits_processor`` that constrains sampling to ``grammar`` (Lark) with llguidance.

    llama-cpp-python's GBNF sampler checks the grammar against every token of the vocabulary
    at every step (262,144 tokens for Gemma 3); llguidance computes the allowed tokens as a
    bitmask, skipping whole slices of the vocabulary at once (``charfmt.constrain.export.llguidance_slices``).
    One processor serves one reply: build a new one per generation.
    """
    try:
        llguidance = importlib.import_module("llguidance")
        lnp = importlib.import_module("llguidance.numpy")
        lcpp = importlib.import_module("llguidance.llamacpp")
    except ImportError as exc:
        raise EngineMissing(f"llguidance is not installed ({exc}): pip install 'charfmt[engines]'") from exc
    from charfmt.constrain.export import llguidance_slices  # noqa: PLC0415 (import cost: every CLI command loads this module)

    tokenizer = _llg_tokenizers.get(id(llm))
    if tokenizer is None:
        vocab = load_llama_cpp().llama_model_get_vocab(llm.model)
        with warnings.catch_warnings():  # llguidance still calls llama_token_get_attr, once per token
            warnings.simplefilter("ignore", DeprecationWarning)
            tokenizer = lcpp.lltokenizer_from_vocab(vocab, slices=llguidance_slices())
        _llg_tokenizers[id(llm)] = tokenizer
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
    if matcher.is_error():
        raise CharfmtError(f"llguidance cannot read the grammar: {matcher.get_error()}")
    n_vocab = int(llm.n_vocab())
    mask = lnp.allocate_token_bitmask(1, tokenizer.vocab_size)

    def allowed() -> Any:
        lnp.fill_next_token_bitmask(matcher, mask, 0)
        return unpack_bits(mask[0].view("uint8"))[:n_vocab]

    return _masking_processor(matcher.consume_token, allowed)


_llg_tokenizers: dict[int, Any] = {}


def xgrammar_processor(llm: Any, gbnf: str) -> Callable[[Any, Any], Any]:
    """A llama-cpp-python ``logits_processor`` that constrains sampling to ``gbnf`` with XGrammar (the engine
    vLLM and SGLang run by default), over the model's own vocabulary: what those servers would allow.

    Pass it to ``LocalModel.chunks(processor=...)``. One processor serves one reply.
    """
    xgr = load_xgrammar()
    compiler = _xgr_compilers.get(id(llm))
    if compiler is None:
        llama_cpp = load_llama_cpp()
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        size = int(llm.n_vocab())
        pieces = [bytes(llm.detokenize([i], special=True)) for i in range(size)]
        stops = [i for i in range(size) if llama_cpp.llama_vocab_is_eog(vocab, i)]
        info = xgr.TokenizerInfo(pieces, xgr.VocabType.RAW, vocab_size=size, stop_token_ids=stops)
        compiler = _xgr_compilers[id(llm)] = xgr.GrammarCompiler(info)
    matcher = xgr.GrammarMatcher(compiler.compile_grammar(gbnf))
    n_vocab = int(llm.n_vocab())
    mask = xgr.allocate_token_bitmask(1, n_vocab)

    def allowed() -> Any:
        matcher.fill_next_token_bitmask(mask)
        return unpack_bits(mask[0].numpy().view("uint8"))[:n_vocab]

    return _masking_processor(matcher.accept_token, allowed)


_xgr_compilers: dict[int, Any] = {}


def _masking_processor(feed: Callable[[int], Any], allowed: Callable[[], Any]) -> Callable[[Any, Any], Any]:
    """A ``logits_processor`` over a grammar matcher: each token sampled since the last call is fed to the
    matcher (``feed``), then every token the matcher does not allow next (``allowed``: one bool per token)
    gets a score of minus infinity. The first call's ``input_ids`` are the prompt, which is never fed."""
    seen: list[int] = []

    def process(input_ids: Any, scores: Any) -> Any:
        if not seen:
            seen.append(len(input_ids))  # the prompt ends here
        for token in input_ids[seen[0] :]:
            feed(int(token))
        seen[0] = len(input_ids)
        scores[~allowed()] = float("-inf")
        return scores

    return process


def unpack_bits(bits: Any) -> Any:
    """llguidance's token bitmask (little-endian 32-bit words) as one boolean per token."""
    np = importlib.import_module("numpy")
    return np.unpackbits(bits, bitorder="little").astype(bool)
