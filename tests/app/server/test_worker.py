"""The engine worker: its stop, its calls on the engine thread."""

from __future__ import annotations

import asyncio
import threading

import pytest


def test_stop_ends_the_drains_timer_so_no_thread_outlives_the_server(served_model):
    """A drain's timer left to fire after the process began to exit freed the engine's tensors
    without the interpreter there, and the process aborted ("terminate called ...")."""
    from specdecode.app.server.metrics import ServerMetrics
    from specdecode.app.server.worker import DecoderCache, EngineWorker
    from specdecode.pipeline import SpecDecoder

    before = set(threading.enumerate())
    engine = EngineWorker(DecoderCache(SpecDecoder(served_model, "ar"), {}), ServerMetrics(),
                          max_queue=4, max_batch=2, speculation="adaptive")
    engine.drain(grace=60.0)
    engine.stop()
    assert [t for t in threading.enumerate() if t not in before and t.is_alive()] == []


def test_a_call_runs_on_the_engine_thread_and_returns_or_raises(served_model):
    """The tokenizer is used on the engine thread only, by calls between its steps."""
    from specdecode.app.server.metrics import ServerMetrics
    from specdecode.app.server.worker import DecoderCache, EngineWorker
    from specdecode.pipeline import SpecDecoder

    engine = EngineWorker(DecoderCache(SpecDecoder(served_model, "ar"), {}), ServerMetrics(),
                          max_queue=4, max_batch=2)

    async def main() -> None:
        assert await engine.call(lambda: threading.current_thread().name) == "specdecode-engine"
        await asyncio.sleep(0.3)  # the thread now idles in its wait for a job
        assert await engine.call(lambda: 7) == 7
        with pytest.raises(ZeroDivisionError):
            await engine.call(lambda: 1 / 0)

    try:
        asyncio.run(main())
    finally:
        engine.stop()
