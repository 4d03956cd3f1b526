"""Lenient reading: whatever a model wrote, read into a reply, every repair noted.

Used only where strict parsing failed (``charfmt.parser`` hands off to ``recovery.recover``).

- ``recovery``: the entry points; ``STEPS``, an ordered table of named steps over one
  ``state.Recovery``. Its steps: ``region`` (what stands around the reply), ``shapes`` and
  ``fields`` (a JSON reply and its chats), ``forms``, ``text`` and ``request_form`` (a reply
  without JSON), ``finish`` (segments, orders, the reply).
- The readers: ``json`` (tolerant JSON), ``tag_soup`` (tag soup), ``prose`` (untagged text),
  ``front_matter``; what they share: ``pieces`` (what they produce), ``literals``,
  ``scaffolding``, ``marks`` (the patterns the dialect table and they look for).
- ``table``: the dialect table as the readers walk it. The table itself
  (``charfmt.dialects``) names each dialect's detector and reader; the readers are handed it
  in the ``table.Reading`` they are given, never import it.
"""
