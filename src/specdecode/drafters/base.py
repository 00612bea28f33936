"""The drafters' registry and their options (the interface they implement: `core.drafter`).

Each drafter registers under a name with its own options, a frozen dataclass `Options` whose fields
are made with `option(...)`: the CLI's flags, the server's `speculative` fields, `resolve` and the
benchmark all read them from the registry, so a new drafter is one new file.
"""

from __future__ import annotations

from dataclasses import field, fields
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..core.constraint import Constraint, allowed, mask_words
from ..core.drafter import Draft, Drafter
from ..core.sampling import SamplingParams, greedy_tokens, probabilities, sample
from ..errors import InvalidParameterError

if TYPE_CHECKING:
    from ..models import LoadedModel


def option(default: Any, help: str, parse: Callable[[str], Any] | None = None) -> Any:
    """A field of a drafter's `Options`: its default, the help text of its CLI flag (`--name`
    with dashes), and how the flag's text becomes a value when `type(default)` cannot (`parse`,
    raising ValueError on bad input)."""
    return field(default=default, metadata={"help": help, "parse": parse})


DRAFTERS: dict[str, type[Drafter]] = {}


def register(name: str) -> Callable[[type[Drafter]], type[Drafter]]:
    def add(cls: type[Drafter]) -> type[Drafter]:
        cls.name = name
        DRAFTERS[name] = cls
        return cls

    return add


def drafter_class(method: str) -> type[Drafter]:
    if method not in DRAFTERS:
        raise InvalidParameterError(
            f"unknown method {method!r} (choose from {', '.join(sorted(DRAFTERS))})"
        )
    return DRAFTERS[method]


def make_options(method: str, values: dict[str, Any]):
    """The `Options` of `method` from user values by field name; values for fields the drafter
    does not have (another drafter's) are ignored. Text values (from a CLI flag or a form) are
    parsed; the dataclass validates."""
    cls = drafter_class(method).Options
    given = {}
    for f in fields(cls):
        if values.get(f.name) is None:
            continue
        value, parse = values[f.name], f.metadata.get("parse")
        if isinstance(value, str) and parse is not None:
            try:
                value = parse(value)
            except ValueError:
                raise InvalidParameterError(
                    f"--{f.name.replace('_', '-')}: cannot read {value!r}") from None
        given[f.name] = value
    return cls(**given)


def option_fields() -> dict[str, list[tuple[str, Any]]]:
    """Every option of every registered drafter: name -> [(method, dataclass field)], for the
    CLI's flags and the server's fields (an option several drafters share appears once)."""
    found: dict[str, list[tuple[str, Any]]] = {}
    for method in sorted(DRAFTERS):
        for f in fields(DRAFTERS[method].Options):
            found.setdefault(f.name, []).append((method, f))
    return found


def draft_chain(
    forward: Callable[[torch.Tensor], torch.Tensor],
    first: torch.Tensor,
    length: int,
    params: SamplingParams,
    generator: torch.Generator | None,
    vocabulary: torch.Tensor | None = None,
    vocab_size: int | None = None,
    stop_below: float = 0.0,
    constraint: Constraint | None = None,
) -> Draft:
    """Autoregressive drafting with any causal model: feed `first` ([T] int64, T >= 1), then take
    up to `length` tokens one at a time, each from q = probabilities(draft logits) (the argmax
    when greedy). A token's chance is the product of the draft model's probabilities of the
    tokens up to it (its confidence that the whole path is right, as EAGLE-2 ranks its nodes);
    drafting stops before a token whose chance is below `stop_below`. The draft's `forwards`
    counts the calls of `forward`; every drafted token but the last has been fed (the last too
    when drafting stopped early).

    `forward` appends tokens to the draft model's cache and returns logits [T', V'] whose last
    row is the last token's (`core.target.forward_last`: that row alone).
    `vocabulary`: [V'] int64, the token id each logits column scores (a drafter whose output layer
    covers only some tokens), None: column i is token i. The draft's q are then over all
    `vocab_size` ids, zero outside `vocabulary`: a token is drafted from exactly that q.

    `constraint` (the sequence's grammar, left where it was found): the draft model drafts under
    it, from its logits masked to what the grammar allows (q is then that masked distribution,
    exactly what the token was drawn from), and a span the grammar forces is taken whole, at
    its state's one choice (q one-hot: the proposal is certain given the path), and fed in one
    forward."""
    tokens: list[int] = []
    qs, chances, forced = [], [], 0
    logits, forwards, chance = forward(first)[-1], 1, 1.0
    size = vocab_size or logits.shape[-1]
    try:
        while len(tokens) < length:
            span = constraint.take_forced(length - len(tokens)) if constraint else []
            if span:
                tokens += span
                forced += len(span)
                chances += [chance] * len(span)
                if not params.greedy:
                    qs += [torch.nn.functional.one_hot(torch.tensor(t), size).float()
                           for t in span]
                if len(tokens) < length:
                    logits, forwards = forward(torch.tensor(span))[-1], forwards + 1
                continue
            if constraint is not None:
                logits = _masked(constraint, logits, vocabulary, size)
                if logits is None:  # nothing the grammar allows is in the draft's vocabulary
                    break
            if params.greedy:
                pick = torch.tensor(greedy_tokens(logits[None])[0], device=logits.device)
                chance *= float(torch.softmax(logits.float(), -1)[pick])
            else:
                q = probabilities(logits, params)
                pick = sample(q, generator)
                chance *= float(q[pick])
                if vocabulary is not None:
                    q = torch.zeros(size, dtype=q.dtype).index_copy_(0, vocabulary, q)
            if chance < stop_below:
                break
            token = int(pick if vocabulary is None else vocabulary[pick])
            if constraint is not None:
                constraint.accept(token)
            if not params.greedy:
                qs.append(q)
            tokens.append(token)
            chances.append(chance)
            if len(tokens) < length:
                logits, forwards = forward(torch.tensor([token]))[-1], forwards + 1
    finally:
        if constraint is not None and tokens:
            constraint.rollback(len(tokens))
    if not tokens:
        return Draft(torch.empty(0, dtype=torch.long), None, forwards)
    q = torch.stack(qs) if qs else None
    return Draft(torch.tensor(tokens, dtype=torch.long), q, forwards,
                 chances=torch.tensor(chances), forced=forced)


def _masked(constraint: Constraint, logits: torch.Tensor, vocabulary: torch.Tensor | None,
            size: int) -> torch.Tensor | None:
    """logits [V'] with -inf where the grammar forbids the column's token; None when it allows
    none of them."""
    bits = torch.empty(1, mask_words(size), dtype=torch.int32)
    constraint.fill(bits, 0)
    ok = allowed(bits, size)[0]
    if vocabulary is not None:
        ok = ok[vocabulary]
    if not bool(ok.any()):
        return None
    return logits.masked_fill(~ok, float("-inf"))


class ForwardClock:
    """A draft model's seconds per forward, over its drafting steps; a step feeding more than
    CATCH_UP tokens is a prompt's first reading, not timed. `cost` puts a forward in the step's
    tokens: a node is worth its forward when its chance brings more than that on top of what its
    row costs (the budget's min_chance).

    The estimate is a moving average (WEIGHT on the newest). Other work on the same cores for a
    few seconds can raise it until no forward seems to pay (`priced_out`), and then nothing would
    time a forward again: the drafter would stay off for good (a 100 ms estimate held `draft` at
    τ 1.16 on every later request: BENCHMARKS.md). So after PROBE calls it priced out, the next
    call whose feed is short enough to be timed runs a forward regardless, and that forward's
    time replaces the estimate. (A sequence that has fallen further behind would pay for the
    whole catch-up untimed: under load, where forwards are priced out by the shared step rather
    than by a stale estimate, probing those would make every sequence catch up in turn.)"""

    WEIGHT = 0.1
    CATCH_UP = 16
    PROBE = 32

    def __init__(self) -> None:
        self.seconds = 0.0
        self.untimed = 0  # calls priced out since a forward was last timed

    def cost(self, budget) -> float:
        return self.seconds / budget.token_seconds if budget.token_seconds > 0 else 0.0

    def priced_out(self, budget, fed: int) -> bool:
        """Whether a call that would feed `fed` tokens should run no forward: at the estimated
        cost no token's chance can pay for one (min_chance + cost >= 1), and it is not a probe
        (the PROBE calls are not yet up, or its feed would not be timed)."""
        if budget.min_chance + self.cost(budget) < 1.0:
            return False
        self.untimed += 1
        return self.untimed <= self.PROBE or fed > self.CATCH_UP

    def record(self, fed: int, seconds: float, forwards: int) -> None:
        """A drafting call that fed `fed` tokens and made `forwards` forwards in `seconds`."""
        if fed <= self.CATCH_UP:
            each = seconds / forwards
            probe = self.untimed > self.PROBE
            self.seconds = each if not self.seconds or probe else (
                (1 - self.WEIGHT) * self.seconds + self.WEIGHT * each)
            self.untimed = 0


def create_drafter(method: str, model: "LoadedModel", options=None) -> Drafter:
    """The drafter registered as `method`, built with `options` (its Options; default: its
    defaults)."""
    cls = drafter_class(method)
    return cls.create(model, cls.Options() if options is None else options)
