"""The strict reader of a reply: what ``charfmt.parse`` runs on input that claims to be valid.

- :mod:`.fast`: the fast path: a valid reply that needs no diagnostic, in one pass (anything
  else ``None``: the full path decides);
- :mod:`.envelope`: the JSON envelope (``{"chats": [...]}``), decoded by the standard
  library, and raw positions found only when something is wrong;
- :mod:`.elements`: a chat body as elements (the regex fast path, then the LALR driver of
  :mod:`.lalr`, then :mod:`.diagnosis` for a body that failed).
- :mod:`.reply`: the full pass where the fast path gave up: every problem of the reply, each
  a diagnostic at its raw position.

``charfmt.parser`` drives them and hands what fails to the lenient readers. Where the package
was built with a C compiler, this package also exists compiled with mypyc
(``charfmt._strict_c``, see ``charfmt._twin`` and ``hatch_build.py``), which ``charfmt.parse``
uses once it has read a megabyte. Keep it mypyc-compatible, as ``charfmt._stream`` is: imports
inside the package relative (so that the compiled copy imports its own modules), no float or
dict subclass, no slotted dataclass of an exception, no ``cls.__new__(cls)``.
"""
