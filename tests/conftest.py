"""Shared fixtures: tiny random-initialised models (nothing is downloaded)."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
import transformers

from specdecode.storage import cache_dir

_SESSION_CACHE = pytest.StashKey[Path]()


def pytest_configure(config) -> None:
    """The session's cache: the user's compiled kernels, models and GGUF entries (slow to make,
    the same for every run), but profiles of its own. Tests then neither read a profile the user
    measured (`tune` would change which method a test's default picks) nor leave one behind (a
    model in a test's temporary directory is a new profile every run). Set in the environment,
    so the commands tests start in subprocesses use it too."""
    user = cache_dir()
    session = Path(tempfile.mkdtemp(prefix="specdecode-tests-"))
    for shared in ("kernels", "models", "gguf", "llama.cpp"):
        (user / shared).mkdir(parents=True, exist_ok=True)
        (session / shared).symlink_to(user / shared, target_is_directory=True)
    os.environ["SPECDECODE_CACHE"] = str(session)
    config.stash[_SESSION_CACHE] = session


def pytest_unconfigure(config) -> None:
    """Removes the session's cache (its links, not what they point to)."""
    session = config.stash.get(_SESSION_CACHE, None)
    if session is not None:
        shutil.rmtree(session, ignore_errors=True)


@pytest.fixture(autouse=True)
def _one_thread_for_tiny_models(request):
    """Tiny models (a few thousand parameters) run fastest on one thread: intra-op threads only add
    synchronisation overhead, and stall badly when another process holds a core. Tests on the real
    model (marked `real_model`) keep torch's default."""
    if request.node.get_closest_marker("real_model"):
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.lru_cache(maxsize=None)
def make_tiny_llama(
    seed: int,
    vocab: int = 64,
    layers: int = 2,
    init: float = 0.3,
    max_positions: int = 256,
    arch: str = "llama",
    attention_bias: bool = False,
) -> torch.nn.Module:
    """A tiny random transformers causal LM (Llama, or Qwen2 with `arch="qwen2"`).

    A large `init` (initializer_range) makes the logits peaked, so greedy argmax margins are far
    above the rounding differences between scoring 1 and K tokens at once. Cached: the returned
    module is stateless and must not be modified by tests."""
    common = dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,  # a multiple of 16: attention takes the C kernel where it runs, as on real models
        max_position_embeddings=max_positions,
        initializer_range=init,
        tie_word_embeddings=False,
    )
    if arch == "llama":
        config = transformers.LlamaConfig(attention_bias=attention_bias, **common)
        cls = transformers.LlamaForCausalLM
    elif arch == "qwen2":
        config = transformers.Qwen2Config(use_sliding_window=False, **common)
        cls = transformers.Qwen2ForCausalLM
    else:
        raise ValueError(arch)
    torch.manual_seed(seed)
    model = cls(config).eval()
    if attention_bias or arch == "qwen2":
        # biases are zero-initialised; make them matter
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith(".bias"):
                    param.normal_(0.0, init)
    return model


@pytest.fixture(scope="session")
def tiny_llama():
    """Factory: `tiny_llama(seed, vocab=64, layers=2, init=0.3, max_positions=256, ...)`."""
    return make_tiny_llama


# fixtures that need a real tokenizer (the default model, tiny models saved as directories)
pytest_plugins = ["model_fixtures", "kernel_fixtures"]


@pytest.fixture
def gguf_readings(monkeypatch) -> list:
    """The files gguf's GGUFReader is opened on from here on (each reading builds every field of
    the file: for a real vocabulary, seconds)."""
    import gguf

    readings = []
    original = gguf.GGUFReader.__init__

    def counted(self, *args, **kwargs):
        readings.append(args)
        original(self, *args, **kwargs)

    monkeypatch.setattr(gguf.GGUFReader, "__init__", counted)
    return readings
