"""A stream relayed by `serve --ray`'s ingress, and how it goes on when its replica dies.

The ingress (`ray_ingress`) gives each request it forwards a `Relay`: a seed its answer's ids
are made from and its creation time, so that any replica writes the same answer with the same
ids (`new_id`, `created`), and, when it sends the request again because the replica serving it
died, the chunks that replica had sent (`sent`). A relayed stream carries, before the events of
each engine chunk that does not end its choice, an SSE comment naming the chunk's tokens
(`comment`), which the ingress strips: it knows which chunks it delivered and how many events
after the last of them. The new replica continues the request from those tokens
(`core.engine.admit`'s `generated`): it replays the sent chunks, which give the same events
again (the ingress skips them), and generates the rest, which for a greedy request is what the
dead replica would have sent.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field

SENT = ": specdecode-sent "  # the comment's opening


@dataclass(frozen=True)
class Relay:
    seed: str  # the answer's ids are made from it (`new_id`)
    created: int  # the answer's creation time, Unix seconds
    # (choice index, token ids) of each chunk the client has had, in the order it had them
    sent: tuple[tuple[int, tuple[int, ...]], ...] = ()
    resumes: int = 0  # times the stream was sent again after a replica died (0: first try)
    made: list[int] = field(default_factory=lambda: [0], compare=False)  # ids made so far


_CURRENT: contextvars.ContextVar[Relay | None] = contextvars.ContextVar("specdecode_relay",
                                                                         default=None)


def current() -> Relay | None:
    """The relay of the request being served (None: not relayed)."""
    return _CURRENT.get()


def context(relay: Relay) -> contextvars.Context:
    """A context in which a request's task runs as relayed by `relay`."""
    ctx = contextvars.copy_context()
    ctx.run(_CURRENT.set, Relay(relay.seed, relay.created, relay.sent, relay.resumes))  # own ids
    return ctx


def new_id(prefix: str) -> str:
    """A new id for the answer being written: random, or, relayed, the next of its seed's."""
    relay = current()
    if relay is None:
        return prefix + uuid.uuid4().hex
    relay.made[0] += 1
    return prefix + hashlib.blake2b(f"{relay.seed}:{relay.made[0]}".encode(),
                                    digest_size=16).hexdigest()


def created() -> int:
    """The answer's creation time (Unix seconds): the relay's, else now."""
    relay = current()
    return relay.created if relay is not None else int(time.time())


def comment(choice: int, ids: list[int]) -> str:
    return f"{SENT}{json.dumps([choice, ids])}\n\n"


def sent_chunk(event: bytes) -> tuple[int, tuple[int, ...]] | None:
    """The chunk an SSE event names, if it is one of `comment`'s."""
    if not event.startswith(SENT.encode()):
        return None
    choice, ids = json.loads(event[len(SENT):])
    return choice, tuple(ids)
