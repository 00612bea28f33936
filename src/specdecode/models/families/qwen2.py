"""Qwen2 and Qwen2.5: Llama's layers with biases on q, k and v; rope on halves, so llama.cpp's
converter stores q and k rows as transformers has them."""

from . import Family

FAMILY = Family("qwen2", model_types=("qwen2",), gguf_architectures=("qwen2",))
