"""The step-cost curve: measured per model, once."""

from types import SimpleNamespace

from specdecode.core.cost import RowCost, row_cost, step_seconds
from specdecode.models.llama import NativeLlama


def test_step_seconds_gives_a_positive_time_for_every_size(tiny_llama):
    target = NativeLlama.from_hf(tiny_llama(3, vocab=64, layers=2, max_positions=256))
    seconds = step_seconds(target, (1, 4), context=16, repeats=3)
    assert set(seconds) == {1, 4} and all(s > 0 for s in seconds.values())


def test_row_cost_is_measured_once_per_model_formats_and_kernel_path(tiny_llama, monkeypatch):
    def load() -> SimpleNamespace:
        target = NativeLlama.from_hf(tiny_llama(4, vocab=64, layers=2, max_positions=256))
        return SimpleNamespace(target=target, key="tiny-4", weights="float32", kernels="any")

    first = row_cost(load())
    assert first.short >= 0 and first.long >= 0
    again = load()  # another load of the same model, on the same kernel path
    monkeypatch.setattr("specdecode.core.cost.step_seconds",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("measured again")))
    assert row_cost(again) == first


def test_row_cost_is_a_line_in_the_context_length_never_below_zero():
    cost = RowCost(0.1, 0.2, short_context=100, long_context=1100)
    assert cost.at(100) == 0.1 and abs(cost.at(600) - 0.15) < 1e-12
    assert abs(cost.at(2100) - 0.3) < 1e-12  # past the longer measurement: extrapolated
    assert RowCost(0.2, 0.1, 100, 1100).at(10_000) == 0.0
    assert RowCost.flat(0.3).at(5) == RowCost.flat(0.3).at(5000) == 0.3
