"""One generation request in flight (`Job`), shared by its HTTP handler on the asyncio loop and
the engine thread (`worker.EngineWorker`), and the errors that end one.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Iterable

from ...core.budget import DraftBudget
from ...core.engine import Chunk
from ...core.run_stats import RunStats
from ...models import LoadedModel
from ...pipeline import SpecDecoder
from . import relay
from .request import EngineRequest

TIMEOUT_MESSAGE = "the request ran past the server's time limit"
SHUTDOWN_MESSAGE = "the server shut down before the request finished"


class ServerBusyError(Exception):
    """The queue is full (or the server is shutting down): answer 503, try again later."""


class ServerShutdownError(Exception):
    """The server stopped before the request finished."""


class RequestTimeoutError(Exception):
    """The request ran past --request-timeout (queueing included)."""


class InternalError(Exception):
    """A bug surfaced while generating; the details are in the server log, not in the response."""


class Job:
    """One generation request (`request.EngineRequest`) in flight, shared by the handler (asyncio
    loop) and the worker thread.

    `events` receives (index, Chunk) pairs, each choice's last chunk with finish_reason set, or
    one exception that ends the job. The request's prompts are prepared on the worker thread
    (the tokenizer is not thread-safe), and so are the bytes of the tokens the chunks' logprobs
    name (`pieces`, filled before a chunk is sent)."""

    def __init__(self, request: EngineRequest, timeout: float) -> None:
        self.request = request
        self.created = time.monotonic()
        self.deadline = self.created + timeout
        self.client_checked = self.created  # when its handler last asked whether its client left
        self.prompt_ids: list[list[int]] = []  # set by the worker before the first chunk is sent
        self.runs: list[RunStats] = []  # each choice's statistics, as they grow (worker's)
        self.pieces: dict[int, bytes] = {}  # token id -> its bytes, for logprobs and echo
        self.decoder: SpecDecoder | None = None  # set by the worker before the first chunk
        self.budget: DraftBudget | None = None  # the caps it runs with, set with the decoder
        self.cancelled = threading.Event()
        self.events: asyncio.Queue = asyncio.Queue()
        # set once its prompts are read and checked and its choices joined the batch: from
        # here on only the prefill stands between it and its first token
        self.admitted = asyncio.Event()
        self.outcome: str | None = None  # how its stream ended, said by the stream (None: not yet)
        # its first prompt's read so far, (total, from the prefix cache, in the cache, ms since
        # it came), set by the worker after each step; None until it joined
        self.progress: tuple[int, int, int, float] | None = None
        # relayed by `serve --ray`'s ingress (`relay`): the chunks handed out, in order, and,
        # for a continuation, those its client has had already
        self.relay = relay.current()
        self.handed: list[tuple[int, Chunk]] = []
        self._loop = asyncio.get_running_loop()

    def cancel(self) -> None:
        """Stop generating at the next step (idempotent, from any thread)."""
        self.cancelled.set()

    def mark_admitted(self) -> None:
        """From the worker thread, once the job joined the batch."""
        try:
            self._loop.call_soon_threadsafe(self.admitted.set)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self.cancel()

    def fail(self, error: Exception) -> None:
        self.cancel()
        self.send(error)

    @property
    def choices(self) -> int:
        return self.request.choices

    @property
    def prompt_tokens(self) -> int:
        return sum(map(len, self.prompt_ids))

    def learn_pieces(self, model: LoadedModel, ids: Iterable[int]) -> None:
        """Record the bytes of `ids` (on the worker thread)."""
        new = sorted(set(ids) - self.pieces.keys())
        self.pieces.update(zip(new, model.token_bytes(new)))

    def send(self, event: tuple[int, Chunk] | Exception) -> None:
        """Hand an event to the handler; from any thread."""
        try:
            self._loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self.cancel()

    async def next_event(self, poll: float | None = None) -> tuple[int, Chunk] | None:
        """The next (choice index, chunk), or None when `poll` seconds pass without one; raises
        the job's error, or RequestTimeoutError once the deadline has passed."""
        try:
            event = self.events.get_nowait()  # what already arrived is served, even if late
        except asyncio.QueueEmpty:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise RequestTimeoutError(TIMEOUT_MESSAGE) from None
            try:
                event = await asyncio.wait_for(self.events.get(),
                                               left if poll is None else min(poll, left))
            except asyncio.TimeoutError:
                # without a poll the wait was the deadline's, and asyncio may end a wait up to
                # its clock's resolution early: time.monotonic() can still read just before it
                if poll is None or time.monotonic() >= self.deadline:
                    raise RequestTimeoutError(TIMEOUT_MESSAGE) from None
                return None
        if isinstance(event, Exception):
            raise event
        if self.relay is not None:
            self.handed.append(event)
        return event
