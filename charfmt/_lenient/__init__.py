"""Lenient reading: whatever a model wrote, read into a reply, every repair noted.

Used only where strict parsing failed (``charfmt.parser`` hands off to ``recovery.recover``).

- ``recovery``: the entry point, an ordered table of named steps over one ``state.Recovery``;
  ``region`` (what stands around the reply), ``shapes`` and ``fields`` (a JSON reply and
  its chats), ``forms`` and ``request_form`` (a reply without JSON), ``finish`` (segments,
  orders, the reply) are its steps.
- ``json``: the tolerant JSON reader; ``body``: the tag-soup body reader; ``prose``:
  untagged text; ``scaffolding``, ``literals``: what those readers share.
- The dialect table (``charfmt.dialects``) says which dialect a text is written in and which
  of these readers reads it; the readers walk it through the ``table.Reading`` they are given.
"""
