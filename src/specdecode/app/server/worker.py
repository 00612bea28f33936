"""One engine thread, a batch of running requests, a bounded queue.

HTTP handlers run on the asyncio loop and must never block on the model; they submit a `Job` to
`EngineWorker`, whose thread admits up to `max_batch` jobs into one `core.engine.Batch` (each
request has its own KV cache and drafter state) and steps them together: every step is one target
forward over all their rows, and each job's chunk goes back to the loop with
`call_soon_threadsafe`. A job's `cancelled` flag and deadline are checked between steps; a
cancelled or timed-out job leaves the batch before the next step, freeing its place and cache.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from typing import Any, Callable, TypeVar

from ...core.engine import Batch, Speculation
from ...core.prefix_cache import PrefixCache
from ...core.sequence import SequenceState
from ...errors import InvalidParameterError, KernelError, SpecDecodeError
from ...models.timing import step_cost
from ...pipeline import SpecDecoder
from ...spec import resolve
from .job import SHUTDOWN_MESSAGE, InternalError, Job, ServerBusyError, ServerShutdownError
from .metrics import ServerMetrics

log = logging.getLogger("specdecode.server")
T = TypeVar("T")
_WAKE = object()  # put in the job queue by `call`: an idle engine thread wakes to run it


class DecoderCache:
    """SpecDecoders on the one loaded model, one per method.

    A drafter can be expensive to build (`draft` loads a second model), so each method's decoder is
    built once; a request's own draft caps are passed per request (`SpecDecoder.request`)."""

    def __init__(self, default: SpecDecoder, options: dict[str, Any]) -> None:
        self.default, self.options = default, options
        self._by_method: dict[str, SpecDecoder] = {default.method: default}

    def get(self, method: str | None) -> SpecDecoder:
        """Raises SpecDecodeError for an unknown method or unusable options (the client's fault)."""
        method = method or self.default.method
        if method not in self._by_method:
            d = self.default
            spec = resolve(d.model, method, adaptive=d.adaptive, options=self.options)
            self._by_method[method] = SpecDecoder(d.model, spec)
        return self._by_method[method]


class EngineWorker:
    """Steps up to `max_batch` jobs together on its own thread; at most `max_queue` wait (503
    beyond that)."""

    def __init__(self, decoders: DecoderCache, metrics: ServerMetrics, max_queue: int = 16,
                 max_batch: int = 8, speculation: Speculation = "adaptive",
                 prefixes: PrefixCache | None = None) -> None:
        if max_queue < 1 or max_batch < 1:
            raise ValueError(f"max_queue and max_batch must be >= 1, got {max_queue}, {max_batch}")
        self.decoders, self.metrics = decoders, metrics
        self.prefixes = prefixes  # kept prompts' caches (None: none kept); the engine thread's
        self.max_batch, self.speculation = max_batch, speculation
        self._jobs: queue.Queue[Job] = queue.Queue(max_queue)
        self._calls: queue.Queue[tuple[Callable, concurrent.futures.Future]] = queue.Queue()
        # id(sequence) -> its job, itself and its choice index in the job
        self._running: dict[int, tuple[Job, SequenceState, int]] = {}
        self._held: Job | None = None  # the next job, waiting for room for all its choices
        self._accepting = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drain_timer: threading.Timer | None = None  # `drain`'s, until `stop`
        self._start_lock = threading.Lock()
        metrics.queue_length.set_function(self._jobs.qsize)  # read at scrape time

    @property
    def accepting(self) -> bool:
        return self._accepting

    @property
    def queue_length(self) -> int:
        return self._jobs.qsize()

    def start(self) -> None:
        """Run the engine loop on a thread of its own (unless bound to a thread already)."""
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self.run, name="specdecode-engine",
                                                daemon=True)
                self._thread.start()

    def bind_to_this_thread(self) -> None:
        """The calling thread will run the loop (`run`): no thread of its own is started."""
        with self._start_lock:
            if self._thread is not None:
                raise RuntimeError("the engine loop already has a thread")
            self._thread = threading.current_thread()

    def submit(self, job: Job) -> None:
        """Queue a job; raises ServerBusyError when the queue is full or the server is stopping."""
        if not self._accepting:
            raise ServerBusyError("the server is shutting down")
        self.start()
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            raise ServerBusyError("the server is busy: the request queue is full") from None

    async def call(self, fn: Callable[[], T]) -> T:
        """`fn()` run on the engine thread between two steps, its result or error returned: the
        tokenizer is only ever used there (its settings, special tokens split or not, are its
        own state while it runs, so two threads using it could read each other's)."""
        if not self._accepting:
            raise ServerBusyError("the server is shutting down")
        self.start()
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._calls.put((fn, future))
        try:
            self._jobs.put_nowait(_WAKE)  # type: ignore[arg-type]
        except queue.Full:  # a full queue: the thread is not idle, it runs calls every step
            pass
        return await asyncio.wrap_future(future)

    def _run_calls(self) -> None:
        while True:
            try:
                fn, future = self._calls.get_nowait()
            except queue.Empty:
                return
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except Exception as exc:
                    future.set_exception(exc)

    def drain(self, grace: float) -> None:
        """Shutdown, step 1: refuse new jobs; cancel whatever still runs after `grace` seconds."""
        self._accepting = False
        timer = threading.Timer(grace, self.cancel_all, [ServerShutdownError(SHUTDOWN_MESSAGE)])
        timer.daemon = True
        timer.start()
        self._drain_timer = timer

    def stop(self, timeout: float = 5.0) -> None:
        """Shutdown, step 2: cancel everything and end the loop (and its thread, if its own)."""
        self._accepting = False
        self.cancel_all(ServerShutdownError(SHUTDOWN_MESSAGE))
        self._stop.set()
        # the drain's timer ends here too: left to fire after the process began to exit, its
        # thread dropped the last references to the engine's tensors there, and freeing a
        # tensor without the interpreter aborted the process ("terminate called ...")
        timer, self._drain_timer = self._drain_timer, None
        if timer is not None:
            timer.cancel()
            timer.join(timeout)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread() and thread.daemon:
            thread.join(timeout)

    def cancel_all(self, error: Exception) -> None:
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not _WAKE:
                job.fail(error)
        while True:
            try:
                self._calls.get_nowait()[1].set_exception(error)
            except queue.Empty:
                break
            except concurrent.futures.InvalidStateError:  # its caller gave up on it
                pass
        for job in {id(job): job for job, _, _ in self._running.values()}.values():
            job.fail(error)

    def run(self, until: Callable[[], bool] = lambda: False) -> None:
        """The engine loop, until `stop` (or `until()` is true)."""
        model = self.decoders.default.model
        batch = Batch(model.target, step_cost(model), model.eos_token_ids, model.decode,
                      self.speculation, prefixes=self.prefixes)
        while not self._stop.is_set() and not until():
            self._run_calls()
            self._admit(batch)
            self._leave_stopped(batch)
            self.metrics.busy.set(1 if len(batch) else 0)
            self.metrics.batch_size.set(len(batch))
            if len(batch):
                self._step(batch)

    def _admit(self, batch: Batch) -> None:
        """Start queued jobs while the batch has room for all their choices; wait briefly for
        one when it is empty."""
        while len(batch) < self.max_batch:
            try:
                job = self._held or (self._jobs.get(timeout=0.2) if not len(batch)
                                     else self._jobs.get_nowait())
            except queue.Empty:
                return
            if job is _WAKE:
                return  # a `call` waits
            self._held = None
            if job.cancelled.is_set() or time.monotonic() >= job.deadline:
                continue  # the client left, or its time ran out, while the job was queued
            if len(batch) and len(batch) + job.choices > self.max_batch:
                self._held = job
                return
            seqs: list[SequenceState] = []
            try:
                self._join(batch, job, seqs)
                self._note_progress()
                job.mark_admitted()
            except Exception as exc:
                for seq in seqs:
                    batch.leave(seq)
                    del self._running[id(seq)]
                if not isinstance(exc, SpecDecodeError):
                    log.exception("generation failed")
                    exc = InternalError("internal error while generating; see the server log")
                job.send(exc)

    def _join(self, batch: Batch, job: Job, seqs: list[SequenceState]) -> None:
        """Join the job's choices to the batch (appending them to `seqs`): per prompt, the
        first reads it and the others share that prefill (`Batch.fork`); choice i of a prompt is
        seeded with seed + i. A relayed job that continues a dead replica's stream
        (`relay.Relay.sent`, one choice) continues from the tokens sent, whose chunks the batch
        hands out again first, in order, once they are read (`core.engine.admit`)."""
        asked = job.request
        decoder = job.decoder = self.decoders.get(asked.method)
        # what it runs with, for its usage report
        job.budget = decoder.caps(asked.max_draft_nodes, asked.max_draft_depth)
        sent = job.relay.sent if job.relay is not None else ()
        if sent and asked.choices > 1:  # their chunks would interleave otherwise than before
            raise InvalidParameterError("a stream of several choices is not continued")
        for p, prepare in enumerate(asked.prompts):
            ids = prepare()
            job.prompt_ids.append(ids)
            if asked.echo:
                job.learn_pieces(decoder.model, ids)
            first = None
            for i in range(asked.n):
                request = decoder.request(ids, max_draft_nodes=job.budget.nodes,
                                          max_draft_depth=job.budget.depth,
                                          generated=[chunk for _, chunk in sent],
                                          **asked.engine_settings(i))
                seq = batch.join(request) if first is None else batch.fork(first, request)
                first = first or seq
                seqs.append(seq)
                job.runs.append(seq.stats)
                self._running[id(seq)] = (job, seq, p * asked.n + i)
        if job.relay is not None and job.relay.resumes:
            self.metrics.resumed.inc()
            self.metrics.resumed_tokens.inc(sum(len(ids) for _, ids in sent))

    def running(self) -> list[dict]:
        """llama.cpp's view of each choice decoding now (`/slots`): its prompt's tokens, the
        tokens it generated, its method. On the engine thread (`call`), which owns the batch."""
        return [{"id_task": id(job), "n_prompt_tokens": seq.prompt_length,
                 "n_decoded": seq.stats.new_tokens, "speculative": job.decoder.method}
                for job, seq, _ in self._running.values()]

    def _note_progress(self) -> None:
        """Each job's first prompt's read so far (`Job.progress`), for streams that report it."""
        now = time.monotonic()
        for job, seq, index in self._running.values():
            # a read prompt's progress is final: the decode steps after it skip the job
            if index == 0 and (job.progress is None or job.progress[2] < job.progress[0]):
                done = seq.prompt_length if not seq.to_prefill else seq.cache.length
                job.progress = (seq.prompt_length, seq.stats.cached_prompt_tokens, done,
                                (now - job.created) * 1e3)

    def _leave_stopped(self, batch: Batch) -> None:
        """Cancelled and timed-out jobs leave the batch (the handler reports the timeout once it
        has read what was sent)."""
        now = time.monotonic()
        for key, (job, seq, _) in list(self._running.items()):
            if job.cancelled.is_set() or now >= job.deadline:
                batch.leave(seq)
                del self._running[key]

    def _step(self, batch: Batch) -> None:
        """One step of every running sequence. A step that fails ends the requests it held, each
        told why (a kernel's one line, else an internal error); the server goes on with the
        queue."""
        try:
            results = batch.step()
        except Exception as exc:
            log.exception("generation failed")
            error = exc if isinstance(exc, KernelError) else InternalError(
                "internal error while generating; see the server log")
            for job, seq, _ in list(self._running.values()):
                batch.leave(seq)
            for job in {id(job): job for job, _, _ in self._running.values()}.values():
                job.send(error)
            self._running.clear()
            return
        self.metrics.observe_step(batch.last_step)
        self._note_progress()
        model = self.decoders.default.model
        for seq, chunk in results:
            job, _, index = self._running[id(seq)]
            if seq.stats.target_forwards == 1 and index == 0:
                self.metrics.ttft.labels(job.decoder.method).observe(
                    time.monotonic() - job.created)
            named = [(lp.token, *(t for t, _ in lp.top)) for lp in
                     (*(chunk.logprobs or ()), *filter(None, chunk.prompt_logprobs or ()))]
            if named:
                job.learn_pieces(model, (t for ids in named for t in ids))
            job.send((index, chunk))
            if chunk.finish_reason is not None:
                self.metrics.observe_run(job.decoder.method, chunk.finish_reason, chunk.stats,
                                         seq.prompt_length)
                del self._running[id(seq)]

