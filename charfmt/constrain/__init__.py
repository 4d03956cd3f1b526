"""Constraining a reply: the format as a grammar or a JSON schema, the engines' recipes, the reply budget.

``export`` (``grammar``), ``schema`` (``json_schema``) and ``engines`` (the request fields and
processors each engine constrains with) are the public faces; ``budget`` plans a turn's bounds.
Their helpers are private: the regex IR every target is written from (``_regex_ir``), the reply
grammar as rules over it (``_reply_rules``), the keywords that constrain a reply
(``_reply_constraints``), the length bounds (``_grammar_bounds``) and the writers of each target's
syntax (``_grammar_writers``).
"""
