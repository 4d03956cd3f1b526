"""Secrets written ``***`` wherever text leaves charfmt: API keys, bearer tokens and key-shaped strings.

An upstream's error may quote the key it was sent ("Incorrect API key provided: Bearer sk-…"),
an exception may hold a URL's ``?api_key=``, an access line a ``?token=``. :func:`redact`
is the one function every door applies (an error a client is sent, the console, the turn
log, ``charfmt chat``'s error lines): the secrets the caller knows (the configured key, the
``--token``) are hidden wherever they stand, and so is whatever has the shape of a key or a
credential, whoever's it is. What is kept says what was there: ``Bearer ***``, ``sk-***``,
``token=***``.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from typing import Final

HIDDEN: Final = "***"
"""What a secret is written as."""

MIN_ANYWHERE: Final = 8
"""A known secret this long is hidden wherever it stands, and wherever its first ``MIN_ANYWHERE`` characters
stand; a shorter one only as a whole word (``abc`` must not hide every ``abc`` of a message)."""

_REST: Final = r"[^\s'\"()\[\]{},;<>]*"
"""What may follow a secret's first characters and still be the secret (up to a space, a quote, a bracket)."""

_NAMES: Final = r"api[_-]?key|apikey|access[_-]?token|auth[_-]?token|token|secret|password|passwd"
"""The names a credential goes by in a query, a form or a JSON object."""

_SHAPES: Final[tuple[tuple[str, str, str], ...]] = (
    # (what it is, the part kept, the secret after it)
    (  # (credentials hold a digit or a symbol, or are long: "Bearer token", "Bearer ..." are words)
        "an Authorization scheme's credentials",
        r"\b(?i:bearer|basic)\s+",
        r"(?:(?=[A-Za-z0-9._~+/=-]*(?:[0-9_~+/=-]|\.[A-Za-z0-9]))[A-Za-z0-9._~+/=-]*[A-Za-z0-9_~+/=-]|[A-Za-z]{20,})",
    ),
    ("OpenAI, Anthropic, OpenRouter, DeepSeek", r"(?<![A-Za-z0-9_-])sk-", r"[A-Za-z0-9_*-]{8,}"),
    ("Google API", r"\bAIza", r"[0-9A-Za-z_-]{30,}"),
    ("GitHub", r"\b(?:gh[pousr]_|github_pat_)", r"[A-Za-z0-9_]{30,}"),
    ("Hugging Face", r"\bhf_", r"[A-Za-z0-9]{30,}"),
    ("Groq", r"\bgsk_", r"[A-Za-z0-9]{30,}"),
    ("xAI", r"\bxai-", r"[A-Za-z0-9]{30,}"),
    ("Slack", r"\bxox[abprs]-", r"[A-Za-z0-9-]{10,}"),
    ("AWS access key id", r"\b(?:AKIA|ASIA)", r"[0-9A-Z]{16}\b"),
    ("a JSON Web Token", r"\beyJ", r"[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    (
        "a key=value pair (a URL's query, a form)",
        rf"(?<![A-Za-z0-9])(?i:{_NAMES}|key)=",
        r"[^&\s\"',;<>]+",
    ),
    ("a JSON member", rf"\"(?i:{_NAMES})\"\s*:\s*\"", r"[^\"\\\s]+"),
    ("an API-key header", r"(?<![A-Za-z0-9-])(?i:x-api-key|api-key|x-goog-api-key):\s*", r"[^\s\"',;]+"),
)
"""Credentials by their shape, whoever's they are: what is kept of each (its scheme or prefix) and the secret."""

_SHAPED: Final = re.compile("|".join(f"(?P<k{i}>{keep}){secret}" for i, (_, keep, secret) in enumerate(_SHAPES)))


def _keep_prefix(m: re.Match[str]) -> str:
    kept = m.group(m.lastgroup) if m.lastgroup else ""
    return f"{kept}{HIDDEN}"


def _known(secrets: Iterable[str | None]) -> re.Pattern[str] | None:
    """One pattern for the known secrets (and their URL-encoded forms), longest first; None where there are none.

    A secret of ``MIN_ANYWHERE`` characters or more is found by its first ones too, with what follows them up to
    a space or a quote: a message cut short in the middle of the key (an error's first 300 characters) must not
    show the part it kept.
    """
    forms: set[str] = set()
    for secret in secrets:
        if secret and secret.strip():
            forms.update({secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)})
    if not forms:
        return None
    whole, starts = [], set()
    for form in sorted(forms, key=len, reverse=True):
        escaped = re.escape(form)
        if len(form) >= MIN_ANYWHERE:
            whole.append(escaped)
            starts.add(re.escape(form[:MIN_ANYWHERE]) + _REST)
        else:
            whole.append(rf"(?<![A-Za-z0-9_-]){escaped}(?![A-Za-z0-9_-])")
    return re.compile("|".join([*whole, *sorted(starts)]))


class Redactor:
    """:func:`redact` with a set of known secrets compiled once (a server's key and token)."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self._known = _known(secrets)

    def __call__(self, text: str) -> str:
        """``text`` with the known secrets and every key-shaped string written ``***``."""
        if self._known is not None:
            text = self._known.sub(HIDDEN, text)
        return _SHAPED.sub(_keep_prefix, text)


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with ``secrets`` and every key-shaped string (``Bearer …``, ``sk-…``, ``token=…``) written ``***``."""
    return Redactor(secrets)(text)
