"""The llama.cpp peers: the model's own GGUF file through llama-cpp-python (`pip install
'specdecode[peers]'`), plain and with llama-cpp-python's prompt-lookup drafter, timed like our
methods (prompt prefill + decoding, no model loading).

llama.cpp computes with the file's quantized weights and 8-bit activations, so its greedy output
is close to, but not token-identical with, the dequantized fp32 target: the benchmark reports its
speed and leaves it out of the equality audit.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import time
from pathlib import Path
from typing import Callable


def installed() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def binding_version() -> str:
    """llama-cpp-python's version, for reports ("unknown" without its package metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return "unknown"


class PeerCrashed(Exception):
    """The peer's process died (a segfault in llama.cpp's kernels, say): one line of why."""


class LlamaCppPeer:
    """The peer in a process of its own: llama.cpp runs in-process through its binding, and a
    crash there (llama.cpp's AMX path segfaults on this project's Sapphire Rapids-class Xeon)
    would end the benchmark with it. Here it ends the child: `generate` raises PeerCrashed,
    and the benchmark keeps the other methods' rows."""

    def __init__(self, gguf: Path, threads: int, context_length: int,
                 lookup_tokens: int | None = None, serve: Callable | None = None) -> None:
        """lookup_tokens: draft that many tokens with `LlamaPromptLookupDecoding` (None: plain).
        `serve`: what runs in the child (default: llama-cpp-python, `_serve`)."""
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked threads
        self.conn, child = context.Pipe()
        self.process = context.Process(target=serve or _serve, daemon=True, args=(
            child, str(gguf), threads, context_length, lookup_tokens))
        self.process.start()
        child.close()
        self.crash: str | None = None
        self._call(None)  # the child says it has loaded the model

    def generate(self, ids: list[int], max_new: int, temperature: float, seed: int,
                 eos_token_ids: frozenset[int]) -> tuple[list[int], float]:
        """-> (new token ids without EOS, seconds). Greedy at temperature 0; otherwise samples
        the full distribution (no top-k, top-p or min-p cut, no repetition penalty), as ours.
        Raises PeerCrashed once the child has died."""
        return self._call((list(ids), max_new, temperature, seed, sorted(eos_token_ids)))

    def _call(self, request):
        if self.crash is not None:
            raise PeerCrashed(self.crash)
        try:
            if request is not None:
                self.conn.send(request)
            return self.conn.recv()
        except (EOFError, OSError):
            self.process.join(10)
            code = self.process.exitcode
            self.crash = (f"crashed with signal {-code}" if code is not None and code < 0
                          else f"exited with code {code}")
            raise PeerCrashed(self.crash) from None

    def close(self) -> None:
        if self.process.is_alive():
            self.conn.close()
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()


def answer_requests(conn, answer: Callable[..., tuple[list[int], float]]) -> None:
    """A child's loop: say it is ready, then answer each request (`generate`'s arguments) until
    the pipe closes."""
    conn.send("ready")
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        conn.send(answer(*request))


def _serve(conn, gguf: str, threads: int, context_length: int,
           lookup_tokens: int | None) -> None:
    """The child: llama-cpp-python on the GGUF file."""
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    draft = LlamaPromptLookupDecoding(num_pred_tokens=lookup_tokens) if lookup_tokens else None
    if draft:
        # drafting keeps logits for every context position (n_ctx x vocab floats), and
        # llama-cpp-python 0.3.36 sizes that buffer only when logits_all is passed explicitly
        context_length = min(context_length, 4096)
    llm = Llama(model_path=gguf, n_ctx=context_length, n_threads=threads,
                n_threads_batch=threads, draft_model=draft, logits_all=bool(draft), verbose=False)

    def generate(ids, max_new, temperature, seed, eos_token_ids) -> tuple[list[int], float]:
        llm.reset()  # no reuse of an earlier prompt's cache: every run pays its prefill
        llm.set_seed(seed)
        out: list[int] = []
        started = time.perf_counter()
        for token in llm.generate(ids, temp=temperature, top_k=0 if temperature else 1,
                                  top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
            if token in eos_token_ids:
                break
            out.append(token)
            if len(out) >= max_new:
                break
        return out, time.perf_counter() - started

    answer_requests(conn, generate)
