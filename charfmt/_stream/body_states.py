"""The stream reader's states inside a chat's body: opening tags, text, keys, closing tags, the body's end.

Text goes out as deltas as soon as its characters are decided (an escape, an entity or a
tag cut by a chunk boundary waits for the next chunk); an emotion, an action or a cue goes
out whole, once its value is complete (``<emo>joy</emo>`` in one match where it can).
"""

from __future__ import annotations

import re

from charfmt._grammar.lexical import decode_text
from charfmt._lenient.words import unknown_sentence
from charfmt.diagnostics import in_body
from charfmt.tags import TAGGED_TYPES, TEXT_TAG
from charfmt.vocabulary import apply_vocabulary

from .envelope import Envelope
from .language import (
    BODY_END_MATCH,
    DEBRIS_RUN_MATCH,
    ENTITY_MATCH,
    ENVELOPE_MAX,
    ESCAPE,
    ESCAPE_STARTS,
    HIGH_SURROGATES,
    KEY_BAD,
    KEY_RUN_MATCH,
    NO_CLOSER,
    PLAIN_MATCH,
    SENTENCE_MARK,
    TEXT_BAD,
    TOKEN_MAX,
    XML_ENTITIES,
    no_separator,
    unescape,
)
from .state import AFTER, CHAT_END, CLOSE, KEY, TEXT, Held, SegmentEnd, SegmentStart


class Body(Envelope):
    """The body's states (each takes the input ``s`` at ``i``; see ``StreamParser``'s table)."""

    __slots__ = ()

    # -- the states ---------------------------------------------------------------------------------
    def _open(self, s: str, i: int) -> int:
        """A body's first element."""
        if s[i] == "<" and s.find(">", i) < 0:  # an opening tag, not complete yet
            return self._stall(s, i, TOKEN_MAX, ">")
        lang = self._lang
        whole = lang.first_whole if s[i + 1 : i + 2] in lang.whole_first else None
        return self._element(s, i, whole, lang.open, 1)

    def _after(self, s: str, i: int) -> int:
        """After an element: the separator and the next element, or the body's end."""
        if s[i] == '"':
            self._body_end()
            return i + 1
        if s.find(">", i) < 0:  # no tag is complete yet (every pattern needs its '>')
            if no_separator(s, i):
                raise Held  # no separator and tag can begin here
            # A separator cut short ('\\' or '\\n' at the end) waits for the next character, which says
            # whether a tag follows it (text there leaves the format); a tag begun, for its '>'.
            return self._stall(s, i, TOKEN_MAX, ">" if "<" in s[i : i + 3] else "")
        lang = self._lang
        whole = lang.sep_whole if s[i + 3 : i + 4] in lang.whole_first and s.startswith("\\n<", i) else None
        return self._element(s, i, whole, lang.sep_open, 2)

    def _in_text(self, s: str, i: int) -> int:
        """Text: a run of plain characters, an escape, an entity, the closing tag, the body's end."""
        c = s[i]
        if c not in '<"\\&':  # (where markup, an escape or an entity begins, no text does)
            m = PLAIN_MATCH(s, i)
            if m is None:
                raise Held  # a raw control character or a lone surrogate: not JSON text
            self._plain(m.group())
            return m.end()
        if c == "<":
            if self._closer is NO_CLOSER:
                raise Held  # markup in an I/E body
            if (j := self._close_element(s, i)) < 0:
                return self._stall(s, i, TOKEN_MAX, ">")
            return j
        if c == "\\":
            k = len(self._text)
            if (j := unescape(s, i, self._text, TEXT_BAD)) < 0 and (j := self._bad_escape(s, i)) < 0:
                return self._stall(s, i, TOKEN_MAX)
            if self._text[-1] == '"':
                return self._debris_after(s, i, j, k)
            if self._streams and "\n" in self._text[k:] and self._chat.tag != self.tags.speech.name:
                self._hold_lines(k)
            return j
        if c == "&":
            return self._entity(s, i)
        m = BODY_END_MATCH(s, i)  # c == '"'
        assert m is not None
        if m.end() == len(s):
            return self._stall(s, i, ENVELOPE_MAX)
        if s[m.end()] in ",]:":
            raise Held  # the batch reader may end the string here: it decides
        if s[m.end()] != "}":
            # An unescaped quote inside the text: the batch reader keeps it as text (CF607),
            # and so does the stream; close() adds the diagnostic.
            self._text.append('"')
            self._repair()
            return i + 1
        self._body_end()
        return i + 1

    def _debris_after(self, s: str, i: int, j: int, k: int) -> int:
        """A quote (an escape from ``s[i]`` to ``s[j]``; ``self._text[k:]``) that may begin JSON punctuation at the end
        of an element's text (``\\"}]}</>``: a reply the batch reader repairs drops it there, ``CF627``).

        The quote is text (``j``) where anything but ``}`` or ``]`` follows it, or the punctuation ends at the closing
        tag of a reply undamaged so far (read as it is); it waits one character (``_stall``) at a chunk's end, and the
        punctuation a tag cut or another closing tag follows, for the batch reader (``Held``).
        """
        if j < len(s) and s[j] not in "}]":
            return j
        m = DEBRIS_RUN_MATCH(s, j)
        end = len(s) if m is None else m.end()
        tag = self._close_tag
        if end < len(s) and not self._damaged and (s.startswith(tag, end) or (s[end] == '"' and not tag)):
            return j
        del self._text[k:]
        if end == len(s) or (len(s) - end < len(tag) and tag.startswith(s[end:])):
            return self._stall(s, i, TOKEN_MAX)
        raise Held

    def _plain(self, run: str) -> None:
        """A run of plain text of the open element: in one other than speech, what follows a sentence's end waits."""
        if self._sentences and (end := SENTENCE_MARK.search(run)) is not None:
            self._text.append(run[: end.end()])
            self._hold_lines(len(self._text))
            if end.end() < len(run):
                self._text.append(run[end.end() :])
        else:
            self._text.append(run)

    def _hold_lines(self, k: int) -> None:
        """A line break or a sentence's end in the text of an element other than speech (``self._text[k:]`` holds
        what follows it): the text before it is shown, the rest waits for the closing tag. Such an element left open
        ends at its line (the batch reader's ``CF721``), and one closed by the speech's closing tag (``<act>nods.
        Welcome!</msg>``) at its first sentence, the sentences after it speech: what follows the break or the
        sentence is the element's only once its own closing tag comes."""
        rest = self._text[k:]
        del self._text[k:]
        if self._text:
            self._emit_text()
        self._text.extend(rest)
        self._streams = self._live = self._sentences = False

    def _key(self, s: str, i: int) -> int:
        """An emotion's key: announced whole once it is complete."""
        m = KEY_RUN_MATCH(s, i)
        if m is not None:
            self._text.append(m.group())
            return m.end()
        c = s[i]
        if c == "<":
            self._key_done(s, i)
            return i
        if c == "\\":
            if (j := unescape(s, i, self._text, KEY_BAD)) >= 0:
                return j
            m = ESCAPE.match(s, i)
            if (m is not None and not (m.group(4) or "").lower().startswith(HIGH_SURROGATES)) or (
                i + 1 < len(s) and s[i + 1] not in ESCAPE_STARTS
            ):
                raise Held  # a newline, markup or a bad escape in a key: the rereads read it
            return self._stall(s, i, TOKEN_MAX)
        if c == '"' and self._lenient_end(s, i):
            self._repair()
            self._key_done(s, i)  # a key cut by the end of the body (CF702)
            self._segment_end()
            self._body_end()
            return i + 1
        if c == '"' and len(s) - i < ENVELOPE_MAX and not s[i + 1 :].strip():
            return self._stall(s, i, ENVELOPE_MAX)
        raise Held

    def _close(self, s: str, i: int) -> int:
        """The closing tag after a key."""
        if (j := self._close_element(s, i)) < 0:
            return self._stall(s, i, TOKEN_MAX, ">")
        return j

    # -- tokens ---------------------------------------------------------------------------------------
    def _element(self, s: str, i: int, whole: re.Pattern[str] | None, opening: re.Pattern[str], name: int) -> int:
        """An element at ``s[i]`` (its ``opening`` pattern: the tag's name in group ``name``, the text after it next).

        ``whole``: where a whole element (``<emo>joy</emo>``) may stand, its pattern, tried first.
        Every '>' needed is there (the states waited for one): no match is damage.
        """
        if whole is not None:
            w = whole.match(s, i)
            if w is not None and self._whole(w):
                return w.end()
        m = opening.match(s, i)
        if m is None:
            raise Held  # no tag can begin here, or a tag of no table: the rereads read it
        written, after = m.group(name), m.start(name + 1)
        if self._whole_cut(s, i, written, after):
            return self._stall(s, i, TOKEN_MAX, ">")
        if name == 2 and m.group(1) is None:
            self._repair()  # no newline between elements (CF701)
        self._segment_start(written, after)
        run = name + 1
        if self._state == TEXT and m.end(run) > m.start(run):  # the plain text after it, where it holds text
            self._plain(m.group(run))
            return m.end()
        return m.start(run)

    def _entity(self, s: str, i: int) -> int:
        """The entity at ``s[i]``, decoded into the text; a stall while it is cut."""
        m = ENTITY_MATCH(s, i)
        if m is None:
            return self._stall(s, i, TOKEN_MAX, ";")
        entity = m.group()
        decoded = XML_ENTITIES.get(entity)
        if decoded is None:
            if not self._lang.text.fullmatch(entity):
                return self._stall(s, i, TOKEN_MAX, ";")
            decoded = decode_text(entity)
        self._text.append(decoded)
        return m.end()

    def _close_element(self, s: str, i: int) -> int:
        """The closing tag at ``s[i]`` ends the open element: where it ends, or -1 if none is complete there."""
        m = self._closer(s, i) or self._lang.any_close.match(s, i)  # (another element's: CF703)
        if m is None:
            return -1
        if m.group(1) is None:
            tag = self._chat.tag
            held = self._lang.element[tag][3] and not self._streams
            if self._text and tag != self.tags.speech.name and _splits("".join(self._text), held):
                raise Held  # text held after a line or a sentence: the batch reader splits it there (CF721)
            self._repair()  # another element's closing tag (CF703)
        self._segment_end()
        return m.end()

    def _lenient_end(self, s: str, i: int) -> bool:
        """Whether the '"' at ``s[i]`` ends the body (a '}' follows); raises nothing, decides only when it can."""
        m = BODY_END_MATCH(s, i)
        return m is not None and m.end() < len(s) and s[m.end()] == "}" and self._kept is not None

    def _bad_escape(self, s: str, i: int) -> int:
        """A backslash before a character no JSON escape starts with: the batch reader reads the character (CF608)."""
        if i + 1 >= len(s):
            return -1
        ch = s[i + 1]
        if ch in ESCAPE_STARTS or TEXT_BAD.match(ch) or ch in '\r\n\t"':
            return -1
        self._repair()
        self._text.append(ch)
        return i + 2

    def _whole_cut(self, s: str, i: int, written: str, after: int) -> bool:
        """Whether ``s[i:]`` is the start of a whole element cut by the chunk boundary (it waits, to be read whole)."""
        if written not in self._lang.whole or len(s) - i >= TOKEN_MAX:
            return False
        m = KEY_RUN_MATCH(s, after)
        rest = s[m.end() if m is not None else after :]
        return not rest or self._lang.element[written][1].startswith(rest)

    # -- what a token means ----------------------------------------------------------------------
    def _segment_start(self, written: str, after: int) -> None:
        """The opening tag ``written`` (a name of the table in any case, or a synonym) ends just before ``s[after]``."""
        tag = written
        if tag not in self._lang.element:
            tag = self._lang.names[written.lower()]
            self._repair()  # read as the tag it means (CF704)
        chat = self._chat
        chat.segment += 1
        chat.tag = tag
        self._closer, self._close_tag, is_key, streams = self._lang.element[tag]
        if is_key:
            # Announced whole, once the key is complete: a key cut off shows nothing early.
            chat.key_start = self._base + after
            self._state = KEY
        else:
            if not chat.started:
                self._start(chat)
            self._out.append(SegmentStart(chat.index, chat.segment, tag))
            self._state = TEXT
            # (the text of an element other than speech waits after its first sentence's end: _hold_lines)
            self._sentences = streams and tag != self.tags.speech.name
            self._streams = self._live = streams

    def _whole(self, m: re.Match[str]) -> bool:
        """A whole element as the table writes it (``<emo>joy</emo>``) in one match; ``False``: token by token."""
        tag, value = m.group(1, 2)
        keyed, announce = self._lang.whole[tag]
        if keyed and (self.vocabulary is not None or not self._lang.key.fullmatch(value)):
            return False  # the token reader decides (vocabulary diagnostics, damage)
        if self._off_list(tag, value):
            return False
        chat = self._chat
        n = chat.segment = chat.segment + 1
        chat.tag = tag
        if not chat.started:
            self._start(chat)
        index = chat.index
        out = self._out
        out.append(SegmentStart(index, n, tag))
        out.append(announce(index, n, tag, value, None))
        out.append(SegmentEnd(index, n, tag))
        chat.closed_segments = n + 1
        self._state = AFTER
        return True

    def _off_list(self, tag: str, value: str) -> bool:
        """Whether ``value`` is not one of the closed list of values of cue ``tag`` (the batch reader reports it)."""
        values = self._lang.closed.get(tag)
        return values is not None and value not in values

    def _key_done(self, s: str, i: int) -> None:
        """The key ends at ``s[i]`` (a '<'): announce the segment and the emotion."""
        chat = self._chat
        key = "".join(self._text)
        if not self._lang.key.fullmatch(key) or unknown_sentence(key, self.vocabulary):
            raise Held  # no key, or a sentence: the batch reader reads it (CF718, CF722)
        if self.vocabulary is not None:
            decision = apply_vocabulary(key, self.vocabulary)
            if decision.code == "CF301":
                raise Held  # an error: the batch reader decides what becomes of it
            if decision.code is not None:
                # A key holds no raw newline (JSON strings cannot), so it starts on the current line.
                offset, line, column = self._here(s, i)
                start = (chat.key_start, line, column - (offset - chat.key_start))
                message = in_body(chat.index, decision.message)
                self._diagnostic(decision.code, message, start, offset, chat.index)
            key = decision.key or key
        self._text.clear()
        if not chat.started:
            self._start(chat)
        self._out.append(SegmentStart(chat.index, chat.segment, chat.tag))
        self._out.append(self._lang.whole[chat.tag][1](chat.index, chat.segment, chat.tag, key, None))
        self._state = CLOSE

    def _segment_end(self) -> None:
        chat = self._chat
        if (whole := self._lang.whole.get(chat.tag)) is not None and not whole[0]:  # (a key: shown at _key_done)
            text = "".join(self._text)
            if self._off_list(chat.tag, text):
                raise Held  # a value its tag does not allow: the batch reader decides (CF131/CF132)
            self._text.clear()
            self._out.append(whole[1](chat.index, chat.segment, chat.tag, text, None))
        elif self._text:
            self._emit_text()
        self._out.append(SegmentEnd(chat.index, chat.segment, chat.tag))
        chat.closed_segments = chat.segment + 1
        self._state = AFTER
        self._streams = self._live = self._sentences = False

    def _body_end(self) -> None:
        chat = self._chat
        if chat.kind in TAGGED_TYPES:
            if self._state == TEXT:
                self._repair()  # an element not closed before the end of the body (CF702)
                self._segment_end()
            if self._state != AFTER:
                raise Held  # an empty body
        else:
            if self._text:
                self._emit_text()
            if not chat.had_text:
                raise Held  # an empty I/E body
            self._out.append(SegmentEnd(chat.index, 0, TEXT_TAG))
            chat.closed_segments = 1
            self._streams = self._live = False
        self._state = CHAT_END


def _splits(text: str, held: bool) -> bool:
    """Whether ``text``, not shown yet of an element other than speech that another element's closing tag ends, may be
    split by the batch reader at a line or a sentence (``CF721``): text of a streamed element held after one
    (``held``), or a whole value's text (an action) holding one."""
    return held or "\n" in text or SENTENCE_MARK.search(text) is not None
