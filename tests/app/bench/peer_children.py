"""Children for `LlamaCppPeer` tests, importable in a spawned process: one that answers without
llama.cpp, and one that dies of a segfault at its first request, as llama.cpp's AMX path does."""

from __future__ import annotations

import os
import signal

from specdecode.app.bench.llamacpp import answer_requests


def echo(conn, gguf, threads, context_length, lookup_tokens) -> None:
    answer_requests(conn, lambda ids, max_new, *rest: (ids[:max_new], 0.001))


def segfault(conn, gguf, threads, context_length, lookup_tokens) -> None:
    answer_requests(conn, lambda *request: os.kill(os.getpid(), signal.SIGSEGV))
