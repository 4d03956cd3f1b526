"""Glue for frameworks that call the models for you, each an optional extra.

``charfmt.integrations.langchain``: an output parser for LCEL chains (``pip install charfmt[langchain]``).
Nothing here is imported by ``import charfmt``.
"""
