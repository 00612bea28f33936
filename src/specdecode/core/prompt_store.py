"""Kept prompts' caches on disk, for the processes that come after this one (a server restarted
reads an agent's system prompt from here instead of prefilling it again).

One safetensors file per prompt in `directory/<identity>/`: the prompt's tokens, its cache's
entries (`SavableCache.state`), and in the header the identity they were computed under (the
model file, its formats, the kernel path and build: a row's numbers depend on nothing else, so
a file of another identity never serves) and a digest of the entries. At start only the tokens of
each file are read (the index); a prompt's entries are read when a lookup needs them, and checked
against their digest and shapes then: a file that fails is deleted, never used. Writes run on a
thread of their own and land whole (a temporary file renamed). Bounded by `max_bytes` on disk,
the least recently used file deleted first.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from .target import SavableCache

log = logging.getLogger("specdecode")
SUFFIX = ".safetensors"
DEFAULT_DISK_BYTES = 16 << 30


def _digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class PromptStore:
    def __init__(self, directory: str | Path, identity: str,
                 new_cache: Callable[[], SavableCache], max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"a prompt store needs room for >= 1 byte, got {max_bytes}")
        self.identity, self.new_cache, self.max_bytes = identity, new_cache, max_bytes
        self.dir = Path(directory) / hashlib.sha256(identity.encode()).hexdigest()[:16]
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()  # the index, shared with the writer thread
        self.index: dict[Path, torch.Tensor] = {}  # file -> its prompt's tokens [n]
        for path in sorted(self.dir.glob("*" + SUFFIX), key=lambda p: p.stat().st_mtime):
            try:
                with safe_open(path, "pt") as f:
                    if f.metadata().get("identity") != identity:
                        raise ValueError("another identity")
                    self.index[path] = f.get_tensor("tokens")
            except Exception as exc:  # noqa: BLE001  (any unreadable file is dropped)
                log.warning("prompt cache: dropping %s (%s)", path.name, exc)
                path.unlink(missing_ok=True)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="specdecode-prompt-store")

    @property
    def held(self) -> int:
        return sum(p.stat().st_size for p in list(self.index) if p.exists())

    def best(self, prompt: torch.Tensor) -> tuple[int, Path | None]:
        """The saved prompt that shares the longest prefix with `prompt` [n], and that length."""
        best, best_path = 0, None
        with self._lock:
            entries = list(self.index.items())
        for path, tokens in entries:
            n = min(tokens.shape[0], prompt.shape[0])
            differ = (tokens[:n] != prompt[:n]).nonzero()
            common = int(differ[0]) if differ.numel() else n
            if common > best:
                best, best_path = common, path
        return best, best_path

    def load(self, path: Path) -> tuple[torch.Tensor, SavableCache] | None:
        """A saved prompt's tokens and cache, checked; None (and the file deleted) when it fails
        its checks or cannot be read."""
        try:
            with safe_open(path, "pt") as f:
                meta = f.metadata()
                state = {name: f.get_tensor(name) for name in ("keys", "values")}
                tokens = f.get_tensor("tokens")
            if meta.get("identity") != self.identity or meta.get("digest") != _digest(state):
                raise ValueError("its identity or digest does not match")
            cache = self.new_cache()
            cache.restore(state)
            if cache.length != tokens.shape[0]:
                raise ValueError("its entries do not match its tokens")
        except Exception as exc:  # noqa: BLE001
            log.warning("prompt cache: dropping %s (%s)", path.name, exc)
            self._forget(path)
            return None
        os.utime(path)  # recently used
        return tokens, cache

    def save(self, tokens: torch.Tensor, cache: SavableCache) -> None:
        """Save a prompt's cache (on the writer thread; `cache` must not change meanwhile); a
        saved prompt that this one extends is replaced, one that holds it already kept."""
        self._writer.submit(self._write, tokens.clone(), cache)

    def _write(self, tokens: torch.Tensor, cache: SavableCache) -> None:
        n = tokens.shape[0]
        with self._lock:
            entries = list(self.index.items())
        for path, kept in entries:
            if kept.shape[0] >= n and torch.equal(kept[:n], tokens):
                return
        state = {name: t.contiguous() for name, t in cache.state().items()}
        name = hashlib.sha256(tokens.numpy().tobytes()).hexdigest()[:32] + SUFFIX
        path, partial = self.dir / name, self.dir / (name + ".partial")
        try:
            save_file({**state, "tokens": tokens.contiguous()}, partial,
                      metadata={"identity": self.identity, "digest": _digest(state)})
            os.replace(partial, path)
        except OSError as exc:  # a full or read-only disk: the memory cache goes on
            log.warning("prompt cache: could not save %s (%s)", name, exc)
            partial.unlink(missing_ok=True)
            return
        with self._lock:
            self.index[path] = tokens
        for old, kept in entries:
            if kept.shape[0] < n and torch.equal(kept, tokens[: kept.shape[0]]):
                self._forget(old)
        while self.held > self.max_bytes and len(self.index) > 1:
            with self._lock:
                oldest = min(self.index, key=lambda p: p.stat().st_mtime if p.exists() else 0)
            self._forget(oldest)

    def _forget(self, path: Path) -> None:
        with self._lock:
            self.index.pop(path, None)
        path.unlink(missing_ok=True)

    def flush(self) -> None:
        """Wait for the saves submitted so far."""
        self._writer.submit(lambda: None).result()

    def close(self) -> None:
        self._writer.shutdown(wait=True)
