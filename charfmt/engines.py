"""Old home of ``charfmt.constrain.engines``: a door kept so users' ``charfmt.engines`` imports still work.

The module moved into the constraining wing (issue 41); docs/API.md names this path.
Import from ``charfmt.constrain.engines``; nothing inside the package imports this door.
"""

from charfmt.constrain.engines import (
    DEFAULT_N_CTX,
    GGUF_MAGIC,
    LLAMA_INSTALL,
    MODEL_ENV,
    SERVERS,
    SMOLLM2_FILE,
    EngineMissing,
    check_gguf,
    default_model_path,
    llama_counter,
    llama_grammar,
    llguidance_installed,
    llguidance_processor,
    load_llama,
    load_llama_cpp,
    load_xgrammar,
    local_constraint,
    request_fields,
    structural_tag,
    unpack_bits,
    xgrammar_processor,
    xgrammar_tokenizer_info,
)

__all__ = [
    "DEFAULT_N_CTX",
    "GGUF_MAGIC",
    "LLAMA_INSTALL",
    "MODEL_ENV",
    "SERVERS",
    "SMOLLM2_FILE",
    "EngineMissing",
    "check_gguf",
    "default_model_path",
    "llama_counter",
    "llama_grammar",
    "llguidance_installed",
    "llguidance_processor",
    "load_llama",
    "load_llama_cpp",
    "load_xgrammar",
    "local_constraint",
    "request_fields",
    "structural_tag",
    "unpack_bits",
    "xgrammar_processor",
    "xgrammar_tokenizer_info",
]
