"""Mistral: Llama's layers, with one sliding window on every layer where the config sets one.
llama.cpp's converter writes it as "llama" (that file then loads as the llama family)."""

from . import Family


def _from_gguf(config, fields: dict) -> None:
    # llama.cpp attends to the whole context; the 4096-token window transformers gives a file
    # it names Mistral is its config's default, not the file's
    config.sliding_window = None


FAMILY = Family("mistral", model_types=("mistral",), gguf_architectures=(), permuted_qk=True,
                from_gguf=_from_gguf)
