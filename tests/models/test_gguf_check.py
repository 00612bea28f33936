"""GGUF files as untrusted input: `check_gguf` reads the header itself, holds every count, type,
shape and offset to the file, and a natively computed family's tensors to the shapes its
metadata implies; every malformed file is a one-line ModelLoadError naming what is wrong, and a
fuzzer over 2,000 mutated files finds no other outcome (no crash, no hang, no other exception)."""

import random
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from specdecode.errors import ModelLoadError
from specdecode.models.gguf_check import check_gguf, read_header


@pytest.fixture(scope="module")
def valid_gguf(tmp_path_factory):
    """A tiny Llama (2 layers, hidden 64, 320 tokens) in llama.cpp's layout, all F32."""
    import transformers

    from gguf_layout import VOCAB, write_like_llama_cpp

    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    return write_like_llama_cpp(model, tmp_path_factory.mktemp("gguf") / "valid.gguf").read_bytes()


def _tensor_record(data: bytes, name: str) -> int:
    """Where tensor `name`'s record continues after its name: dims count, dims, type, offset."""
    key = name.encode()
    return data.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)


def _patched(data: bytes, at: int, fmt: str, value) -> bytes:
    return data[:at] + struct.pack(fmt, value) + data[at + struct.calcsize(fmt):]


def _error(tmp_path, data: bytes) -> str:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(ModelLoadError) as caught:
        check_gguf(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("malformed GGUF file bad.gguf: ")
    return message.removeprefix("malformed GGUF file bad.gguf: ")


def test_the_header_reads_as_ggufs_own_reader_reads_it(tmp_path, valid_gguf):
    from gguf import GGUFReader

    path = tmp_path / "valid.gguf"
    path.write_bytes(valid_gguf)
    header = check_gguf(path)
    reader = GGUFReader(str(path))
    assert header.data_start == reader.data_offset
    assert {t.name: (tuple(int(n) for n in t.shape), int(t.tensor_type), int(t.data_offset) -
                     reader.data_offset, int(t.n_bytes)) for t in reader.tensors} == \
        {n: (t.shape, t.type, t.offset, t.nbytes) for n, t in header.tensors.items()}
    assert header.fields["llama.block_count"] == 2
    assert header.fields["tokenizer.ggml.tokens"] == reader.fields["tokenizer.ggml.tokens"].contents()


def test_each_kind_of_damage_is_one_line_naming_what_is_wrong(tmp_path, valid_gguf):
    data = valid_gguf
    q = _tensor_record(data, "blk.0.attn_q.weight")  # n_dims (2), ne0, ne1, type, offset
    cases = {
        "too short": data[:20],
        "does not start with 'GGUF'": b"GGML" + data[4:],
        "version 99": _patched(data, 4, "<I", 99),
        "cannot fit in the file": _patched(data, 8, "<Q", 1 << 60),  # tensor count
        "past the file's end": data[:len(data) - 256],  # the last tensor's data cut short
        "has 9 dimensions": _patched(data, q, "<I", 9),
        "has unknown type 999": _patched(data, q + 4 + 16, "<I", 999),
        "not a multiple of 32": _patched(data, q + 4 + 16 + 4, "<Q", 4),  # its offset
        "are not whole blocks of 32": _patched(_patched(data, q + 4 + 16, "<I", 8), q + 4, "<Q",
                                               33),  # Q8_0 rows of 33
        "has shape [64, 32]": _patched(data, q + 4 + 8, "<Q", 32),  # 32 q rows, not 64
        "'blk.1.ffn_down.weight' is missing": data.replace(b"blk.1.ffn_down.weight",
                                                           b"blk.1.ffn_dowX.weight"),
        "holds NaN or infinite values": _nan_in(data, tmp_path, "blk.1.ffn_norm.weight"),
    }
    for expected, damaged in cases.items():
        assert expected in _error(tmp_path, damaged), expected


def _nan_in(data: bytes, tmp_path, name: str) -> bytes:
    path = tmp_path / "for-offsets.gguf"
    path.write_bytes(data)
    header = read_header(path)
    at = header.data_start + header.tensors[name].offset
    return data[:at] + np.float32("nan").tobytes() + data[at + 4:]


def _mutant(data: bytes, header_end: int, rng: random.Random) -> bytes:
    """One of: truncated; random bytes in the header; a header field set to a huge or negative
    count; bits flipped anywhere; a 4-byte run of 0xff (a NaN in F32) in the data."""
    kind = rng.randrange(5)
    if kind == 0:
        return data[:rng.randrange(len(data))]
    out = bytearray(data)
    if kind == 1:
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(header_end)] = rng.randrange(256)
    elif kind == 2:
        at = rng.randrange(0, header_end - 8)
        out[at:at + 8] = struct.pack("<Q", rng.choice([1 << 63, 1 << 40, 2**64 - 1, 2**32 - 1,
                                                        rng.randrange(2**64)]))
    elif kind == 3:
        for _ in range(rng.randint(1, 16)):
            at = rng.randrange(len(out))
            out[at] ^= 1 << rng.randrange(8)
    else:
        at = rng.randrange(header_end, len(out) - 4)
        out[at:at + 4] = b"\xff" * 4
    return bytes(out)


def test_2000_mutated_files_are_each_read_or_refused_in_one_line(tmp_path, valid_gguf):
    path = tmp_path / "valid.gguf"
    path.write_bytes(valid_gguf)
    header_end = read_header(path).data_start
    rng, started, outcomes = random.Random(0), time.perf_counter(), {"read": 0, "refused": 0}
    for i in range(2000):
        mutant = tmp_path / "mutant.gguf"
        mutant.write_bytes(_mutant(valid_gguf, header_end, rng))
        try:
            check_gguf(mutant)
            outcomes["read"] += 1
        except ModelLoadError as exc:
            assert "\n" not in str(exc), (i, str(exc))
            outcomes["refused"] += 1
    assert time.perf_counter() - started < 120  # no mutant hangs the reader
    assert outcomes["refused"] > 1000 and outcomes["read"] > 50, outcomes


def test_mutants_that_pass_the_check_load_without_crashing(tmp_path, valid_gguf):
    """What the check lets through (damage inside the weights' bytes, harmless header bytes)
    goes on to gguf's reader, transformers and the kernels: in a child process, so that a crash
    fails this test instead of ending the run."""
    path = tmp_path / "valid.gguf"
    path.write_bytes(valid_gguf)
    header_end = read_header(path).data_start
    rng, passed = random.Random(1), []
    while len(passed) < 6:
        mutant = tmp_path / f"mutant{len(passed)}.gguf"
        mutant.write_bytes(_mutant(valid_gguf, header_end, rng))
        try:
            check_gguf(mutant)
            passed.append(str(mutant))
        except ModelLoadError:
            mutant.unlink()
    code = ("import sys, torch\n"
            "from specdecode.errors import SpecDecodeError\n"
            "from specdecode.models import load_model\n"
            "from specdecode.core.target import forward\n"
            "for path in sys.argv[1:]:\n"
            "    try:\n"
            "        m = load_model(path)\n"
            "        forward(m.target, m.target.new_cache(), torch.arange(8))\n"
            "        print('ran', path)\n"
            "    except SpecDecodeError as e:\n"
            "        print('refused', path, str(e).count(chr(10)))\n")
    done = subprocess.run([sys.executable, "-c", code, *passed], capture_output=True, text=True,
                          timeout=600, env={**__import__("os").environ,
                                            "SPECDECODE_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == len(passed) and all(not line.startswith("refused") or
                                             line.endswith(" 0") for line in lines)
