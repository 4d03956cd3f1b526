"""The vocabulary policy: what an emotion key the vocabulary does not know becomes."""

from __future__ import annotations

from typing import NamedTuple

from charfmt.models import Vocabulary


class Decision(NamedTuple):
    """The key to keep (``None``: none), and the diagnostic that explains the decision.

    (A named tuple: a dataclass costs ten times as much to define, at every start.)
    """

    key: str | None
    code: str | None = None
    message: str = ""


def apply_vocabulary(word: str, vocabulary: Vocabulary | None) -> Decision:
    """Decide what ``word`` (written in ``<emo>``) becomes under the vocabulary's policy.

    Case and surrounding whitespace never make a key unknown. ``error`` accepts keys
    only; every other policy also accepts aliases, then: ``alias`` rejects the rest,
    ``nearest`` takes the closest key if one is close enough, ``fallback`` takes the
    fallback key, ``keep`` keeps the word as written.
    """
    if vocabulary is None:
        return Decision(word)
    policy = vocabulary.policy
    folded = word.strip().casefold()
    exact = next((k for k in vocabulary.keys if k.casefold() == folded), None)
    if exact is not None:
        if exact == word:
            return Decision(exact)
        return Decision(exact, "CF302", f"emotion {word!r} read as {exact!r}")
    key = vocabulary.resolve(word) if policy != "error" else None
    if key is not None:
        return Decision(key, "CF302", f"emotion {word!r} is an alias of {key!r}")
    known = ", ".join(vocabulary.keys)
    if policy == "nearest":
        import difflib  # noqa: PLC0415 (only the nearest policy needs it)

        words = {w.casefold(): e.key for e in vocabulary.emotions for w in (e.key, *e.aliases)}
        close = difflib.get_close_matches(folded, list(words), n=1, cutoff=0.6)
        if close:
            return Decision(
                words[close[0]], "CF303", f"emotion {word!r} is not in the vocabulary; nearest is {words[close[0]]!r}"
            )
    if policy == "fallback" and vocabulary.fallback is not None:
        return Decision(
            vocabulary.fallback, "CF304", f"emotion {word!r} is not in the vocabulary; using {vocabulary.fallback!r}"
        )
    if policy == "keep":
        return Decision(word.strip(), "CF305", f"emotion {word!r} is not in the vocabulary; kept as written")
    return Decision(word.strip(), "CF301", f"emotion {word!r} is not in the vocabulary ({known})")
