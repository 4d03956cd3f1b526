"""Render prompts from Jinja templates (``prompts/``): system prompt, user block, provider requests.

Every ``{{ value }}`` a template prints is escaped for the tag language, so no
user-supplied string can open or close a tag; only the filters ``body``,
``user_block`` and ``dumps`` write markup, and they write it with the same code the
parser reads.

No value can forge a turn either: a ``#`` that would start a line (after a line
break of any kind, ``\\r``, U+0085 and U+2028 included) is written ``&#35;``, and
the ``[``/``<`` of a chat-template control string (``[INST]``, ``<|im_start|>``,
``<|eot_id|>``, ``<start_of_turn>``, ``</s>``... see :data:`CONTROL_STRINGS`) as an
entity, so the only turn headers in ``render_text`` are the template's own. Both
are character references the user-block reader decodes, so
``parse_input(render_user_block(turn)) == turn`` still holds; replies go back as JSON
with the same characters written as ``\\u`` escapes, which JSON readers decode. An
emotion key cannot hold an escape: one that holds a line separator or a control
string is a ``TemplateError``.

Templates run sealed: in Jinja's immutable sandbox, on read-only views of the
character, turn and history (tuples, read-only mappings, records without methods
that load or mutate; ``_`` names are unreachable), so a template cannot change the
caller's objects, charfmt's tables or open files. Each render has an allocation
budget (:data:`MAX_RENDER_SIZE` characters or items): string and list growth
(``*``, ``+``, ``%``, ``~``, ``**``, ``format``, ``join``, ``center``, ``indent``,
``replace``...) is checked before it happens, and anything else that escapes a
template (``MemoryError``, ``RecursionError``, a filter applied to the wrong thing)
becomes a ``TemplateError``.

Token budgets use :func:`estimate_tokens` unless you pass ``counter=``; with
tiktoken installed, an exact counter for OpenAI models is::

    import tiktoken
    enc = tiktoken.get_encoding("cl100k_base")  # or tiktoken.encoding_for_model("gpt-4o")
    request = charfmt.render_messages(mio, history, turn, budget=4000,
                                      counter=lambda text: len(enc.encode(text)))
"""

from __future__ import annotations

import contextvars
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from functools import cache, update_wrapper
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import jinja2
from jinja2.compiler import CodeGenerator, Frame
from jinja2.filters import make_attrgetter
from jinja2.nodes import Concat
from jinja2.runtime import markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEscapeFormatter, SandboxedFormatter
from markupsafe import Markup
from pydantic import BaseModel

from charfmt._resources import resource_dir
from charfmt._token_bound import token_bound
from charfmt.character import Character, Exchange
from charfmt.diagnostics import CharfmtError
from charfmt.models import Chat, Reply, Segment, Vocabulary
from charfmt.schema import json_schema
from charfmt.tags import CHAT_TYPES, DEFAULT_TAGS, ELEMENT_SEPARATOR, TAGGED_TYPES, TagTable
from charfmt.userinput import UserChat, UserContext, UserTurn
from charfmt.writer import canonical_form, dumps, escape

PROVIDERS: Final = ("openai", "anthropic", "gemini")
Counter = Callable[[str], int]

MAX_RENDER_SIZE: Final = 1 << 24
"""What one render may allocate: characters of strings plus items of lists, about 16 million."""

_MAX_INT_BITS: Final = 1 << 16
"""The largest integer a template may compute, in bits."""

CONTROL_STRINGS: Final[tuple[str, ...]] = (
    # Mistral
    "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CONTENT]", "[THINK]", "[/THINK]",
    # ChatML (OpenAI, Qwen), Phi
    "<|im_start|>", "<|im_end|>", "<|im_sep|>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>",
    "<|end|>",
    # Llama 2 and 3
    "<s>", "</s>", "<<SYS>>", "<</SYS>>", "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
    "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>",
    # Gemma
    "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>",
)  # fmt: skip
"""Chat-template control strings no printed value may contain: raw completion servers
that parse special tokens in the prompt would read them as turn boundaries."""

_CONTROL: Final = re.compile("|".join(re.escape(s) for s in sorted(CONTROL_STRINGS, key=len, reverse=True)))
_LINE_BREAKS: Final = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""What ``str.splitlines`` (and so a reader of the prompt) takes for a line break."""
_LINE_LEADING_HASH: Final = re.compile(rf"(^|[{_LINE_BREAKS}])([\s\u00ad\u200b-\u200f\u2060-\u2064\ufeff]*)#")
"""A ``#`` that starts a line: after a line break (or at the start of a value) and only
blanks or invisible format characters."""
_KEY_UNSAFE: Final = re.compile(rf"[{_LINE_BREAKS}]|{_CONTROL.pattern}")
_JSON_LINE_BREAKS: Final = str.maketrans({c: f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"})


class TemplateError(CharfmtError):
    """A template is missing, invalid, uses an undefined variable or breaks the sandbox."""


class BudgetError(CharfmtError):
    """The system prompt and the new turn alone exceed the token budget."""


class Safe(str):
    """Text in the tag language already: templates print it as it is."""

    __slots__ = ()


# --- neutralising values ------------------------------------------------------------


def _defuse(escaped: str) -> str:
    """Text already escaped for the tag language, with no line-leading ``#`` or control string."""
    escaped = _LINE_LEADING_HASH.sub(r"\1\2&#35;", escaped)
    return _CONTROL.sub(lambda m: f"&#{ord(m.group()[0])};{m.group()[1:]}", escaped)


def _text(text: str) -> str:
    return _defuse(escape(text))


def _key(tag: str, key: str) -> str:
    # A key is written as it is (the grammar decodes no entity in it): refuse what cannot be defused.
    if _KEY_UNSAFE.search(key):
        raise TemplateError(
            f"<{tag}> key {key!r} holds a line separator or a chat-template control string; it cannot be sent"
        )
    return key


def _json(text: str) -> str:
    """JSON text with line separators and control strings written as ``\\u`` escapes (same value)."""
    text = text.translate(_JSON_LINE_BREAKS)
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()[0]):04x}{m.group()[1:]}", text)


def _reply_json(reply: Reply, tags: TagTable = DEFAULT_TAGS) -> str:
    """A reply of the history as the model sees it: canonical (for ``tags``), as the format it must write."""
    try:
        text = dumps(canonical_form(reply, tags))
    except (KeyError, ValueError) as e:
        raise TemplateError(f"cannot write a reply of the history: {type(e).__name__}: {e}") from None
    return _json(text)


def _body(kind: str, segments: Sequence[Segment]) -> str:
    """The body of one user chat, as ``writer.body_text`` writes it, with every value defused."""
    if kind not in TAGGED_TYPES:
        return _text(segments[0].text)
    parts = []
    for seg in segments:
        spec = DEFAULT_TAGS.get(seg.tag)
        opener, closer = (spec.open, spec.close) if spec is not None else (f"<{seg.tag}>", f"</{seg.tag}>")
        content = _key(seg.tag, seg.text) if spec is not None and spec.content == "key" else _text(seg.text)
        parts.append(f"{opener}{content}{closer}")
    return ELEMENT_SEPARATOR.join(parts)


_LINE_ESCAPES: Final = str.maketrans({c: f"&#{ord(c)};" for c in "\t\n\r\x85\u2028\u2029"})
"""The line filter writes a value on one line (text holds no other control character)."""


def _finalize(value: Any) -> Any:
    # Jinja calls this on every {{ ... }} value: escape and defuse anything that is not Safe.
    if isinstance(value, Safe):
        return value
    return _text(value if isinstance(value, str) else str(value))


# --- token estimate -----------------------------------------------------------------


def estimate_tokens(text: str) -> int:
    """Default token counter: never fewer tokens than cl100k makes of ``text``, whatever the text.

    An upper bound computed without the vocabulary (``charfmt._token_bound``): runs of
    one character, laughter, digits, emoji and random letters included. The price is
    an estimate well above ordinary text (1.2 to 2.2 times cl100k on charfmt's prompts,
    about 2.5 on English prose, 2.3 on Japanese, 3 on Russian):
    pass your tokenizer's counter for exact budgets (see the module docstring).
    """
    return token_bound(text)


# --- read-only views for templates ------------------------------------------------------


class _Record:
    """A read-only record of a model's fields, as templates see it; ``_`` names are out of their reach."""

    __slots__ = ("_fields", "_source")

    def __init__(self, fields: Mapping[str, Any], source: Any) -> None:
        object.__setattr__(self, "_fields", MappingProxyType(dict(fields)))
        object.__setattr__(self, "_source", source)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self._source).__name__} is read-only in templates")

    def __bool__(self) -> bool:
        return bool(self._source)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Record) and self._source == other._source

    __hash__ = None  # type: ignore[assignment]  # equal views of equal models; unhashable like the lists inside

    def __repr__(self) -> str:
        return f"{type(self._source).__name__}({', '.join(f'{k}={v!r}' for k, v in self._fields.items())})"


@cache
def _record_class(model: type) -> type[_Record]:
    """A record class named after ``model``, so template errors say ``Character``, not ``_Record``."""
    return type(model.__name__, (_Record,), {"__slots__": (), "__doc__": f"A read-only view of {model.__name__}."})


class _Method:
    """A read-only method of a model, callable from templates; what it returns is a view too."""

    __slots__ = ("_function",)
    _function: Callable[..., Any]

    def __init__(self, function: Callable[..., Any]) -> None:
        object.__setattr__(self, "_function", function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _view(self._function(*args, **kwargs))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("read-only")


_EXTRA: Final[Mapping[type, tuple[str, ...]]] = MappingProxyType(
    {
        Character: ("vocabulary",),
        Vocabulary: ("keys", "resolve"),
        Chat: ("texts",),
        UserContext: ("lines",),
    }
)
"""Properties and read-only methods templates may use, beyond a model's fields."""


def _view(value: Any) -> Any:
    """``value`` as templates see it: models as records, lists as tuples, dicts as read-only mappings."""
    if isinstance(value, BaseModel):
        fields = {name: _view(getattr(value, name)) for name in type(value).model_fields}
        for name in _EXTRA.get(type(value), ()):
            attribute = getattr(value, name)
            fields[name] = _Method(attribute) if callable(attribute) else _view(attribute)
        return _record_class(type(value))(fields, value)
    if isinstance(value, (list, tuple)):
        return tuple(_view(v) for v in value)
    if isinstance(value, Mapping):
        return MappingProxyType({k: _view(v) for k, v in value.items()})
    return value


def _source(value: Any, kind: type | tuple[type, ...], filter_name: str) -> Any:
    source = value._source if isinstance(value, _Record) else value
    if not isinstance(source, kind):
        raise TemplateError(f"the {filter_name} filter does not apply to {type(source).__name__}")
    return source


# --- the allocation budget ------------------------------------------------------------


class _TooLarge(jinja2.exceptions.SecurityError):
    """A template tried to build more than the render's allocation budget."""


class _Budget:
    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_RENDER_SIZE

    def check(self, size: int, what: str) -> None:
        if size > self.left:
            raise _TooLarge(f"{what} would exceed the render's size limit of {MAX_RENDER_SIZE:,}")

    def charge(self, size: int, what: str) -> None:
        self.check(size, what)
        self.left -= size


_BUDGET: Final[contextvars.ContextVar[_Budget | None]] = contextvars.ContextVar("charfmt_render_budget", default=None)


def _budget() -> _Budget:
    budget = _BUDGET.get()
    if budget is None:  # called outside a render (a template function kept by the caller)
        raise _TooLarge("template functions run only while rendering")
    return budget


def _size(value: Any, cap: int) -> int:
    """Characters plus items in ``value``, counting shared parts each time; stops once over ``cap``."""
    total = 0
    stack = [value]
    while stack and total <= cap:
        item = stack.pop()
        if isinstance(item, (str, bytes, bytearray)):
            total += len(item)
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += len(item)
            stack.extend(item)
        elif isinstance(item, Mapping):
            total += len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        else:
            total += 1
    return total


def _measure(value: Any) -> int:
    return _size(value, _budget().left)


def _charge(value: Any, what: str) -> Any:
    _budget().charge(_measure(value), what)
    return value


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


_PERCENT_SPEC: Final = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]")


def _percent_size(template: str, args: Any) -> int:
    """An upper bound on the length of ``template % args``."""
    values = args if isinstance(args, tuple) else (args,)
    widest_arg = max((abs(v) for v in values if isinstance(v, int)), default=0)
    widths = 0
    for m in _PERCENT_SPEC.finditer(template):
        for number in m.groups():
            if number == "*":
                widths += widest_arg
            elif number:
                widths += int(number) if len(number) < 12 else MAX_RENDER_SIZE + 1
    return len(template) + widths + 8 * _measure(args)


def _str_method_size(subject: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """An upper bound on what ``subject.name(*args, **kwargs)`` returns, for the methods that grow text."""
    arg = args[0] if args else None
    if name in ("center", "ljust", "rjust", "zfill"):
        return max(len(subject), _int(arg if arg is not None else kwargs.get("width")))
    if name == "expandtabs":
        tab = args[0] if args else kwargs.get("tabsize", 8)
        tabs: int = subject.count("\t" if isinstance(subject, str) else b"\t")
        return len(subject) + tabs * max(_int(tab), 0)
    if name == "replace" and len(args) >= 2:
        old, new = args[0], args[1]
        count = subject.count(old) if old else len(subject) + 1
        return len(subject) + count * len(new)
    if name == "translate" and isinstance(arg, Mapping):
        return len(subject) * (1 + max((_measure(v) for v in arg.values()), default=0))
    return None


_FILTER_SIZES: Final[Mapping[str, Callable[..., int]]] = MappingProxyType(
    {
        "center": lambda value, width=80: max(len(str(value)), _int(width)),
        "indent": lambda s, width=4, *_, **__: (
            len(str(s)) + (str(s).count("\n") + 1) * (len(width) if isinstance(width, str) else _int(width))
        ),
        "replace": lambda s, old, new, count=None: _str_method_size(str(s), "replace", (str(old), str(new)), {}) or 0,
        "format": lambda value, *args, **kwargs: _percent_size(str(value), kwargs or args),
        "wordwrap": lambda s, width=79, breaks=True, wrapstring=None, *_, **__: (
            len(str(s)) + (len(str(s)) + 1) * len(wrapstring or "\n")
        ),
        "batch": lambda value, linecount, fill_with=None: _int(linecount) + _measure(value),
        "slice": lambda value, slices, fill_with=None: _int(slices) + _measure(value),
        "tojson": lambda value, indent=None: 8 * _measure(value) * (1 + _int(indent)) * (1 + _int(indent)),
        "urlize": lambda value, trim_url_limit=None, nofollow=False, target=None, rel=None, extra_schemes=None: (
            3 * len(str(value)) * (40 + len(str(target or "")) + len(str(rel or "")))
        ),
    }
)
"""Upper bounds on what the filters that can grow a value by more than a constant factor return."""


def _bounded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    estimate = _FILTER_SIZES.get(name)

    def bounded(*args: Any, **kwargs: Any) -> Any:
        # Filters marked pass_context/pass_environment get that first; the value follows.
        values = args[1:] if getattr(function, "jinja_pass_arg", None) is not None else args
        if name == "join":
            value, rest = list(values[0]), values[1:]
            separator = rest[0] if rest else kwargs.get("d", "")
            attribute = rest[1] if len(rest) > 1 else kwargs.get("attribute")
            getter = make_attrgetter(_environment_of(args), attribute) if attribute is not None else None
            parts = [getter(v) for v in value] if getter is not None else value
            size = sum(_measure(v) for v in parts) + len(str(separator)) * len(parts)
            _budget().check(size, "join")
            args = (*args[: len(args) - len(values)], value, *rest)
        elif name == "sum":
            value = list(values[0])
            _budget().check(_measure(value) + _measure(kwargs.get("start", values[2] if len(values) > 2 else 0)), name)
            args = (*args[: len(args) - len(values)], value, *values[1:])
        elif estimate is not None:
            _budget().check(estimate(*values, **kwargs), name)
        return _charge(function(*args, **kwargs), f"the {name} filter")

    return update_wrapper(bounded, function)


def _environment_of(args: tuple[Any, ...]) -> jinja2.Environment:
    # jinja's join takes the eval context first (pass_eval_context), which knows the environment.
    first = args[0] if args else None
    environment = first if isinstance(first, jinja2.Environment) else getattr(first, "environment", None)
    if not isinstance(environment, jinja2.Environment):
        raise TypeError("join: no environment")
    return environment


class _BoundedFormatter(SandboxedFormatter):
    def format_field(self, value: Any, format_spec: str) -> Any:
        for number in re.findall(r"\d+", format_spec):
            _budget().check(int(number) if len(number) < 12 else MAX_RENDER_SIZE + 1, "a format width")
        return _charge(super().format_field(value, format_spec), "str.format")


class _BoundedEscapeFormatter(_BoundedFormatter, SandboxedEscapeFormatter):
    pass


class _CodeGenerator(CodeGenerator):
    def visit_Concat(self, node: Concat, frame: Frame) -> None:
        # `a ~ b` goes through the environment so that its size is checked before joining.
        self.write("environment.bounded_join((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("), context.eval_ctx.autoescape)")


def _concat(parts: Iterable[Any]) -> str:
    """Jinja's ``concat`` (template output, macro and block bodies), within the budget."""
    budget = _budget()
    kept = []
    for part in parts:
        budget.charge(len(part), "the template's output")
        kept.append(part)
    return "".join(kept)


def _power_too_large(base: Any, exponent: Any) -> bool:
    if not (isinstance(base, int) and isinstance(exponent, int)) or abs(base) <= 1 or exponent <= 0:
        return False
    return base.bit_length() * min(exponent, _MAX_INT_BITS + 1) > _MAX_INT_BITS


class _Sandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with every way to grow a string or list checked against the budget."""

    code_generator_class = _CodeGenerator
    intercepted_binops = frozenset({"*", "+", "%", "**"})
    concat = staticmethod(_concat)

    def bounded_join(self, parts: tuple[Any, ...], autoescape: bool) -> str:
        _budget().check(sum(_measure(p) for p in parts), "~")
        joined: str = markup_join(parts) if autoescape else str_join(parts)
        _charge(joined, "~")
        return joined

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        budget = _budget()
        if operator == "*":
            if isinstance(left, int) and isinstance(right, int):
                if left.bit_length() + right.bit_length() > _MAX_INT_BITS:
                    raise _TooLarge("an integer product would exceed the size limit")
            elif isinstance(right, int) or isinstance(left, int):
                count, seq = (right, left) if isinstance(right, int) else (left, right)
                if count > 0:
                    budget.check(_size(seq, budget.left // count + 1) * count, "*")
        elif operator == "+":
            budget.check(_measure(left) + _measure(right), "+")
        elif operator == "%" and isinstance(left, (str, bytes)):
            budget.check(_percent_size(str(left), right), "%")
        elif operator == "**" and _power_too_large(left, right):
            raise _TooLarge("a power would exceed the size limit")
        return _charge(super().call_binop(context, operator, left, right), operator)

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        subject = getattr(__obj, "__self__", None)
        if isinstance(subject, (str, bytes)):
            name = getattr(__obj, "__name__", "")
            if name == "join" and args:
                items = list(args[0])
                _budget().check(sum(_measure(v) for v in items) + len(subject) * len(items), "join")
                args = (items, *args[1:])
            else:
                size = _str_method_size(subject, name, args, kwargs)
                if size is not None:
                    _budget().check(size, name)
        elif __obj is __self.globals.get("lipsum"):
            options = dict(zip(("n", "html", "min", "max"), args, strict=False)) | kwargs
            _budget().check(_int(options.get("n", 5)) * _int(options.get("max", 100)) * 16, "lipsum")
        return _charge(super().call(__context, __obj, *args, **kwargs), "a call")

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        subject: str = value.__self__
        formatter = (
            _BoundedEscapeFormatter(self, escape=subject.escape)
            if isinstance(subject, Markup)
            else _BoundedFormatter(self)
        )
        is_format_map = value.__name__ == "format_map"

        def bounded(*args: Any, **kwargs: Any) -> str:
            if is_format_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                return type(subject)(formatter.vformat(subject, (), args[0]))
            return type(subject)(formatter.vformat(subject, args, kwargs))

        return update_wrapper(bounded, value)


class _OwnFirst(jinja2.BaseLoader):
    """The user's folder first, then charfmt's templates; a template added to the folder later wins at once.

    Jinja keeps a compiled template while its ``uptodate`` says so; for one taken from
    charfmt's defaults that also checks the user's folder still has no file of the name.
    """

    def __init__(self, user_dir: str | None) -> None:
        self.user_dir = user_dir
        self.defaults = jinja2.FileSystemLoader(str(resource_dir("prompts")))
        self.own = None if user_dir is None else jinja2.FileSystemLoader(user_dir)

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str | None, Any]:
        if self.own is not None:
            with suppress(jinja2.TemplateNotFound):
                return self.own.get_source(environment, template)
        source, filename, uptodate = self.defaults.get_source(environment, template)
        own = self.user_dir
        if own is None:
            return source, filename, uptodate
        shadow = os.path.join(own, *template.split("/"))
        return source, filename, lambda: not os.path.exists(shadow) and uptodate()


@cache
def _environment(user_dir: str | None) -> _Sandbox:
    env = _Sandbox(
        loader=_OwnFirst(user_dir),
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["body"] = lambda chat: Safe(_body(*_chat_parts(chat)))
    env.filters["dumps"] = lambda reply, tags=DEFAULT_TAGS: Safe(
        _reply_json(_source(reply, Reply, "dumps"), _source(tags, TagTable, "dumps"))
    )
    env.filters["line"] = lambda value: Safe(_defuse(escape(str(value)).translate(_LINE_ESCAPES)))
    env.filters["user_block"] = lambda turn: Safe(_render("user.j2", user_dir, turn=_turn_view(turn)))
    for name, function in list(env.filters.items()):
        env.filters[name] = _bounded_filter(name, function)
    return env


def _turn_view(turn: Any) -> Any:
    source = _source(turn, UserTurn, "user_block")
    return turn if isinstance(turn, _Record) else _view(source)


def _chat_parts(chat: Any) -> tuple[str, Sequence[Segment]]:
    source: Chat | UserChat = _source(chat, (Chat, UserChat), "body")
    return source.type, source.segments


def _render(name: str, templates: str | None, **variables: Any) -> str:
    """Render one template; every failure becomes a ``TemplateError`` naming it."""
    outer = _BUDGET.get()
    token = _BUDGET.set(_Budget()) if outer is None else None
    try:
        return _environment(templates).get_template(name).render(**variables)
    except CharfmtError:
        raise
    except jinja2.UndefinedError as e:
        raise TemplateError(f"template {name}: undefined variable: {e.message}") from None
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"template {e.name or name}, line {e.lineno}: {e.message}") from None
    except jinja2.TemplateNotFound as e:
        raise TemplateError(f"template {e.name} not found in the templates folder") from None
    except (jinja2.exceptions.SecurityError, OverflowError, MemoryError) as e:
        raise TemplateError(f"template {name}: blocked by the sandbox: {str(e) or type(e).__name__}") from None
    except RecursionError:
        raise TemplateError(f"template {name}: blocked by the sandbox: recursion too deep") from None
    except jinja2.TemplateError as e:
        raise TemplateError(f"template {name}: {e}") from None
    except Exception as e:  # a filter or method applied to the wrong value, a failing operator...
        raise TemplateError(f"template {name}: {type(e).__name__}: {e}") from None
    finally:
        if token is not None:
            _BUDGET.reset(token)


def _dir(templates: str | Path | None) -> str | None:
    if templates is None:
        return None
    path = Path(templates)
    if not path.is_dir():
        raise TemplateError(f"templates folder {path} does not exist")
    return str(path.resolve())


def _system(character: Any, folder: str | None, tags: TagTable) -> str:
    chat_types = MappingProxyType(dict(CHAT_TYPES))
    return _render("system.j2", folder, character=character, tags=tags, chat_types=chat_types)


def render_system(character: Character, *, templates: str | Path | None = None) -> str:
    """The system prompt for ``character`` (``prompts/system.j2``), teaching its tags (``character.tags``) by role."""
    return _system(_view(character), _dir(templates), character.tags)


def render_user_block(turn: UserTurn, *, templates: str | Path | None = None) -> str:
    """One user turn in the tag language (``prompts/user.j2``); ``parse_input`` reads it back."""
    return _render("user.j2", _dir(templates), turn=_view(turn))


def _fit(
    system: str,
    history: Sequence[Exchange],
    turn_text: str,
    *,
    budget: int | None,
    counter: Counter,
    folder: str | None,
    tags: TagTable = DEFAULT_TAGS,
) -> list[tuple[str, str]]:
    """History as (user text, reply text) pairs, oldest whole exchanges dropped to fit ``budget``."""
    pairs = [(_render("user.j2", folder, turn=_view(ex.user)), _reply_json(ex.reply, tags)) for ex in history]
    if budget is None:
        return pairs
    fixed = counter(system) + counter(turn_text)
    if fixed > budget:
        raise BudgetError(f"the system prompt and the new turn need {fixed} tokens; the budget is {budget}")
    costs = [counter(u) + counter(r) for u, r in pairs]
    total = fixed + sum(costs)
    start = 0
    while total > budget:
        total -= costs[start]
        start += 1
    return pairs[start:]


def render_messages(
    character: Character,
    history: Sequence[Exchange],
    user_turn: UserTurn,
    *,
    provider: str = "openai",
    templates: str | Path | None = None,
    budget: int | None = None,
    counter: Counter = estimate_tokens,
    structured: bool = False,
) -> dict[str, Any]:
    """The request body (without the model name) for ``provider``'s chat API.

    ``openai``: ``{"messages": [...]}``; ``anthropic``: ``{"system": ..., "messages": [...]}``;
    ``gemini``: ``{"system_instruction": ..., "contents": [...]}`` with role ``model``.
    Past replies go back in canonical form. With ``budget``, the oldest whole
    exchanges are dropped until ``counter`` says the request fits. ``structured``
    adds the provider's structured-output setting with ``json_schema(provider)`` for
    the character's vocabulary (OpenAI enforces the emotion keys by pattern; the
    others are told them in the body's description).
    """
    if provider not in PROVIDERS:
        raise CharfmtError(f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)}")
    folder = _dir(templates)
    system = _system(_view(character), folder, character.tags)
    turn_text = _render("user.j2", folder, turn=_view(user_turn))
    pairs = _fit(system, history, turn_text, budget=budget, counter=counter, folder=folder, tags=character.tags)
    turns: list[tuple[str, str]] = []
    for user_text, reply_text in pairs:
        turns += [("user", user_text), ("assistant", reply_text)]
    turns.append(("user", turn_text))
    schema = json_schema(provider, vocabulary=character.vocabulary, tags=character.tags) if structured else None
    if provider == "openai":
        request: dict[str, Any] = {
            "messages": [{"role": "system", "content": system}] + [{"role": r, "content": t} for r, t in turns]
        }
        if schema is not None:
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "charfmt_reply", "strict": True, "schema": schema},
            }
        return request
    if provider == "anthropic":
        request = {"system": system, "messages": [{"role": r, "content": t} for r, t in turns]}
        if schema is not None:
            # output_config.format: the Messages API and its SDK (anthropic 2.x) take no "output_format"
            request["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        return request
    request = {
        "system_instruction": {"parts": [{"text": system}]},
        "contents": [{"role": "model" if r == "assistant" else "user", "parts": [{"text": t}]} for r, t in turns],
    }
    if schema is not None:
        request["generation_config"] = {"response_mime_type": "application/json", "response_schema": schema}
    return request


def render_text(
    character: Character,
    history: Sequence[Exchange],
    user_turn: UserTurn,
    *,
    templates: str | Path | None = None,
    budget: int | None = None,
    counter: Counter = estimate_tokens,
) -> str:
    """One prompt string for raw completion endpoints (``prompts/text.j2``).

    Turns are headed by ``### <name>`` lines that only the template writes: no value
    it prints can start a line with ``#`` or hold a chat-template control string.
    """
    folder = _dir(templates)
    character_view = _view(character)
    system = Safe(_system(character_view, folder, character.tags))
    history_view: tuple[Any, ...] = _view(list(history))
    turn_view = _view(user_turn)

    def render(start: int) -> str:
        return _render(
            "text.j2", folder, character=character_view, system=system, history=history_view[start:], turn=turn_view
        )

    if budget is None:
        return render(0)
    # Fewer exchanges never make the prompt longer: find the oldest start that fits.
    lo, hi = 0, len(history)
    need = counter(render(hi))
    if need > budget:
        raise BudgetError(f"the system prompt and the new turn need {need} tokens; the budget is {budget}")
    while lo < hi:
        mid = (lo + hi) // 2
        if counter(render(mid)) <= budget:
            hi = mid
        else:
            lo = mid + 1
    return render(lo)
