"""Constraints as a stage of verification: cutting and extending drafts, the masks of every row,
greedy constrained speculative output token-identical to plain constrained greedy (chains, trees,
batched), and constrained speculative sampling distributed as plain constrained sampling (the
chi-square test of `test_distribution`, with power checks that fail a stage that masks only the
first row or leaves a sampled draft's q unrenormalized)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from mock_target import MockTarget
from test_distribution import (ALPHA, LENGTH, PLAIN_SEEDS, PROMPT, SPEC_SEEDS, T1, V,
                               FixedDrafter, eagle_drafter, homogeneity_pvalue, suffix_drafter)
from test_distribution import draft_model, target_model  # noqa: F401,F811 (their fixtures)

import specdecode.core.engine
from specdecode.core.batch import Request, generate_batch
from specdecode.core.constraint import Constraint, Grammar, allowed, mask_words
from specdecode.core.cost import StepCost
from specdecode.core.drafter import Draft, Drafter
from specdecode.core.engine import generate, stream
from specdecode.core.masking import constrain, masks
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.drafters.draft_model import DraftModel
from specdecode.drafters.layerskip import LayerSkip
from specdecode.drafters.lookup import PromptLookup
from specdecode.drafters.plain import NoDrafter
from specdecode.errors import InvalidParameterError
from specdecode.models.decoder import NativeDecoder
from seeding import unseeded_outcomes


class NoRepeat(Constraint):
    """A toy grammar: a token t is never followed by itself (nor by t + 1 when `skip`), and
    `lead` forces `follow` after it."""

    def __init__(self, vocab: int, lead: int, follow: int, skip: bool = False) -> None:
        self.vocab, self.lead, self.follow, self.skip = vocab, lead, follow, skip
        self.tokens: list[int] = []

    def allowed_set(self) -> list[int]:
        if not self.tokens:
            return list(range(self.vocab))
        last = self.tokens[-1]
        if last == self.lead:
            return [self.follow]
        return [t for t in range(self.vocab)
                if t != last and not (self.skip and t == (last + 1) % self.vocab)]

    def fill(self, masks: torch.Tensor, row: int) -> None:
        bits = torch.zeros(mask_words(self.vocab) * 32, dtype=torch.bool)
        bits[self.allowed_set()] = True
        words = [sum(1 << b for b in range(32) if bits[w * 32 + b]) for w in range(len(masks[row]))]
        masks[row] = torch.tensor(words, dtype=torch.int64).to(torch.int32)

    def accept(self, token: int) -> bool:
        if token not in self.allowed_set():
            return False
        self.tokens.append(token)
        return True

    def rollback(self, tokens: int) -> None:
        del self.tokens[len(self.tokens) - tokens:]

    def forced(self) -> list[int]:
        return [self.follow] if self.tokens and self.tokens[-1] == self.lead else []


class NoRepeatGrammar(Grammar):
    def __init__(self, vocab: int, lead: int = 3, follow: int = 1, skip: bool = False) -> None:
        self.vocab, self.lead, self.follow, self.skip = vocab, lead, follow, skip

    def matcher(self) -> NoRepeat:
        return NoRepeat(self.vocab, self.lead, self.follow, self.skip)


def follows_rule(tokens: list[int], lead: int = 3, follow: int = 1, vocab: int = 0) -> bool:
    """`vocab` > 0: t + 1 (mod vocab) may not follow t either."""
    return all(b != a and (a != lead or b == follow) and not (vocab and b == (a + 1) % vocab)
               for a, b in zip(tokens, tokens[1:]))


# --- the pieces ------------------------------------------------------------------------------


def test_allowed_unpacks_bit_t_of_word_t_over_32():
    bitmask = torch.tensor([[1 | (1 << 31), 0b100]], dtype=torch.int64).to(torch.int32)
    assert allowed(bitmask, 40)[0].nonzero().flatten().tolist() == [0, 31, 34]


def test_constrain_cuts_a_forbidden_node_and_its_subtree_and_restores_the_matcher():
    m = NoRepeat(8, lead=7, follow=1)
    m.accept(2)
    # root children 2 (forbidden: repeats) and 4; 2's child 5 goes with it; 4's children 4, 6
    draft = Draft(torch.tensor([2, 4, 5, 4, 6]), None, parents=torch.tensor([-1, -1, 0, 1, 1]))
    kept, forced = constrain(m, draft)
    assert kept.tokens.tolist() == [4, 6] and kept.parents.tolist() == [-1, 0]
    assert forced == 0 and m.tokens == [2]


def test_constrain_extends_a_deterministic_chain_by_the_forced_span():
    m = NoRepeat(8, lead=3, follow=1)
    draft = Draft(torch.tensor([2, 3]), None, chances=torch.tensor([0.9, 0.5]))
    extended, forced = constrain(m, draft)
    assert extended.tokens.tolist() == [2, 3, 1] and forced == 1
    assert extended.chances.tolist() == [0.8999999761581421, 0.5, 0.5] and m.tokens == []
    empty, forced = constrain(NoRepeat(8, 3, 1), Draft(torch.empty(0, dtype=torch.long), None))
    assert empty.tokens.tolist() == [] and forced == 0
    m.accept(3)  # at a forcing state an empty draft becomes the forced span, certain
    span, forced = constrain(m, Draft(torch.empty(0, dtype=torch.long), None))
    assert span.tokens.tolist() == [1] and span.chances.tolist() == [1.0] and forced == 1


def test_a_sampled_chain_is_cut_but_never_extended():
    q = torch.full((2, 8), 1 / 8)
    kept, forced = constrain(NoRepeat(8, 3, 1), Draft(torch.tensor([2, 3]), q))
    assert kept.tokens.tolist() == [2, 3] and forced == 0


def test_masks_give_every_row_the_state_after_its_path():
    m = NoRepeat(8, lead=3, follow=1)
    tree = Draft(torch.tensor([3, 2, 1]), None, parents=torch.tensor([-1, -1, 0])).tree
    rows = allowed(masks(m, tree, 8), 8)
    assert rows[0].all()  # nothing generated yet
    assert rows[1].nonzero().flatten().tolist() == [1]  # after 3: 1 forced
    assert 2 not in rows[2].nonzero().flatten().tolist()  # after 2
    assert 1 not in rows[3].nonzero().flatten().tolist()  # after 3, 1
    assert m.tokens == []


# --- greedy: token-identical to plain constrained greedy -------------------------------------

VOCAB = 16


def greedy_runs(drafter, limit, cost=None, grammar=None, target=None):
    t = target or MockTarget(vocab=VOCAB, layers=2, max_length=256, seed=5)
    grammar = grammar or NoRepeatGrammar(VOCAB, lead=3, follow=1)
    prompts = [[3, 1, 4, 1, 5, 9, 2, 6] * 3, [1, 2, 3] * 8, [7, 7, 8, 9, 3, 1, 3, 1] * 2]
    return [generate(t, drafter, p, GenerationConfig(40, grammar=grammar),
                     limit and DraftLimit(limit.nodes, limit.depth), cost=cost)
            for p in prompts]


@pytest.mark.parametrize("drafter, limit", [
    (PromptLookup(3, 1), DraftLimit(6, 6)),
    (FixedDrafter([3, 1, 3, 1, 2]), DraftLimit(5, 5)),
], ids=["lookup", "fixed"])
def test_greedy_constrained_speculative_output_equals_plain_constrained_greedy(drafter, limit):
    plain = greedy_runs(NoDrafter(), None)
    spec = greedy_runs(drafter, limit)
    assert [r.token_ids for r in spec] == [r.token_ids for r in plain]
    assert all(follows_rule(r.token_ids) for r in plain)
    assert sum(r.stats.accepted for r in spec) > 0


DRAFTING_MODELS = {  # drafters that run a model: they draft under the grammar themselves
    "draft": lambda target: DraftModel(MockTarget(vocab=VOCAB, layers=1, max_length=256, seed=9)),
    "layerskip": lambda target: LayerSkip(target, (0,)),
}


@pytest.mark.parametrize("name", DRAFTING_MODELS)
def test_a_drafting_model_drafts_under_the_grammar_and_keeps_greedy_output(monkeypatch, name):
    """The drafter masks its own logits and takes forced spans: the stage never has to cut its
    proposals, and the output is plain constrained greedy's."""
    import specdecode.core.masking as masking

    cuts = []
    real = masking.constrain

    def counting(constraint, draft):
        kept, forced = real(constraint, draft)
        cuts.append(len(draft) + forced - len(kept))
        return kept, forced

    monkeypatch.setattr(specdecode.core.engine, "constrain", counting)
    plain = greedy_runs(NoDrafter(), None)
    target = MockTarget(vocab=VOCAB, layers=2, max_length=256, seed=5)
    spec = greedy_runs(DRAFTING_MODELS[name](target), DraftLimit(5, 5), target=target)
    assert [r.token_ids for r in spec] == [r.token_ids for r in plain]
    assert cuts and not any(cuts) and sum(r.stats.drafted for r in spec) > 0


def test_greedy_constrained_tree_drafts_equal_plain_constrained_greedy():
    plain = greedy_runs(NoDrafter(), None)
    spec = greedy_runs(suffix_drafter(), DraftLimit(8, 4))
    assert [r.token_ids for r in spec] == [r.token_ids for r in plain]


def test_greedy_constrained_batched_equals_plain_constrained_greedy():
    t = MockTarget(vocab=VOCAB, layers=2, max_length=256, seed=5)
    grammar = NoRepeatGrammar(VOCAB)
    prompts = [[3, 1, 4, 1, 5, 9, 2, 6] * 3, [1, 2, 3] * 8, [7, 7, 8, 9, 3, 1, 3, 1] * 2]
    plain = [generate(t, NoDrafter(), p, GenerationConfig(30, grammar=grammar), None)
             for p in prompts]
    reqs = [Request(p, GenerationConfig(30, grammar=grammar), d, DraftLimit(6, 6))
            for p, d in zip(prompts, [PromptLookup(3, 1), suffix_drafter(), PromptLookup(2, 1)])]
    batched = generate_batch(t, reqs, max_batch=3, cost=StepCost.linear(0.1))
    assert [r.token_ids for r in batched] == [r.token_ids for r in plain]


def test_a_constrained_continuation_gives_the_uninterrupted_constrained_answer():
    t = MockTarget(vocab=VOCAB, layers=2, max_length=256, seed=5)
    prompt, config = [3, 1, 4, 1, 5, 9, 2, 6] * 3, GenerationConfig(40, grammar=NoRepeatGrammar(VOCAB))
    sent = list(stream(t, PromptLookup(3, 1), prompt, config, DraftLimit(6, 6)))
    resumed = list(stream(t, PromptLookup(3, 1), prompt, config, DraftLimit(6, 6),
                          generated=[c.token_ids for c in sent[:5]]))
    assert sum((c.token_ids for c in resumed), []) == sum((c.token_ids for c in sent), [])
    with pytest.raises(InvalidParameterError, match="grammar"):  # 5 may not follow 5
        list(stream(t, NoDrafter(), prompt, config, None, generated=[[5, 5]]))


def test_the_grammar_drafts_its_forced_tokens_and_counts_them():
    """A drafter that proposes nothing still drafts the tokens the grammar forces."""
    plain = greedy_runs(NoDrafter(), None)
    spec = greedy_runs(FixedDrafter([]), DraftLimit(4, 4))
    assert [r.token_ids for r in spec] == [r.token_ids for r in plain]
    forced = sum(r.stats.forced for r in spec)
    assert forced == sum(r.token_ids[:-1].count(3) for r in plain) > 0
    assert sum(r.stats.accepted for r in spec) == forced  # a forced token is always right here


def test_without_the_grammar_greedy_output_breaks_the_rule():
    """The rule is not what the mock target does anyway: the tests above would catch a stage
    that never masked."""
    t = MockTarget(vocab=VOCAB, layers=2, max_length=256, seed=5)
    runs = [generate(t, NoDrafter(), p, GenerationConfig(40), None)
            for p in ([3, 1, 4, 1, 5, 9, 2, 6] * 3, [1, 2, 3] * 8, [7, 7, 8, 9, 3, 1, 3, 1] * 2)]
    assert not all(follows_rule(r.token_ids) for r in runs)


# --- sampling: distributed as plain constrained sampling --------------------------------------

# the sampling tests forbid t and t + 1 after t (two of the four tokens): much of a draft's q falls
# on forbidden tokens, so a stage that leaves q unrenormalized moves the distribution visibly
GRAMMAR = NoRepeatGrammar(V, lead=3, follow=1, skip=True)


def constrained_outcomes(target, drafter, k: int | None, seeds, nodes: int | None = None,
                         batched: bool = False) -> Counter:
    config = GenerationConfig(LENGTH, T1, grammar=GRAMMAR)  # unseeded: recursive rejection
    limit = (lambda: DraftLimit(nodes or k, k)) if k else (lambda: None)
    counts = unseeded_outcomes(target, drafter, PROMPT, config, limit, seeds, batched)
    assert all(follows_rule(list(o), vocab=V) for o in counts)
    return counts


_plain: dict = {}


def constrained_pvalue(target_model, target, drafter, k: int, nodes: int | None = None,
                       batched: bool = False) -> float:
    if "plain" not in _plain:
        _plain["plain"] = constrained_outcomes(NativeDecoder.from_hf(target_model), NoDrafter(),
                                               None, PLAIN_SEEDS)
    spec = constrained_outcomes(target, drafter, k, SPEC_SEEDS, nodes, batched)
    return homogeneity_pvalue(spec, _plain["plain"])


def draft_model_drafter(draft_model) -> DraftModel:
    return DraftModel(NativeDecoder.from_hf(draft_model))


class SkewedDrafter(Drafter):
    """A sampled chain drawn from one fixed q at every position, most of it on tokens the rule
    forbids after 0 and 3: whether the stage renormalizes q matters much here."""

    Q = torch.tensor([0.6, 0.05, 0.05, 0.3])

    @classmethod
    def create(cls, target, options):
        raise NotImplementedError("test drafter")

    def propose(self, seq, budget) -> Draft:
        n = min(budget.nodes, budget.depth)
        q = self.Q.expand(n, V).clone()
        tokens = torch.multinomial(q, 1, generator=seq.generator).flatten()
        return Draft(tokens, q)


def test_constrained_sampling_with_a_sampled_chain_matches_plain_constrained_sampling(
        target_model, draft_model):
    """The draft model's q is not masked: the stage cuts its forbidden tokens and renormalizes."""
    target = NativeDecoder.from_hf(target_model)
    assert constrained_pvalue(target_model, target, draft_model_drafter(draft_model), 2) > ALPHA


def test_constrained_sampling_with_a_deterministic_chain_and_forced_tokens_matches(target_model):
    target = NativeDecoder.from_hf(target_model)
    assert constrained_pvalue(target_model, target, FixedDrafter([3, 0, 3]), 3) > ALPHA


def test_constrained_tree_sampling_matches_plain_constrained_sampling(target_model):
    eagle = eagle_drafter(target_model)
    assert constrained_pvalue(target_model, eagle.target, eagle, 2, nodes=6) > ALPHA
    target = NativeDecoder.from_hf(target_model)
    assert constrained_pvalue(target_model, target, suffix_drafter(), 2) > ALPHA


def test_batched_constrained_sampling_matches_plain_constrained_sampling(target_model,
                                                                        draft_model):
    target = NativeDecoder.from_hf(target_model)
    assert constrained_pvalue(target_model, target, draft_model_drafter(draft_model), 2,
                              batched=True) > ALPHA


def test_a_stage_that_masks_only_the_first_row_is_caught(monkeypatch, target_model):
    """Power check: the grammar applied to the root's row alone (as engines that mask the target
    at one position do) confirms tokens the rule forbids, which the engine refuses loudly."""
    real = specdecode.core.engine.masks

    def first_row_only(constraint, tree, vocab):
        out = real(constraint, tree, vocab)
        return out[:1].expand_as(out).clone()

    monkeypatch.setattr(specdecode.core.engine, "masks", first_row_only)
    target = NativeDecoder.from_hf(target_model)
    with pytest.raises(RuntimeError, match="the grammar forbids"):
        constrained_pvalue(target_model, target, FixedDrafter([2, 3, 0]), 3)


def test_constrained_sampling_with_a_skewed_sampled_chain_matches(target_model):
    target = NativeDecoder.from_hf(target_model)
    assert constrained_pvalue(target_model, target, SkewedDrafter(), 2) > ALPHA


def test_a_stage_that_leaves_q_unrenormalized_is_detected(monkeypatch, target_model):
    """Power check: cutting a sampled draft's forbidden tokens without renormalizing its q over
    the allowed set is caught by the test above."""
    monkeypatch.setattr(specdecode.core.engine, "renormalize", lambda q, rows: q)
    target = NativeDecoder.from_hf(target_model)
    assert constrained_pvalue(target_model, target, SkewedDrafter(), 2) < ALPHA
