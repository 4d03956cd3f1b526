"""The incremental reader behind ``charfmt.stream``: events as model output arrives, never a partial tag.

Every module here is compiled with mypyc where the package is built with a C compiler (see
``hatch_build.py``: the compiled copy is ``charfmt._stream_c``); ``charfmt.stream`` uses the
compiled copy only while it was built from this very source, and this package otherwise.
Keep it mypyc-compatible: no async generators, no monkeypatching of its classes, imports
inside the package relative (so that the compiled copy imports its own modules).

``StreamParser`` (``reader``) reads the reply incrementally with the tables the batch reader
uses (the tag table's names, synonyms and roles: ``tags=``; the chat types and their
spellings). Each event is emitted as soon as it is certain: an emotion, action or cue when
its value is complete, text deltas as soon as their characters are decided, never a
fragment of a tag, an entity, a JSON escape or a UTF-8 character.

The reader works token by token: a method per state (``reader``'s table: the chat header,
a whole element, an opening tag, a run of text, an escape, an entity, a closing tag), each
matching a regular expression where the last token ended. A token cut by a chunk boundary
waits, at most ``TOKEN_MAX`` characters (``ENVELOPE_MAX`` for a chat header), for the next
chunk, and is tried again only when a chunk brings the character it ends with; the cost of
a chunk is the work on its own characters plus that short tail, so total work is linear in
the input. A chunk of plain text inside a message is one delta without entering the reader
at all.

Damage the batch reader repairs in a known way is read the same way, still streaming
(prose, fences and reasoning before the JSON, text after it, tag synonyms and case,
missing newlines, chat type spellings, a trailing comma, unescaped quotes, mismatched or
missing closing tags, invalid escapes); ``close()`` then reads the whole text with
``charfmt.parse(lenient=True)`` and adds its diagnostics. Any other shape (bare tags,
brackets, other dialects) is reread with the batch reader as it grows (``rereads``), and
what a reread settles is emitted. At ``close()`` the stream reconciles with the batch
result and emits only what is missing (``reconcile``); ``Reset`` and the whole result only
where it contradicts what was shown (docs/LENIENT.md lists the cases). A repaired reply's
``Dialect`` is its last event, as in ``Reply.events()``. Markup written as JSON escapes
(``\\u003c`` for ``<``) is valid but rare: it is read at ``close()``.

The modules, from the bottom up (each class adds one job to the one below it):

- ``language``: what the reader knows of the language: the token patterns of the envelope
  and the body, and ``Language``, those of one tag table;
- ``chats``: what it remembers of the chats: the open ones, the orders seen;
- ``kept``: the raw text kept for the rereads and ``close()``;
- ``collector``: ``Collector``, the reply a sequence of events describes;
- ``state`` (``State``): where the reader is, what it holds, and the steps every part shares
  (stall, hold, repair, emit);
- ``envelope`` (``Envelope``): the states of the JSON around the bodies;
- ``body_states`` (``Body``): the states inside a body;
- ``settle``: what of a reread more text cannot change (marks still open, the last sentence a
  quotation may make narration, a line that may echo the prompt);
- ``rereads`` (``Rereads``): a stream that left the format, reread as it grows;
- ``reconcile`` (``Reconcile``): the end, matched against the batch parse;
- ``reader`` (``StreamParser``): ``feed`` and ``close``, and the table from state to method.
"""
