"""Llama 2 and 3.x, SmolLM2, and their fine-tunes: the family llama.cpp's converter writes as
"llama", with q and k rows permuted (Llama-3.1's rope scaling as a `rope_freqs` tensor, read by
`models.gguf`)."""

from . import Family

FAMILY = Family("llama", model_types=("llama",), gguf_architectures=("llama",), permuted_qk=True)
