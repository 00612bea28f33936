"""`bench --floor`: weight bytes, the bandwidth and arithmetic floors and step times, as printed
lines; the arithmetic floor's peak rate is measured on the model's own formats, and on the C
paths each step stands beside the instruction peak."""

import re

import torch

from specdecode.app.bench.floor import peak_macs
from specdecode.app.cli import main
from specdecode.kernels.torch_path import TorchKernels


def test_floor_prints_both_floors_and_where_each_step_stands(capsys, tiny_real_vocab_model):
    assert main(["bench", "--floor", "--model", str(tiny_real_vocab_model)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\((native, float32, )?\w+ kernels \(", out.splitlines()[0])
    assert re.search(r"bandwidth floor: [\d.]+ GB/s \(streaming read: (torch's sum|\w+ kernels' "
                     r"loads)\), .* weights [\d.]+ MB -> [\d.]+ ms/step", out)
    steps = re.findall(r"step over +(\d+) new tokens: +[\d.]+ ms = ([\d.]+)x a 1-token step; "
                       r"arithmetic floor ([\d.]+) ms \(peak GMAC/s: float32 \d+\); "
                       r"[\d.]+x the larger floor \((bandwidth|arithmetic)\)", out)
    assert [int(n) for n, *_ in steps] == [1, 4, 8, 16]
    # C paths: the instruction peak, and every step's rate as a fraction of it
    peak = re.search(r"instruction peak \((\w+), \d+ threads\): (\d+) GMAC/s; a one-token step "
                     r"has [\d.]+ G multiply-adds", out)
    fractions = re.findall(r"; \d+ GMAC/s = \d+% of the instruction peak$", out, re.M)
    assert (peak is not None) == (len(fractions) == 4) == ("torch" not in out.splitlines()[0])
    assert float(steps[0][1]) == 1.0
    arithmetic = [float(a) for _, _, a, _ in steps]
    assert arithmetic[-1] > arithmetic[0]  # 16 rows: 16 times the multiply-adds
    assert re.search(r"^prefill of a \d+-token prompt \(\d+-row chunks\): \d+ ms = \d+ tok/s$",
                     out, re.M)
    # a model without a GGUF file has no llama.cpp peer, and the report says so
    assert "llama.cpp: not compared (the model has no GGUF file)" in out


def test_peak_rate_is_positive_for_a_block_format_and_for_fp32():
    for dtype in ("Q4_K", torch.float32):
        assert peak_macs(TorchKernels(), dtype, rows=2, repeats=2) > 0
