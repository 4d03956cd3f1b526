"""The strict reader of a reply: what ``charfmt.parse`` runs on input that claims to be valid.

- :mod:`.envelope`: the JSON envelope (``{"chats": [...]}``), decoded by the standard
  library, and raw positions found only when something is wrong;
- :mod:`.body`: a chat body as elements (the regex fast path, then the LALR driver of
  :mod:`.lalr`, then :mod:`.diagnosis` for a body that failed).

``charfmt.parser`` drives them and hands what fails to the lenient readers.
"""
