"""The step-cost curve: measured per model, once, kept in the profile by `tune`."""

from types import SimpleNamespace

import pytest

from specdecode.core import cost as cost_module
from specdecode.core.cost import StepCost, measure, save_step_cost, step_cost, step_seconds
from specdecode.models.llama import NativeLlama


def test_step_seconds_gives_a_positive_time_for_every_size(tiny_llama):
    target = NativeLlama.from_hf(tiny_llama(3, vocab=64, layers=2, max_positions=256))
    seconds = step_seconds(target, (1, 4), context=16, repeats=3)
    assert set(seconds) == {1, 4} and all(s > 0 for s in seconds.values())


def test_the_measured_curve_covers_the_row_counts_the_window_allows(tiny_llama):
    target = NativeLlama.from_hf(tiny_llama(3, vocab=64, layers=2, max_positions=256))
    cost = measure(target, repeats=2)
    assert cost.rows == (1, 2, 4, 8, 16, 32, 64) and all(s > 0 for s in cost.seconds)
    assert cost.per_cached >= 0
    # the small row counts again, after as long a context as the window leaves room for
    assert cost.long_context == 256 - 9 and len(cost.long_seconds) == 4
    assert all(s > 0 for s in cost.long_seconds)


def load(tiny_llama, seed: int) -> SimpleNamespace:
    target = NativeLlama.from_hf(tiny_llama(seed, vocab=64, layers=2, max_positions=256))
    return SimpleNamespace(target=target, key=f"tiny-{seed}", weights="float32", kernels="any")


def test_step_cost_is_measured_once_per_model_formats_and_kernel_path(tiny_llama, monkeypatch,
                                                                      tmp_path):
    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    first = step_cost(load(tiny_llama, 4))
    monkeypatch.setattr(cost_module, "measure",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("measured again")))
    assert step_cost(load(tiny_llama, 4)) == first  # another load of the same model and path


def test_a_curve_saved_in_the_profile_is_used_by_a_later_process(tiny_llama, monkeypatch,
                                                                  tmp_path):
    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    model = load(tiny_llama, 5)
    saved = StepCost((1, 2, 8), (1.0, 1.2, 2.0), 64, 1e-5, 1024, (1.5, 1.8))
    save_step_cost(model, saved)
    monkeypatch.setattr(cost_module, "_MEASURED", {})  # a new process
    monkeypatch.setattr(cost_module, "measure",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("measured again")))
    assert step_cost(model) == saved


def test_steps_between_and_past_measured_row_counts_are_linear():
    cost = StepCost((1, 2, 8), (1.0, 1.2, 2.4))
    assert cost.step(1, 64) == 1.0 and cost.step(8, 8 * 64) == pytest.approx(2.4)
    assert cost.step(5, 5 * 64) == pytest.approx(1.8)
    assert cost.step(14, 14 * 64) == pytest.approx(3.6)  # past the last: the last slope


def test_rows_that_attend_to_longer_caches_cost_more():
    cost = StepCost((1, 2), (1.0, 1.1), context=64, per_cached=0.001)
    assert cost.step(2, 2 * 64) == pytest.approx(1.1)
    assert cost.step(2, 2 * 64 + 100) == pytest.approx(1.2)
    assert cost.step(2, 10) == pytest.approx(1.1)  # shorter caches than measured: never cheaper
    assert StepCost.linear(0.25).row_cost() == pytest.approx(0.25)


def test_a_few_rows_cost_what_was_measured_after_either_context_and_linear_between():
    cost = StepCost((1, 2, 4, 8, 16), (1.0, 1.2, 1.6, 2.4, 4.0), context=64, per_cached=0.001,
                    long_context=1064, long_seconds=(2.0, 2.6, 3.4, 4.8))
    assert cost.step(2, 2 * 1064) == pytest.approx(2.6)
    assert cost.step(2, 2 * 564) == pytest.approx((1.2 + 2.6) / 2)
    assert cost.step(3, 3 * 1064) == pytest.approx(3.0)  # between measured row counts
    assert cost.step(1, 10) == pytest.approx(1.0)  # shorter caches than measured: never cheaper
    # past the long curve's rows: its last count, then the short curve's slope and, for each
    # further row, what it adds per cached token
    assert cost.step(16, 16 * 1064) == pytest.approx(4.8 + (4.0 - 2.4) + 0.001 * 8 * 1000)
    assert cost.step(9, 9 * 64) == pytest.approx(2.4 + 0.2)


def test_a_noisy_curve_where_more_rows_cost_less_never_prices_a_row_below_zero():
    noisy = StepCost((1, 2, 4, 8, 16), (1.0, 1.3, 1.2, 1.1, 2.0), long_context=1024,
                     long_seconds=(2.0, 1.9, 2.5))
    assert noisy.seconds == (1.0, 1.3, 1.3, 1.3, 2.0)
    assert noisy.long_seconds == (2.0, 2.0, 2.5)
    assert noisy.row_cost() >= 0.0
    assert all(noisy.step(r + 1, (r + 1) * 300) >= noisy.step(r, r * 300) for r in range(1, 20))
