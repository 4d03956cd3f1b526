"""The budgeted Jinja sandbox: Jinja's immutable sandbox, with every way to grow a string or list checked first.

Each render (``render_budget``) may allocate :data:`MAX_RENDER_SIZE` characters or items (a ``range`` made
counts its length, so loops over ranges in ranges end):
string and list growth (``*``, ``+``, ``%``, ``~``, ``**``, ``format``, ``join``,
``center``, ``indent``, ``replace``...) is checked against what is left before it
happens, and a template that asks for more fails with a ``SecurityError`` (which
``charfmt.prompt.render`` reports as a ``TemplateError``). ``bounded_filter`` wraps a filter so
its result is charged too.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import update_wrapper
from types import MappingProxyType
from typing import Any, Final

import jinja2
from jinja2.compiler import CodeGenerator, Frame
from jinja2.filters import make_attrgetter
from jinja2.nodes import Concat
from jinja2.runtime import markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEscapeFormatter, SandboxedFormatter
from markupsafe import Markup

MAX_RENDER_SIZE: Final = 1 << 24
"""What one render may allocate: characters of strings plus items of lists, about 16 million."""

_MAX_INT_BITS: Final = 1 << 16
"""The largest integer a template may compute, in bits."""


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
        if isinstance(item, (str, bytes, bytearray, range)):  # (a range: each step of a loop over it counts)
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


def bounded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
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


class Sandbox(ImmutableSandboxedEnvironment):
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


# --- one render's budget -------------------------------------------------------------------


@contextmanager
def render_budget() -> Iterator[None]:
    """A fresh allocation budget for one render; a render inside a render (a filter's) shares the outer one."""
    outer = _BUDGET.get()
    token = _BUDGET.set(_Budget()) if outer is None else None
    try:
        yield
    finally:
        if token is not None:
            _BUDGET.reset(token)
