"""`job.Job`'s waits: what a handler's wait for the next event means when it ends empty."""

from __future__ import annotations

import asyncio

import pytest

from specdecode.app.server import job as job_module
from specdecode.app.server.job import Job, RequestTimeoutError
from specdecode.app.server.request import EngineRequest


def test_a_wait_for_the_deadline_that_ends_a_little_early_is_still_the_timeout(monkeypatch):
    """asyncio may end a timed wait up to its clock's resolution before the deadline, when
    time.monotonic() still reads just short of it: that is the timeout, never an empty event."""
    async def main() -> None:
        job = Job(EngineRequest([], max_new_tokens=1), timeout=60.0)

        async def ended_early(awaitable, timeout):
            awaitable.close()
            raise asyncio.TimeoutError

        monkeypatch.setattr(job_module.asyncio, "wait_for", ended_early)
        with pytest.raises(RequestTimeoutError):
            await job.next_event()
        assert await job.next_event(poll=0.5) is None  # a poll's wait ends empty: no timeout

    asyncio.run(main())
