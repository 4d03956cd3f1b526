"""The body grammar as data: ``grammars/body.lark``, what is generated from it, and the lexical facts it states.

- :mod:`.static`: the grammar's static part (``body.lark`` as shipped, no tag table) and
  its terminals' regular expressions (``KEY``, ``TEXT``, ``_NL``);
- :mod:`.lexical`: what every reader of the body language shares: the one entity decoder,
  the one JSON-escape table, the one class of body-text characters;
- :mod:`.rules`: the complete grammar of a tag table (``body.lark`` plus generated element
  rules) and the Lark parser built from it;
- :mod:`.tables`: the LALR tables of the default grammar, generated into
  ``charfmt/_grammar/_lalr.py`` so that a valid body parses without Lark.

The layers go one way: ``static`` and ``lexical`` know no tag table (``charfmt.tags``
reads its ``KEY`` here), ``rules`` and ``tables`` read the tag table.
"""
