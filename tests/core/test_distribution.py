"""Distribution preservation: speculative sampling emits tokens distributed exactly as plain
sampling from the target.

Setup: vocabulary of 4 tokens, a tiny random target and a *different* tiny random draft model
(different seed), temperature 1. Each run samples the first 3 generated tokens; N runs with
speculative sampling (seeds 0..N-1) and N runs with plain sampling (seeds 10**6..10**6+N-1) give two
histograms over the 4**3 joint outcomes. A chi-square test of homogeneity
(`scipy.stats.chi2_contingency`, cells with an expected count below 5 pooled into one cell) must
not reject at significance level alpha = 0.01: p-value > 0.01.

Power check: the same test with a deliberately broken verifier (on rejection it samples from p
instead of the residual norm(max(0, p - q))) must reject: p-value < 0.01 (it is far below).

All seeds are fixed, so every p-value here is deterministic.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from scipy.stats import chi2_contingency

import specdecode.core.engine
import specdecode.core.sequence
import specdecode.drafters.draft_model
from specdecode.core.engine import generate
from specdecode.core.sampling import SamplingParams, sample
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.core.verify import Verdict
from specdecode.core.drafter import Draft, Drafter
from specdecode.drafters.draft_model import DraftModel
from specdecode.drafters.eagle import Eagle
from specdecode.drafters.plain import NoDrafter
from specdecode.drafters.suffix import SuffixTree
from specdecode.models.heads import EagleHead
from specdecode.models.decoder import NativeDecoder
from seeding import generators_from

V = 4
PROMPT = [0, 1, 2, 3, 1]
LENGTH = 3  # generated tokens per run: outcomes are the V**3 joint sequences
N = 2000
ALPHA = 0.01
TARGET_SEED, DRAFT_SEED = 3, 4
LAYERS = 1  # fast: the test needs two different distributions, not depth
INIT = 0.2  # spread distributions (51 of the 64 outcomes have p >= 1/800) that differ a lot
# (mean total variation between target and draft next-token distributions ~0.5)
SPEC_SEEDS = range(N)
PLAIN_SEEDS = range(10**6, 10**6 + N)


@pytest.fixture(scope="module")
def target_model(tiny_llama):
    return tiny_llama(TARGET_SEED, vocab=V, layers=LAYERS, init=INIT, max_positions=16)


@pytest.fixture(scope="module")
def draft_model(tiny_llama):
    return tiny_llama(DRAFT_SEED, vocab=V, layers=LAYERS, init=INIT, max_positions=16)


def outcomes(target, drafter, params: SamplingParams, k: int | None, seeds,
             nodes: int | None = None, keyed: bool = False) -> Counter:
    """Counts of the outputs over `seeds`, drafting up to `nodes` (default k) nodes at depth k.
    keyed: each seed is the request's (`verify_seeded`'s draws); else the request is unseeded
    (recursive rejection, `verify_sampling`) and its generator starts at the seed."""
    return Counter(runs(target, drafter, params, k, seeds, nodes, keyed))


def runs(target, drafter, params: SamplingParams, k: int | None, seeds,
         nodes: int | None = None, keyed: bool = False) -> list[tuple[int, ...]]:
    """Each seed's output, as `outcomes` counts them."""
    out = []
    for seed in seeds:
        config = GenerationConfig(LENGTH, params, seed=seed if keyed else None)
        with generators_from([seed]):
            result = generate(target, drafter, PROMPT, config,
                              DraftLimit(nodes or k, k) if k else None)
        assert len(result.token_ids) == LENGTH
        out.append(tuple(result.token_ids))
    return out


def homogeneity_pvalue(a: Counter, b: Counter) -> float:
    """Chi-square test of homogeneity of two histograms; sparse cells pooled into one."""
    total_a, total_b = sum(a.values()), sum(b.values())
    share_a = total_a / (total_a + total_b)
    columns, pooled = [], [0, 0]
    for cell in sorted(set(a) | set(b)):
        both = a[cell] + b[cell]
        if min(both * share_a, both * (1 - share_a)) < 5:
            pooled[0] += a[cell]
            pooled[1] += b[cell]
        else:
            columns.append([a[cell], b[cell]])
    if pooled[0] + pooled[1]:
        columns.append(pooled)
    assert len(columns) >= 2
    table = list(zip(*columns))
    return float(chi2_contingency(table).pvalue)


_plain_cache: dict = {}


def plain_outcomes(target_model, params: SamplingParams) -> Counter:
    """Plain sampling reference, shared by the tests that use the same params."""
    if params not in _plain_cache:
        _plain_cache[params] = outcomes(NativeDecoder.from_hf(target_model), NoDrafter(), params, None,
                                        PLAIN_SEEDS)
    return _plain_cache[params]


def speculative_pvalue(target_model, drafter, params: SamplingParams, k: int) -> float:
    spec = outcomes(NativeDecoder.from_hf(target_model), drafter, params, k, SPEC_SEEDS)
    return homogeneity_pvalue(spec, plain_outcomes(target_model, params))


class FixedDrafter(Drafter):
    """A deterministic drafter (q = None) that always proposes the same tokens."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = torch.tensor(tokens, dtype=torch.long)

    @classmethod
    def create(cls, target, options):
        raise NotImplementedError("test drafter")

    def propose(self, seq, budget) -> Draft:
        return Draft(self.tokens[: min(budget.nodes, budget.depth)].clone(), None)


def verify_sampling_without_residual(tree, q, p, generator) -> Verdict:
    """BROKEN on purpose (chains only): after a rejection it samples from p instead of the
    residual, which over-represents tokens the drafter already proposes often."""
    draft = tree.tokens
    gamma = draft.shape[0]
    if q is None:
        q = torch.nn.functional.one_hot(draft, p.shape[-1]).to(p.dtype)
    idx = torch.arange(gamma)
    r = torch.rand(gamma, generator=generator)
    rejected = (r * q[idx, draft] >= p[idx, draft]).nonzero()
    if not rejected.numel():
        return Verdict(tuple(range(gamma)), int(sample(p[gamma], generator)))
    i = int(rejected[0, 0])
    return Verdict(tuple(range(i)), int(sample(p[i], generator)))


T1 = SamplingParams(temperature=1.0)


@pytest.mark.parametrize("k", [1, 2])  # k >= 3 drafts only 2: the third token is the bonus
def test_speculative_sampling_with_draft_model_matches_plain_sampling(k, target_model,
                                                                      draft_model):
    pvalue = speculative_pvalue(target_model, DraftModel(NativeDecoder.from_hf(draft_model)), T1, k)
    assert pvalue > ALPHA


def test_broken_verifier_is_detected_by_the_same_test(monkeypatch, target_model, draft_model):
    """Power check: the test above rejects a verifier that skips the residual distribution."""
    monkeypatch.setattr(specdecode.core.engine, "verify_sampling", verify_sampling_without_residual)
    pvalue = speculative_pvalue(target_model, DraftModel(NativeDecoder.from_hf(draft_model)), T1, 2)
    assert pvalue < ALPHA


def reduced_vocabulary_drafter(draft_model) -> DraftModel:
    """The draft model with its output layer cut to tokens 1 and 3 (q is zero at 0 and 2)."""
    ids = torch.tensor([1, 3])
    return DraftModel(NativeDecoder.from_hf(draft_model).with_vocabulary(ids), "cut", ids, V)


def context_adding_drafter(draft_model) -> DraftModel:
    """The cut drafter above plus the first token outside its cut that the context holds (0, the
    prompt's first): q over tokens 1, 3 and 0, in that column order, zero at 2."""
    ids = torch.tensor([1, 3])
    cut = NativeDecoder.from_hf(draft_model).with_vocabulary(ids)
    addable = torch.tensor([True, False, True, False])
    return DraftModel(cut, "cut", ids, V, addable=addable, head_rows=cut.output_rows,
                      most_added=1)


CUT_DRAFTERS = {"cut": reduced_vocabulary_drafter, "cut-adding-context": context_adding_drafter}


@pytest.mark.parametrize("drafter", CUT_DRAFTERS)
def test_sampling_with_a_drafter_over_a_reduced_vocabulary_matches_plain_sampling(target_model,
                                                                                  draft_model,
                                                                                  drafter):
    pvalue = speculative_pvalue(target_model, CUT_DRAFTERS[drafter](draft_model), T1, 2)
    assert pvalue > ALPHA


def test_sampling_with_a_drafter_mixing_n_gram_matches_matches_plain_sampling(target_model,
                                                                              draft_model):
    drafter = DraftModel(NativeDecoder.from_hf(draft_model), ngram=2)
    assert speculative_pvalue(target_model, drafter, T1, 2) > ALPHA


def test_broken_verifier_is_detected_through_the_mixing_drafter(monkeypatch, target_model,
                                                                draft_model):
    monkeypatch.setattr(specdecode.core.engine, "verify_sampling", verify_sampling_without_residual)
    drafter = DraftModel(NativeDecoder.from_hf(draft_model), ngram=2)
    assert speculative_pvalue(target_model, drafter, T1, 2) < ALPHA


@pytest.mark.parametrize("drafter", CUT_DRAFTERS)
def test_a_reduced_vocabulary_q_left_at_its_own_columns_is_detected(monkeypatch, target_model,
                                                                    draft_model, drafter):
    """Power check: q over the cut vocabulary's columns, not scattered to the token ids, is
    caught (the verifier would read tokens 1 and 3's probabilities at columns 0 and 1)."""
    real = specdecode.drafters.draft_model.draft_chain

    def unscattered(forward, first, length, params, generator, vocabulary, *rest):
        draft = real(forward, first, length, params, generator, vocabulary, *rest)
        if draft.q is not None:
            draft.q = torch.nn.functional.pad(draft.q[:, vocabulary], (0, V - len(vocabulary)))
        return draft

    monkeypatch.setattr(specdecode.drafters.draft_model, "draft_chain", unscattered)
    pvalue = speculative_pvalue(target_model, CUT_DRAFTERS[drafter](draft_model), T1, 2)
    assert pvalue < ALPHA


@pytest.mark.parametrize(
    "params",
    [SamplingParams(temperature=1.0, top_k=2), SamplingParams(temperature=1.0, top_p=0.8),
     SamplingParams(temperature=1.0, min_p=0.3)],
    ids=["top_k=2", "top_p=0.8", "min_p=0.3"],
)
def test_speculative_sampling_matches_plain_sampling_with_filters(params, target_model,
                                                                  draft_model):
    pvalue = speculative_pvalue(target_model, DraftModel(NativeDecoder.from_hf(draft_model)), params, 2)
    assert pvalue > ALPHA


def test_deterministic_drafter_speculative_sampling_matches_plain_sampling(target_model):
    pvalue = speculative_pvalue(target_model, FixedDrafter([3, 0, 3]), T1, 3)
    assert pvalue > ALPHA


# --- token trees --------------------------------------------------------------------------------
# The same test through the `eagle` drafter (a random head, vocabulary 4, top-2 children per node:
# a tree with siblings at every level): recursive rejection sampling over siblings with one-hot q.


def eagle_drafter(target_model) -> Eagle:
    target = NativeDecoder.from_hf(target_model)
    torch.manual_seed(DRAFT_SEED)
    head = EagleHead(target.layer_shape()).eval()
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0, INIT)
    return Eagle(target, head, topk=2)


def tree_pvalue(target_model, drafter) -> float:
    """Like `speculative_pvalue`, but the drafter must share the target it reads features of."""
    spec = outcomes(drafter.target, drafter, T1, 2, SPEC_SEEDS, nodes=6)
    return homogeneity_pvalue(spec, plain_outcomes(target_model, T1))


def verify_tree_without_sibling_residual(tree, q, p, generator) -> Verdict:
    """BROKEN on purpose: each sibling is tried against the row's original p, never against the
    residual left by the siblings rejected before it."""
    path, row = [], 0
    while True:
        for child in tree.children[row]:
            x = int(tree.tokens[child])
            if float(torch.rand(1, generator=generator)) < float(p[row, x]):
                path.append(child)
                row = child + 1
                break
        else:
            return Verdict(tuple(path), int(sample(p[row], generator)))


def test_tree_speculative_sampling_with_eagle_matches_plain_sampling(target_model):
    assert tree_pvalue(target_model, eagle_drafter(target_model)) > ALPHA


def test_broken_tree_verifier_is_detected_by_the_same_test(monkeypatch, target_model):
    """Power check: skipping the residual between siblings must be rejected at alpha = 0.01."""
    monkeypatch.setattr(specdecode.core.engine, "verify_sampling", verify_tree_without_sibling_residual)
    assert tree_pvalue(target_model, eagle_drafter(target_model)) < ALPHA


# The same test through the `suffix` drafter: no step cost, so every proposed node is scored, every
# candidate it has: the context's continuations and, after the first step, the target's recycled
# top tokens, siblings of each other.


def suffix_drafter() -> SuffixTree:
    return SuffixTree(SuffixTree.Options(branches=3, memory_tokens=0))


def test_tree_speculative_sampling_with_suffix_matches_plain_sampling(target_model):
    assert speculative_pvalue(target_model, suffix_drafter(), T1, 2) > ALPHA


def test_broken_tree_verifier_is_detected_through_suffix(monkeypatch, target_model):
    """Power check: the suffix drafter's trees have siblings often enough that skipping the
    residual between them is rejected at alpha = 0.01."""
    monkeypatch.setattr(specdecode.core.engine, "verify_sampling", verify_tree_without_sibling_residual)
    assert speculative_pvalue(target_model, suffix_drafter(), T1, 2) < ALPHA


# Batched: the runs go through `core.batch` eight at a time, every sequence with its own seed, so
# each forward holds eight sequences' rows (and trees); each must still sample from the target.


def batched_pvalue(target_model, drafter, params: SamplingParams, k: int) -> float:
    from specdecode.core.batch import Request, generate_batch

    target = NativeDecoder.from_hf(target_model)
    requests = [Request(PROMPT, GenerationConfig(LENGTH, params), drafter, DraftLimit(k, k))
                for _ in SPEC_SEEDS]
    with generators_from(SPEC_SEEDS):
        spec = Counter(tuple(r.token_ids) for r in generate_batch(target, requests, max_batch=8))
    return homogeneity_pvalue(spec, plain_outcomes(target_model, params))


def test_batched_tree_speculative_sampling_matches_plain_sampling(target_model):
    assert batched_pvalue(target_model, suffix_drafter(), T1, 2) > ALPHA


def test_broken_tree_verifier_is_detected_in_a_batch(monkeypatch, target_model):
    monkeypatch.setattr(specdecode.core.engine, "verify_sampling", verify_tree_without_sibling_residual)
    assert batched_pvalue(target_model, suffix_drafter(), T1, 2) < ALPHA


# --- seeded requests ----------------------------------------------------------------------------
# A seed keys each position's draw (`sampling.keyed_uniform`): the output is plain decoding's with
# that seed, token for token, whatever the drafter proposed, and plain decoding so keyed samples
# the target's distribution.


def test_seeded_plain_sampling_matches_unseeded_plain_sampling(target_model):
    keyed = outcomes(NativeDecoder.from_hf(target_model), NoDrafter(), T1, None, SPEC_SEEDS,
                     keyed=True)
    assert homogeneity_pvalue(keyed, plain_outcomes(target_model, T1)) > ALPHA


def test_a_seed_that_keys_nothing_is_detected_by_the_same_test(monkeypatch, target_model):
    """Power check: draws that ignore the position (one uniform for every token) are rejected."""
    real = specdecode.core.sequence.keyed_uniform
    monkeypatch.setattr(specdecode.core.sequence, "keyed_uniform",
                        lambda seed, position: real(seed, 0))
    keyed = outcomes(NativeDecoder.from_hf(target_model), NoDrafter(), T1, None, SPEC_SEEDS,
                     keyed=True)
    assert homogeneity_pvalue(keyed, plain_outcomes(target_model, T1)) < ALPHA


SEEDED_DRAFTERS = {
    "draft-model": lambda target_model, draft_model: DraftModel(NativeDecoder.from_hf(draft_model)),
    "cut-vocabulary": lambda target_model, draft_model: reduced_vocabulary_drafter(draft_model),
    "fixed": lambda target_model, draft_model: FixedDrafter([3, 0, 3]),
    "suffix-tree": lambda target_model, draft_model: suffix_drafter(),
    "eagle-tree": lambda target_model, draft_model: eagle_drafter(target_model),
}


@pytest.mark.parametrize("name", SEEDED_DRAFTERS)
def test_a_seeded_speculative_run_is_the_seeded_plain_run_token_for_token(name, target_model,
                                                                          draft_model):
    drafter = SEEDED_DRAFTERS[name](target_model, draft_model)
    target = getattr(drafter, "target", None) if name == "eagle-tree" else None
    target = target or NativeDecoder.from_hf(target_model)
    seeds = range(300)
    plain = runs(target, NoDrafter(), T1, None, seeds, keyed=True)
    assert runs(target, drafter, T1, 2, seeds, nodes=6, keyed=True) == plain


def acceptance(target, drafter, seeds) -> float:
    """The share of drafted tokens accepted over seeded runs."""
    accepted = drafted = 0
    for seed in seeds:
        config = GenerationConfig(LENGTH, T1, seed=seed)
        stats = generate(target, drafter, PROMPT, config, DraftLimit(2, 2)).stats
        accepted, drafted = accepted + stats.accepted, drafted + stats.drafted
    return accepted / drafted


def test_a_seeded_draft_model_draws_where_the_target_will_and_so_is_kept_more_often(
        monkeypatch, target_model, draft_model):
    """The draft model inverts q at the uniform the target's draw inverts p at, so the two agree
    more often than when the drafter draws from its own generator."""
    target = NativeDecoder.from_hf(target_model)
    drafter = DraftModel(NativeDecoder.from_hf(draft_model))
    coupled = acceptance(target, drafter, range(300))
    monkeypatch.setattr(specdecode.core.sequence.SequenceState, "draw",
                        lambda seq, probs, depth: sample(probs, seq.generator))
    assert coupled > acceptance(target, drafter, range(300)) + 0.05
