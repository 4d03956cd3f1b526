"""The model side of a turn: loading a local model, the clients a turn streams from, and their chunks read.

``loading`` finds, checks and loads a llama.cpp model (``load_llama``, ``default_model_path``)
and counts with its own tokenizer (``llama_counter``); ``_model_clients`` holds the clients a
chat turn streams from (llama.cpp in-process, an OpenAI-compatible server); ``_replies`` reads
what such a server answers, without I/O and through a limit each, and ``_http_client`` is the
httpx door that feeds it; ``_sdk_chunks`` reads the stream objects of the LLM SDKs
(and of that client) as speech text, reasoning and diagnostics.
"""
