"""Timing a target's steps: the curve measured per model, once, kept in the model's profile."""

from types import SimpleNamespace

import pytest

from specdecode.core.cost import StepCost
from specdecode.models import timing
from specdecode.models.cache import StaticKVCache
from specdecode.models.decoder import NativeDecoder
from specdecode.models.timing import measure, save_step_cost, step_cost, step_seconds


def test_step_seconds_gives_a_positive_time_for_every_size(tiny_llama):
    target = NativeDecoder.from_hf(tiny_llama(3, vocab=64, layers=2, max_positions=256))
    seconds = step_seconds(target, (1, 4), context=16, repeats=3)
    assert set(seconds) == {1, 4} and all(s > 0 for s in seconds.values())


def test_step_seconds_pads_the_native_cache_instead_of_prefilling_it(tiny_llama, monkeypatch):
    target = NativeDecoder.from_hf(tiny_llama(3, vocab=64, layers=2, max_positions=256))
    monkeypatch.setattr(target, "prefill", lambda *a: (_ for _ in ()).throw(AssertionError))
    padded = []
    real_pad = StaticKVCache.pad
    monkeypatch.setattr(StaticKVCache, "pad", lambda cache, n: padded.append(n) or
                        real_pad(cache, n))
    assert set(step_seconds(target, (1, 4), context=100, repeats=1)) == {1, 4}
    assert padded == [100]


def test_the_measured_curve_covers_the_row_counts_the_window_allows(tiny_llama):
    target = NativeDecoder.from_hf(tiny_llama(3, vocab=64, layers=2, max_positions=256))
    cost = measure(target, repeats=2)
    assert cost.rows == (1, 2, 4, 8, 16, 32, 64) and all(s > 0 for s in cost.seconds)
    # the small row counts again, after as long a context as the window leaves room for
    assert cost.long_context == 256 - 9 and len(cost.long_seconds) == 4
    assert all(s > 0 for s in cost.long_seconds)


def test_per_cached_is_what_a_row_adds_per_cached_token(tiny_llama, monkeypatch):
    """Steps whose time grows by 2e-7 s a row and cached token (and a fixed time per row): the
    curve's per_cached is that figure; a curve that shrinks with the context (noise) gives 0."""
    target = NativeDecoder.from_hf(tiny_llama(3, vocab=64, layers=2, max_positions=2048))

    def steps(per_cached):
        return lambda target, rows, context, repeats: {
            r: 0.01 + 0.001 * r + per_cached * r * context for r in rows}

    monkeypatch.setattr(timing, "step_seconds", steps(2e-7))
    assert measure(target).per_cached == pytest.approx(2e-7)
    monkeypatch.setattr(timing, "step_seconds", steps(-1e-7))  # noise: longer seemed faster
    assert measure(target).per_cached == 0.0


def load(tiny_llama, seed: int) -> SimpleNamespace:
    target = NativeDecoder.from_hf(tiny_llama(seed, vocab=64, layers=2, max_positions=256))
    return SimpleNamespace(target=target, key=f"tiny-{seed}", weights="float32", kernels="any")


def test_step_cost_is_measured_once_per_model_formats_and_kernel_path(tiny_llama, monkeypatch,
                                                                      tmp_path):
    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    first = step_cost(load(tiny_llama, 4))
    monkeypatch.setattr(timing, "measure",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("measured again")))
    assert step_cost(load(tiny_llama, 4)) == first  # another load of the same model and path


def test_a_curve_saved_in_the_profile_is_used_by_a_later_process(tiny_llama, monkeypatch,
                                                                  tmp_path):
    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    model = load(tiny_llama, 5)
    saved = StepCost((1, 2, 8), (1.0, 1.2, 2.0), 64, 1e-5, 1024, (1.5, 1.8))
    save_step_cost(model, saved)
    monkeypatch.setattr(timing, "_MEASURED", {})  # a new process
    monkeypatch.setattr(timing, "measure",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("measured again")))
    assert step_cost(model) == saved


def test_a_curve_saved_for_another_build_of_the_kernels_is_measured_again(tiny_llama,
                                                                         monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    model = load(tiny_llama, 7)
    kernels = model.target.kernels
    monkeypatch.setattr(kernels, "build_id", "0123456789abcdef", raising=False)
    save_step_cost(model, StepCost((1, 2, 8), (1.0, 1.2, 2.0), 64))
    monkeypatch.setattr(timing, "_MEASURED", {})  # a new process, the kernels' sources changed
    monkeypatch.setattr(kernels, "build_id", "fedcba9876543210", raising=False)
    anew = StepCost((1, 2, 8), (1.0, 1.1, 1.5), 64)
    monkeypatch.setattr(timing, "measure", lambda target, repeats: anew)
    assert step_cost(model) == anew


def test_a_curve_measured_once_is_saved_for_later_processes(tiny_llama, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    monkeypatch.setattr(timing, "_MEASURED", {})
    measured = StepCost((1, 2, 8), (1.0, 1.3, 2.5), 64, 2e-5, 1024, (1.4, 1.9))
    monkeypatch.setattr(timing, "measure", lambda target, repeats: measured)
    model = load(tiny_llama, 6)
    assert step_cost(model) == measured
    monkeypatch.setattr(timing, "_MEASURED", {})  # a new process
    monkeypatch.setattr(timing, "measure",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("measured again")))
    assert step_cost(model) == measured


def test_a_decoder_is_made_without_timing_and_times_once_when_first_needed_saying_so(
        tiny_real_vocab_model, monkeypatch, tmp_path, caplog):
    from specdecode.models import load_model
    from specdecode.pipeline import SpecDecoder

    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))  # no profile with a saved curve
    monkeypatch.setattr(timing, "_MEASURED", {})
    calls = []
    monkeypatch.setattr(timing, "measure", lambda target, repeats: calls.append(repeats) or
                        StepCost((1, 2), (1.0, 1.5)))
    decoder = SpecDecoder(load_model(str(tiny_real_vocab_model)), "lookup")
    assert calls == []
    with caplog.at_level("WARNING", logger="specdecode"):
        assert decoder.cost == StepCost((1, 2), (1.0, 1.5)) and decoder.cost is decoder.cost
    # once, with the first use's repeats (fewer than `tune`'s)
    assert calls == [timing.FIRST_USE_REPEATS] and "steps on this machine once" in caplog.text


def test_threads_asking_a_new_models_cost_at_once_time_it_once_and_share_the_curve(
        tiny_llama, monkeypatch, tmp_path):
    # a server's engine thread and a library call in one process: timed twice, each timing
    # slowed by the other, the two would keep different curves and draft differently
    import threading
    import time

    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    monkeypatch.setattr(timing, "_MEASURED", {})
    calls = []

    def slow_measure(target, repeats):
        calls.append(1)
        time.sleep(0.2)
        return StepCost((1, 2, 8), (1.0, 1.0 + len(calls), 2.0 + len(calls)), 64)

    monkeypatch.setattr(timing, "measure", slow_measure)
    model = load(tiny_llama, 8)
    got = [None, None]

    def ask(i: int) -> None:
        got[i] = step_cost(model)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and got[0] is got[1]
