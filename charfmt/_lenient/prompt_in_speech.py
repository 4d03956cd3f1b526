"""The prompt's own wording looped inside an element: the prompt imitated, not the character's words.

A small model that imitates its prompt sometimes does so inside the character's speech: ``<msg>A little more than a
chicken, but not much. Now you can eat! < as &lt; and > as &gt;. < as &lt; and > as &gt;, …</msg>`` (the prompt's ``In
text, write & as &amp;, < as &lt; and > as &gt;``, mangled and repeated; the sixteenth set's #62). The text of an
element is cut into clauses (at ``.``, ``,``, ``;``, ``!``, ``?``, ``…``); a clause is the prompt's when, compared
with its space, case and entities folded, it stands in the prompt's own lines (three words or more), and debris of it
when it holds markup marks (``<``, ``>``, ``&``, ``/``) and no word that is not the prompt's (``<as&gt;and>as&lt;``).
A run of such clauses is the prompt imitated — dropped (``CF631``), the character's words around it kept — when a
clause of the prompt's stands in it three times, or twice beside debris of its markup (looped), or it is a sentence of
its own (whole sentences, not a clause of one) whose clauses of the prompt's hold ``_LONG`` words (a sentence of the
prompt's, written out). A short phrase of the prompt's said once (``the default``, ``what the character says``) is the
character's to say, kept.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import Final

from charfmt._grammar.lexical import decode_entities
from charfmt._lenient.state import TOKEN, RawChat, Recovery

_CLAUSE: Final = re.compile(r"[^.,;!?…。，！？]*+[.,;!?…。，！？]*+")
"""A clause with the marks that end it."""
_ENDED: Final = re.compile(r"[.!?…。！？][\"'”’」』)]*\s*\Z")
"""A clause that ends a sentence."""
_MARKUP: Final = re.compile(r"[<>&/]")
_SPACE: Final = re.compile(r"\s+")
_GAP: Final = re.compile(r"[ \t]{2,}")
"""The spaces left where a run was dropped between two of the character's words."""
_WORDS_FROM: Final = 3
"""Words from which a clause standing in the prompt is its wording (fewer: anyone's)."""
_LOOPED: Final = 3
"""Times a clause of the prompt's stands in one run from which the run is the prompt looped; twice, with debris of
its markup beside it (twice alone: the character may say a phrase again, ``A retired combat robot, a retired combat
robot.``)."""
_LONG: Final = 8
"""Words of the prompt's, in one run said once, from which the run is its sentence written out."""


def prompt_in_speech(state: Recovery, rc: RawChat) -> None:
    """Each run of the prompt's wording looped (or a sentence of it written out) inside an element of ``rc``:
    dropped (``CF631``), the rest of the element's text kept."""
    told = state.told
    if told is None or not told.text:
        return
    prompt = _compact_prompt(told.text)
    kept = []
    for p in rc.pieces:
        runs = _runs(p.text, prompt, told.vocab)
        if not runs:
            kept.append(p)
            continue
        source = state.source.text[p.start : p.end]
        parts, pos = [], 0
        for a, b in runs:
            parts.append(p.text[pos:a])
            pos = b
            said = p.text[a:b].strip()
            start, end = _raw_span(source, p.text[:a].strip(), said, p.text[b:].strip())
            start, end = p.start + start, p.start + end
            message = f"the prompt's own wording looped inside an element: {said[:40]!r} dropped"
            state.note("CF631", message, start, end, rc.index)
        p.text = _GAP.sub(" ", "".join(parts) + p.text[pos:]).strip()
        if p.text:
            kept.append(p)
    rc.pieces = kept


def _raw_span(source: str, before: str, said: str, after: str) -> tuple[int, int]:
    """Where ``said`` stands in the element's raw ``source`` (escapes and entities written there): found as written,
    or between the text ``before`` and ``after`` it, each where found; else the whole element."""
    if (at := source.find(said)) >= 0:
        return at, at + len(said)
    start = source.find(before) if before else 0
    start = start + len(before) if start >= 0 else 0
    end = source.rfind(after, start) if after else len(source)
    end = end if end >= 0 else len(source)
    while start < end and source[start].isspace():
        start += 1
    while end > start and source[end - 1].isspace():
        end -= 1
    return start, end


@functools.lru_cache(maxsize=32)
def _compact_prompt(text: str) -> str:
    return _compact(text)


def _compact(text: str) -> str:
    return _SPACE.sub("", decode_entities(text).casefold())


def _runs(text: str, prompt: str, vocab: frozenset[str]) -> list[tuple[int, int]]:
    """The spans of ``text`` that are the prompt's wording looped or written out (``prompt``: its lines compacted)."""
    if len(text) < _WORDS_FROM * 2:
        return []
    clauses = [m for m in _CLAUSE.finditer(text) if m.group().strip()]
    kinds = [_kind(m.group(), prompt, vocab) for m in clauses]
    found: list[tuple[int, int]] = []
    k = 0
    while k < len(clauses):
        if kinds[k] is None:
            k += 1
            continue
        j = k
        while j < len(clauses) and kinds[j] is not None:
            j += 1
        theirs = [c for c in kinds[k:j] if c is not None and c[0]]
        most = max(Counter(c for c, _n in theirs).values(), default=0)
        debris = any(c is not None and not c[0] for c in kinds[k:j])
        looped = most >= _LOOPED or (most >= 2 and debris)
        whole = (k == 0 or _ENDED.search(clauses[k - 1].group())) and (
            j == len(clauses) or _ENDED.search(clauses[j - 1].group())
        )  # (a sentence of the prompt's written out, not a clause of one of the character's: the sixteenth's #106)
        if looped or (whole and sum(n for _c, n in theirs) >= _LONG):
            found.append((clauses[k].start(), clauses[j - 1].end()))
        k = j
    return found


def _kind(clause: str, prompt: str, vocab: frozenset[str]) -> tuple[str, int] | None:
    """A clause's compacted text and its words when it stands in the prompt (``_WORDS_FROM`` words or more), ``""``
    when it is debris of the prompt's markup (marks, and only the prompt's words), ``None`` when it is neither."""
    body = clause.strip().rstrip(".,;!?…。，！？").strip()
    found = TOKEN.findall(decode_entities(body).casefold())
    compact = _compact(body)
    if len(found) >= _WORDS_FROM and compact in prompt:
        return compact, len(found)
    if _MARKUP.search(body) and all(w in vocab for w in found):
        return "", 0
    return None
