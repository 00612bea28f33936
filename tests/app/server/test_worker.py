"""`worker.Job`'s waits: what a handler's wait for the next event means when it ends empty."""

from __future__ import annotations

import asyncio
import threading

import pytest

from specdecode.app.server import worker
from specdecode.app.server.request import EngineRequest
from specdecode.app.server.worker import Job, RequestTimeoutError


def test_a_wait_for_the_deadline_that_ends_a_little_early_is_still_the_timeout(monkeypatch):
    """asyncio may end a timed wait up to its clock's resolution before the deadline, when
    time.monotonic() still reads just short of it: that is the timeout, never an empty event."""
    async def main() -> None:
        job = Job(EngineRequest([], max_new_tokens=1), timeout=60.0)

        async def ended_early(awaitable, timeout):
            awaitable.close()
            raise asyncio.TimeoutError

        monkeypatch.setattr(worker.asyncio, "wait_for", ended_early)
        with pytest.raises(RequestTimeoutError):
            await job.next_event()
        assert await job.next_event(poll=0.5) is None  # a poll's wait ends empty: no timeout

    asyncio.run(main())


def test_stop_ends_the_drains_timer_so_no_thread_outlives_the_server(served_model):
    """A drain's timer left to fire after the process began to exit freed the engine's tensors
    without the interpreter there, and the process aborted ("terminate called ...")."""
    from specdecode.app.server.metrics import ServerMetrics
    from specdecode.app.server.worker import DecoderCache, EngineWorker
    from specdecode.pipeline import SpecDecoder

    before = set(threading.enumerate())
    engine = EngineWorker(DecoderCache(SpecDecoder(served_model, "ar"), {}), ServerMetrics(),
                          max_queue=4, max_batch=2, speculation="adaptive",
                          prefix_cache_tokens=0)
    engine.drain(grace=60.0)
    engine.stop()
    assert [t for t in threading.enumerate() if t not in before and t.is_alive()] == []
