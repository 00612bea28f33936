"""`specdecode bench --prefill`: the prefill's time split, on a tiny model."""

from __future__ import annotations

import pytest

from specdecode.app.bench.prefill import measure_prefill, prefill_report
from specdecode.errors import InvalidParameterError
from specdecode.models import load_model


@pytest.fixture(scope="module")
def tiny(tiny_real_vocab_model):
    return load_model(str(tiny_real_vocab_model))


def test_the_report_splits_each_prompts_prefill_and_compares_it_with_the_peer(tiny):
    times = measure_prefill(tiny, sizes=(32, 64, 96))
    assert times.sizes == [32, 64, 96] and all(s > 0 for s in times.totals.values())
    for kind, (seconds, macs) in times.matrices.items():
        assert seconds > 0 and macs > 0 and times.peaks[kind] > 0
    # attention measured alone, growing with the prompt, a part of the whole prefill
    attention = [times.attention[n] for n in (32, 64, 96)]
    assert 0 < attention[0] < attention[2] and all(
        a < times.totals[n] for a, n in zip(attention, (32, 64, 96)))
    report = prefill_report(tiny, times, {32: 100.0, 64: 50.0}, None)
    rows = [line for line in report.splitlines() if line.startswith("| ") and "prompt" not in line]
    assert [row.split(" | ")[0] for row in rows] == ["| 32", "| 64", "| 96"]
    assert rows[2].endswith("- | - |")  # the peer did not run that size
    assert "not compared (no llama-bench)" in prefill_report(tiny, times, None, "no llama-bench")


def test_a_context_too_short_for_two_sizes_is_a_one_line_error(tiny):
    with pytest.raises(InvalidParameterError, match="fewer than two"):
        measure_prefill(tiny)  # 512 and more: the tiny model's context is 128
