"""`bench --floor`: bandwidth, floor per step and step times, as printed lines."""

import re

from specdecode.app.cli import main


def test_floor_prints_the_kernel_path_bandwidth_floor_and_step_ratios(capsys, tiny_real_vocab_model):
    assert main(["bench", "--floor", "--model", str(tiny_real_vocab_model)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\((native, float32, )?\w+ kernels \(", out.splitlines()[0])
    assert re.search(r"bandwidth [\d.]+ GB/s .* -> floor [\d.]+ ms/step", out)
    steps = re.findall(r"step over +(\d+) new tokens: +[\d.]+ ms = [\d.]+x floor, ([\d.]+)x", out)
    assert [int(n) for n, _ in steps] == [1, 4, 8, 16]
    assert float(steps[0][1]) == 1.0
