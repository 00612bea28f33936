"""The llama.cpp peers: the model's own GGUF file through llama-cpp-python (`pip install
'specdecode[peers]'`), plain and with llama-cpp-python's prompt-lookup drafter, timed like our
methods (prompt prefill + decoding, no model loading).

llama.cpp computes with the file's quantized weights and 8-bit activations, so its greedy output
is close to, but not token-identical with, the dequantized fp32 target: the benchmark reports its
speed and leaves it out of the equality audit.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path


def installed() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


class LlamaCppPeer:
    def __init__(self, gguf: Path, threads: int, context_length: int,
                 lookup_tokens: int | None = None) -> None:
        """lookup_tokens: draft that many tokens with `LlamaPromptLookupDecoding` (None: plain)."""
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        draft = LlamaPromptLookupDecoding(num_pred_tokens=lookup_tokens) if lookup_tokens else None
        if draft:
            # drafting keeps logits for every context position (n_ctx x vocab floats), and
            # llama-cpp-python 0.3.36 sizes that buffer only when logits_all is passed explicitly
            context_length = min(context_length, 4096)
        self.llm = Llama(model_path=str(gguf), n_ctx=context_length, n_threads=threads,
                         n_threads_batch=threads, draft_model=draft, logits_all=bool(draft),
                         verbose=False)

    def generate(self, ids: list[int], max_new: int, temperature: float, seed: int,
                 eos_token_ids: frozenset[int]) -> tuple[list[int], float]:
        """-> (new token ids without EOS, seconds). Greedy at temperature 0; otherwise samples
        the full distribution (no top-k, top-p or min-p cut, no repetition penalty), as ours."""
        self.llm.reset()  # no reuse of an earlier prompt's cache: every run pays its prefill
        self.llm.set_seed(seed)
        out: list[int] = []
        started = time.perf_counter()
        for token in self.llm.generate(ids, temp=temperature, top_k=0 if temperature else 1,
                                       top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
            if token in eos_token_ids:
                break
            out.append(token)
            if len(out) >= max_new:
                break
        return out, time.perf_counter() - started
