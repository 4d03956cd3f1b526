"""Old home of ``charfmt.constrain.engines`` and ``charfmt.llm.loading``: a door for users' ``charfmt.engines`` imports.

The recipes moved into the constraining wing, model loading into the model wing (issue 41);
docs/API.md names this path. Import from the two homes; nothing inside the package imports this door.
"""

from charfmt.constrain.engines import (
    LLAMA_INSTALL,
    SERVERS,
    EngineMissing,
    llama_grammar,
    llguidance_installed,
    llguidance_processor,
    load_llama_cpp,
    load_xgrammar,
    local_constraint,
    request_fields,
    structural_tag,
    unpack_bits,
    xgrammar_processor,
    xgrammar_tokenizer_info,
)
from charfmt.llm.loading import (
    DEFAULT_N_CTX,
    GGUF_MAGIC,
    MODEL_ENV,
    SMOLLM2_FILE,
    check_gguf,
    default_model_path,
    llama_counter,
    load_llama,
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
