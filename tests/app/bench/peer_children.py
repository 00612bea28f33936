"""Children for `LlamaCppPeer` tests, importable in a spawned process: one that answers without
llama.cpp, and one that dies of a segfault at its first request, as llama.cpp's AMX path does."""

from __future__ import annotations

import os
import signal


def echo(conn, gguf, threads, context_length, lookup_tokens) -> None:
    conn.send("ready")
    while True:
        try:
            ids, max_new, temperature, seed, eos = conn.recv()
        except EOFError:
            return
        conn.send((ids[:max_new], 0.001))


def segfault(conn, gguf, threads, context_length, lookup_tokens) -> None:
    conn.send("ready")
    conn.recv()
    os.kill(os.getpid(), signal.SIGSEGV)
