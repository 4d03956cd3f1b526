"""The model side of a turn: loading a local model, the clients a turn streams from, and their chunks read.

``loading`` finds, checks and loads a llama.cpp model (``load_llama``, ``default_model_path``)
and counts with its own tokenizer (``llama_counter``); ``_model_clients`` holds the clients a
chat turn streams from (llama.cpp in-process, an OpenAI-compatible server); ``_http_client`` is
the bounded HTTP door to such a server; ``_sdk_chunks`` reads the stream objects of the LLM SDKs
(and of that client) as speech text, reasoning and diagnostics.
"""
