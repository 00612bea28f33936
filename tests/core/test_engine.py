"""The decoding loop on a tiny random Llama: greedy losslessness for every drafter, the stats, and
the stop conditions.

Greedy speculative decoding must reproduce plain greedy decoding token for token, whatever the
drafter proposes (right, wrong, or right for a while). The tiny models are initialised with a large
range so argmax margins are far above the rounding differences between scoring 1 and k+1 tokens.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from specdecode.core.cost import StepCost
from specdecode.core.drafter import Draft, Drafter
from specdecode.core.engine import generate, stream
from specdecode.core.penalties import Penalties
from specdecode.core.sampling import SamplingParams
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.drafters.draft_model import DraftModel
from specdecode.drafters.layerskip import LayerSkip
from specdecode.drafters.lookup import PromptLookup
from specdecode.drafters.plain import NoDrafter
from specdecode.errors import InvalidParameterError, PromptTooLongError
from specdecode.models.decoder import NativeDecoder
from specdecode.models.hf_target import HFTarget

V = 64
PROMPT = [3, 17, 42, 5, 9, 3, 17, 42, 8, 5, 9]  # repeated n-grams give prompt lookup some hits
NEW = 40
GREEDY = SamplingParams()
TARGET_SEED, DRAFT_SEED = 0, 100


def greedy(max_new_tokens: int = NEW, **kwargs) -> GenerationConfig:
    return GenerationConfig(max_new_tokens, GREEDY, **kwargs)


class Scripted(Drafter):
    """Knows the plain greedy continuation (`reference` = prompt + output) and proposes it
    ("right"), proposes a different token at every position ("wrong"), or the right tokens for a
    random number of positions and then wrong ones ("mixed"). Records the chain length it was
    allowed (the smaller of its caps)."""

    def __init__(self, reference: list[int], mode: str, seed: int = 0) -> None:
        self.reference, self.mode, self.seed = reference, mode, seed
        self.asked: list[int] = []

    @classmethod
    def create(cls, target, options):
        raise NotImplementedError("test drafter")

    def start(self, seq) -> None:
        seq.drafter_state = random.Random(self.seed)

    def propose(self, seq, budget) -> Draft:
        k = min(budget.nodes, budget.depth)
        self.asked.append(k)
        context = seq.context
        L = context.shape[0]
        assert context.tolist() == self.reference[:L], "the engine's context left the reference"
        truth = self.reference[L : L + k]
        wrong = [(t + 1) % V for t in truth]
        if self.mode == "right":
            tokens = truth
        elif self.mode == "wrong":
            tokens = wrong
        else:
            j = seq.drafter_state.randint(0, len(truth))
            tokens = truth[:j] + wrong[j:]
        return Draft(torch.tensor(tokens, dtype=torch.long), None)


@pytest.fixture(scope="module")
def target_model(tiny_llama):
    return tiny_llama(TARGET_SEED, vocab=V, layers=2)


@pytest.fixture(scope="module")
def draft_model(tiny_llama):
    return tiny_llama(DRAFT_SEED, vocab=V, layers=2)


@pytest.fixture(scope="module")
def plain(target_model) -> list[int]:
    """Plain greedy decoding: NEW tokens after PROMPT."""
    result = generate(NativeDecoder.from_hf(target_model), NoDrafter(), PROMPT, greedy(), None)
    assert len(result.token_ids) == NEW and result.finish_reason == "length"
    return result.token_ids


@pytest.fixture
def reference(plain) -> list[int]:
    return PROMPT + plain


def make_drafter(name: str, target, reference, draft_model, target_model, seed: int = 0):
    if name in ("right", "wrong", "mixed"):
        return Scripted(reference, name, seed)
    if name == "lookup":
        return PromptLookup(ngram_max=3, ngram_min=1)
    if name == "draft":
        return DraftModel(NativeDecoder.from_hf(draft_model))
    if name == "draft-same-weights":
        return DraftModel(NativeDecoder.from_hf(target_model))
    if name == "draft-hf":
        return DraftModel(HFTarget(draft_model))
    if name == "layerskip":
        return LayerSkip(target, layers=(0,))
    raise ValueError(name)


DRAFTERS = ["right", "wrong", "mixed", "lookup", "draft", "draft-same-weights", "layerskip"]


# --- greedy equivalence -------------------------------------------------------------------------


def test_plain_decoding_has_tau_one(target_model, plain):
    result = generate(NativeDecoder.from_hf(target_model), NoDrafter(), PROMPT, greedy(), None)
    assert result.token_ids == plain
    s = result.stats
    assert s.new_tokens == s.target_forwards == NEW
    assert s.tau == 1.0
    assert s.drafted == 0 and s.acceptance_rate is None and s.draft_forwards == 0


@pytest.mark.parametrize("adaptive", [False, True], ids=["fixed", "adaptive"])
@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("name", DRAFTERS)
def test_greedy_speculative_output_equals_plain_decoding(
    name, k, adaptive, target_model, draft_model, plain, reference
):
    target = NativeDecoder.from_hf(target_model)
    drafter = make_drafter(name, target, reference, draft_model, target_model)
    result = generate(target, drafter, PROMPT, greedy(), DraftLimit(k, k, adaptive))
    assert result.token_ids == plain
    assert result.finish_reason == "length"
    s = result.stats
    assert s.new_tokens == NEW
    assert s.tau == pytest.approx(s.new_tokens / s.target_forwards)
    assert s.new_tokens == s.accepted + s.target_forwards  # one recovered/bonus token per step
    assert sum(s.accepted_histogram) == s.target_forwards


@pytest.mark.parametrize("seed", range(6))
def test_greedy_output_equals_plain_when_drafter_is_right_for_a_random_prefix(
    seed, target_model, plain, reference
):
    drafter = Scripted(reference, "mixed", seed)
    result = generate(NativeDecoder.from_hf(target_model), drafter, PROMPT, greedy(), DraftLimit(6, 6))
    assert result.token_ids == plain
    assert 0 < result.stats.acceptance_rate < 1


def test_greedy_draft_model_on_hf_target_equals_plain(target_model, draft_model, plain):
    result = generate(HFTarget(target_model), DraftModel(HFTarget(draft_model)), PROMPT, greedy(),
                      DraftLimit(3, 3))
    assert result.token_ids == plain


def test_hf_target_and_native_llama_give_same_greedy_tokens(target_model, plain):
    result = generate(HFTarget(target_model), NoDrafter(), PROMPT, greedy(), None)
    assert result.token_ids == plain


def test_hf_target_and_native_llama_give_same_greedy_tokens_for_another_model(tiny_llama):
    model = tiny_llama(5, vocab=V, layers=4)
    native = generate(NativeDecoder.from_hf(model), NoDrafter(), PROMPT, greedy(30), None)
    hf = generate(HFTarget(model), NoDrafter(), PROMPT, greedy(30), None)
    assert native.token_ids == hf.token_ids


def test_prompt_of_one_token_works(target_model, reference):
    plain1 = generate(NativeDecoder.from_hf(target_model), NoDrafter(), [7], greedy(12), None).token_ids
    spec = generate(NativeDecoder.from_hf(target_model), PromptLookup(2, 1), [7], greedy(12),
                    DraftLimit(3, 3)).token_ids
    assert spec == plain1 and len(plain1) == 12


def test_drafter_and_target_are_reusable_across_requests(target_model, draft_model, plain):
    target = NativeDecoder.from_hf(target_model)
    drafter = DraftModel(NativeDecoder.from_hf(draft_model))
    first = generate(target, drafter, PROMPT, greedy(), DraftLimit(4, 4)).token_ids
    other = generate(target, drafter, [1, 2, 3, 4], greedy(10), DraftLimit(4, 4)).token_ids
    again = generate(target, drafter, PROMPT, greedy(), DraftLimit(4, 4)).token_ids
    assert first == again == plain
    assert other == generate(NativeDecoder.from_hf(target_model), NoDrafter(), [1, 2, 3, 4], greedy(10),
                             None).token_ids


# --- stats --------------------------------------------------------------------------------------


@pytest.mark.parametrize("new", [40, 42, 43])
def test_always_right_drafter_with_k4_needs_ceil_new_over_5_target_forwards(
    new, target_model
):
    ref_result = generate(NativeDecoder.from_hf(target_model), NoDrafter(), PROMPT, greedy(new), None)
    drafter = Scripted(PROMPT + ref_result.token_ids, "right")
    result = generate(NativeDecoder.from_hf(target_model), drafter, PROMPT, greedy(new), DraftLimit(4, 4))
    assert result.token_ids == ref_result.token_ids
    s = result.stats
    assert s.target_forwards == math.ceil(new / 5)
    assert s.tau == pytest.approx(new / math.ceil(new / 5))
    assert s.tau > 4.5
    assert s.acceptance_rate == 1.0
    assert all(r == 1.0 for r in s.acceptance_by_position)


def test_always_wrong_drafter_has_acceptance_rate_zero_and_tau_one(target_model, reference, plain):
    drafter = Scripted(reference, "wrong")
    result = generate(NativeDecoder.from_hf(target_model), drafter, PROMPT, greedy(), DraftLimit(3, 3))
    assert result.token_ids == plain
    s = result.stats
    assert s.acceptance_rate == 0.0 and s.accepted == 0
    assert s.tau == 1.0 and s.target_forwards == NEW
    assert s.accepted_histogram == [NEW]
    assert s.drafted == sum(drafter.asked)


def test_draft_model_counts_one_draft_forward_per_drafted_token(target_model, draft_model):
    result = generate(NativeDecoder.from_hf(target_model), DraftModel(NativeDecoder.from_hf(draft_model)), PROMPT,
                      greedy(), DraftLimit(3, 3))
    assert result.stats.draft_forwards == result.stats.drafted > 0


def test_draft_model_with_target_weights_is_always_accepted(target_model, plain):
    result = generate(NativeDecoder.from_hf(target_model), DraftModel(NativeDecoder.from_hf(target_model)), PROMPT,
                      greedy(), DraftLimit(4, 4))
    assert result.token_ids == plain
    assert result.stats.acceptance_rate == 1.0
    assert result.stats.target_forwards == NEW // 5


def test_drafter_is_never_asked_for_more_tokens_than_the_budget_allows(target_model):
    ref = generate(NativeDecoder.from_hf(target_model), NoDrafter(), PROMPT, greedy(7), None).token_ids
    drafter = Scripted(PROMPT + ref, "right")
    result = generate(NativeDecoder.from_hf(target_model), drafter, PROMPT, greedy(7), DraftLimit(4, 4))
    # 7 tokens: a full draft of 4 (+1 bonus), then 2 left: a draft of 1 (+1 bonus)
    assert drafter.asked == [4, 1]
    assert result.token_ids == ref


class Ranked(Scripted):
    """`Scripted` that ranks its nodes: node i's chance is 0.8^(i+1); records what it was told."""

    def __init__(self, reference: list[int], mode: str) -> None:
        super().__init__(reference, mode)
        self.told: list[tuple[int, int]] = []

    def propose(self, seq, budget) -> Draft:
        draft = super().propose(seq, budget)
        draft.chances = 0.8 ** torch.arange(1, len(draft) + 1, dtype=torch.float)
        return draft

    def observe(self, seq, scored: int, accepted: int) -> None:
        self.told.append((scored, accepted))


@pytest.mark.parametrize("row_cost, scored", [(0.0, 6), (0.3, 3), (2.0, 0)])
def test_a_step_scores_the_nodes_that_pay_and_tells_the_drafter(target_model, reference, plain,
                                                                row_cost, scored):
    drafter = Ranked(reference, "right")
    result = generate(NativeDecoder.from_hf(target_model), drafter, PROMPT, greedy(), DraftLimit(6, 6),
                      cost=StepCost.linear(row_cost))
    assert result.token_ids == plain
    assert drafter.told[0] == (scored, scored)  # all right: whatever is scored is accepted
    assert result.stats.drafted == sum(n for n, _ in drafter.told)


def test_adaptive_draft_length_grows_after_full_acceptance(target_model, reference):
    drafter = Scripted(reference, "right")
    generate(NativeDecoder.from_hf(target_model), drafter, PROMPT, greedy(), DraftLimit(16, 2, True))
    # 2 (+1), 4 (+1), 6 (+1), 8 (+1), 10 (+1) = 35 tokens; 5 left: min(12, 5 - 1)
    assert drafter.asked == [2, 4, 6, 8, 10, 4]


def test_adaptive_draft_length_shrinks_after_rejection(target_model, reference):
    drafter = Scripted(reference, "wrong")
    generate(NativeDecoder.from_hf(target_model), drafter, PROMPT, greedy(), DraftLimit(16, 4, True))
    assert drafter.asked[:5] == [4, 3, 2, 1, 1]
    assert set(drafter.asked[3:]) == {1}


# --- stop conditions ----------------------------------------------------------------------------


@pytest.mark.parametrize("max_new", [1, 2, 3, 7, 11])
@pytest.mark.parametrize("name", ["plain", "right", "draft"])
def test_max_new_tokens_is_respected_exactly(max_new, name, target_model, draft_model, reference,
                                             plain):
    target = NativeDecoder.from_hf(target_model)
    if name == "plain":
        drafter, length = NoDrafter(), None
    else:
        drafter = make_drafter(name, target, reference, draft_model, target_model)
        length = DraftLimit(5, 5)
    result = generate(target, drafter, PROMPT, greedy(max_new), length)
    assert result.token_ids == plain[:max_new]
    assert result.finish_reason == "length"
    assert result.stats.new_tokens == max_new


def expected_before_eos(plain: list[int], eos: int) -> list[int]:
    return plain[: plain.index(eos)]


@pytest.mark.parametrize("step", [5, 7, 14])
@pytest.mark.parametrize("name", ["plain", "right", "mixed", "lookup", "draft"])
def test_eos_stops_generation_before_the_first_eos_token(step, name, target_model, draft_model,
                                                         reference, plain):
    eos = plain[step - 1]  # the token plain decoding produces at this step (may occur earlier)
    target = NativeDecoder.from_hf(target_model)
    drafter = NoDrafter() if name == "plain" else make_drafter(name, target, reference,
                                                               draft_model, target_model)
    result = generate(target, drafter, PROMPT, greedy(), None if name == "plain" else
                      DraftLimit(4, 4), eos_token_ids=frozenset({eos}))
    assert result.token_ids == expected_before_eos(plain, eos)
    assert eos not in result.token_ids
    assert result.finish_reason == "stop"
    assert result.stats.new_tokens == len(result.token_ids)


def test_eos_inside_an_accepted_draft_cuts_the_draft(target_model, reference, plain):
    eos = plain[2]
    drafter = Scripted(reference, "right")
    result = generate(NativeDecoder.from_hf(target_model), drafter, PROMPT, greedy(), DraftLimit(8, 8),
                      eos_token_ids=frozenset({eos, V + 5}))
    assert result.token_ids == expected_before_eos(plain, eos)
    assert result.stats.target_forwards == 1
    assert result.finish_reason == "stop"


def test_eos_as_first_generated_token_gives_empty_output(target_model, plain):
    result = generate(NativeDecoder.from_hf(target_model), NoDrafter(), PROMPT, greedy(), None,
                      eos_token_ids=frozenset({plain[0]}))
    assert result.token_ids == [] and result.finish_reason == "stop"
    assert result.stats.new_tokens == 0


def fake_decode(ids: list[int]) -> str:
    return "".join(chr(65 + i % 26) for i in ids)


def test_text_is_decoded_output_when_there_is_no_stop_string(target_model, plain):
    result = generate(NativeDecoder.from_hf(target_model), NoDrafter(), PROMPT, greedy(), None,
                      decode=fake_decode)
    assert result.text == fake_decode(plain)
    assert result.finish_reason == "length"


@pytest.mark.parametrize("name", ["plain", "right", "lookup", "draft"])
def test_stop_string_cuts_text_before_it_and_finishes_with_stop(name, target_model, draft_model,
                                                                reference, plain):
    full = fake_decode(plain)
    stop = full[5:7]
    expected = full[: full.find(stop)]
    target = NativeDecoder.from_hf(target_model)
    drafter = NoDrafter() if name == "plain" else make_drafter(name, target, reference,
                                                               draft_model, target_model)
    result = generate(target, drafter, PROMPT, greedy(stop=(stop, "never-there")),
                      None if name == "plain" else DraftLimit(4, 4), decode=fake_decode)
    assert result.text == expected
    assert result.finish_reason == "stop"
    assert result.stats.new_tokens < NEW
    # generation stopped as soon as the stop string was complete
    assert fake_decode(result.token_ids).find(stop) == len(expected)
    assert plain[: len(result.token_ids)] == result.token_ids


def test_stream_yields_chunks_whose_concatenation_is_the_result(target_model, reference, plain):
    chunks = list(stream(NativeDecoder.from_hf(target_model), Scripted(reference, "mixed", 1), PROMPT,
                         greedy(), DraftLimit(4, 4), decode=fake_decode))
    assert [c.finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert all(c.stats is None for c in chunks[:-1])
    assert chunks[-1].finish_reason == "length" and chunks[-1].stats is not None
    assert sum((c.token_ids for c in chunks), []) == plain
    assert "".join(c.text for c in chunks) == fake_decode(plain)
    assert len(chunks) == chunks[-1].stats.target_forwards
    assert all(1 <= len(c.token_ids) <= 5 for c in chunks)


@pytest.mark.parametrize("name", ["plain", "lookup", "draft", "right"])
def test_generation_stops_at_the_context_window(name, tiny_llama, draft_model):
    model = tiny_llama(TARGET_SEED, vocab=V, layers=2, max_positions=48)
    prompt = (PROMPT * 4)[:43]
    ref = generate(NativeDecoder.from_hf(model), NoDrafter(), prompt, greedy(100), None)
    assert len(ref.token_ids) == 48 - 43 and ref.finish_reason == "length"
    target = NativeDecoder.from_hf(model)
    if name == "plain":
        drafter = NoDrafter()
    elif name == "draft":  # the draft model's window is full before the target's
        drafter = DraftModel(NativeDecoder.from_hf(tiny_llama(DRAFT_SEED, vocab=V, max_positions=45)))
    else:
        drafter = make_drafter(name, target, prompt + ref.token_ids, draft_model, model)
    result = generate(target, drafter, prompt, greedy(100), DraftLimit(4, 4))
    assert result.token_ids == ref.token_ids
    assert result.finish_reason == "length"


def test_draft_model_with_smaller_context_window_keeps_output_identical(tiny_llama, target_model,
                                                                        plain):
    small = NativeDecoder.from_hf(tiny_llama(DRAFT_SEED, vocab=V, max_positions=len(PROMPT) + 15))
    result = generate(NativeDecoder.from_hf(target_model), DraftModel(small), PROMPT, greedy(),
                      DraftLimit(4, 4))
    assert result.token_ids == plain


# --- sampling mode ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["plain", "draft", "lookup"])
def test_sampling_is_reproducible_for_a_fixed_seed(name, target_model, draft_model, reference):
    def run():
        target = NativeDecoder.from_hf(target_model)
        drafter = NoDrafter() if name == "plain" else make_drafter(name, target, reference,
                                                                   draft_model, target_model)
        config = GenerationConfig(30, SamplingParams(1.0, top_k=10), seed=1234)
        return generate(target, drafter, PROMPT, config, DraftLimit(3, 3)).token_ids

    first = run()
    assert len(first) == 30
    assert run() == first


def test_unseeded_sampling_runs(target_model, draft_model):
    config = GenerationConfig(10, SamplingParams(0.8, top_p=0.9))
    result = generate(NativeDecoder.from_hf(target_model), DraftModel(NativeDecoder.from_hf(draft_model)), PROMPT,
                      config, DraftLimit(3, 3))
    assert len(result.token_ids) == 10 and all(0 <= t < V for t in result.token_ids)


# --- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize("extra", [0, 1, 50])
def test_prompt_not_shorter_than_context_window_raises_prompt_too_long(extra, target_model):
    target = NativeDecoder.from_hf(target_model)
    prompt = [1] * (target.max_length + extra)
    with pytest.raises(PromptTooLongError):
        generate(target, NoDrafter(), prompt, greedy(), None)


def test_prompt_one_shorter_than_context_window_generates_one_token(target_model, draft_model):
    target = NativeDecoder.from_hf(target_model)
    prompt = (PROMPT * 30)[: target.max_length - 1]
    expected = generate(target, NoDrafter(), prompt, greedy(), None)
    assert len(expected.token_ids) == 1 and expected.finish_reason == "length"
    result = generate(target, DraftModel(NativeDecoder.from_hf(draft_model)), prompt, greedy(),
                      DraftLimit(4, 4))
    assert result.token_ids == expected.token_ids


def test_empty_prompt_raises_invalid_parameter(target_model):
    with pytest.raises(InvalidParameterError):
        generate(NativeDecoder.from_hf(target_model), NoDrafter(), [], greedy(), None)


def test_invalid_generation_and_draft_length_parameters_raise():
    with pytest.raises(InvalidParameterError):
        GenerationConfig(max_new_tokens=0)
    with pytest.raises(InvalidParameterError):
        DraftLimit(0, 3)


@pytest.mark.parametrize("name", ["mixed", "lookup", "draft", "layerskip"])
def test_greedy_speculative_output_equals_plain_decoding_with_bf16_weights(
    name, target_model, draft_model
):
    plain_bf16 = generate(NativeDecoder.from_hf(target_model, torch.bfloat16), NoDrafter(), PROMPT,
                          greedy(), None).token_ids
    target = NativeDecoder.from_hf(target_model, torch.bfloat16)
    drafter = make_drafter(name, target, PROMPT + plain_bf16, draft_model, target_model)
    result = generate(target, drafter, PROMPT, greedy(), DraftLimit(4, 4))
    assert result.token_ids == plain_bf16


# --- seeded sampling ----------------------------------------------------------------------------


def test_a_seeded_sampled_answer_is_plain_decodings_whatever_the_drafts_and_the_batch(
        target_model, draft_model, reference):
    """A seed keys each position's draw, so drafts of any shape (the budget that shapes them
    reads this machine's timing) and the requests a sequence is batched with change nothing."""
    from specdecode.core.batch import Request, generate_batch

    target = NativeDecoder.from_hf(target_model)
    config = GenerationConfig(NEW, SamplingParams(temperature=0.8), seed=7)
    plain = generate(target, NoDrafter(), PROMPT, config, None).token_ids
    drafted = []
    for name in ("lookup", "draft", "draft-same-weights", "layerskip"):
        drafter = make_drafter(name, target, reference, draft_model, target_model)
        for k in (1, 3, 8):
            result = generate(target, drafter, PROMPT, config, DraftLimit(k, k))
            drafted.append(result.stats.drafted)
            assert result.token_ids == plain, (name, k)
    assert min(drafted) > 0
    others = [Request(PROMPT[:5], GenerationConfig(NEW, SamplingParams(0.8), seed=s),
                      PromptLookup(), DraftLimit(4, 4)) for s in (1, 2)]
    batch = generate_batch(target, [Request(PROMPT, config, DraftModel(
        NativeDecoder.from_hf(draft_model)), DraftLimit(5, 5))] + others, max_batch=3)
    assert batch[0].token_ids == plain


# --- continuations ------------------------------------------------------------------------------


def sent_then_continued(target, drafter_for, config: GenerationConfig, cut: int, **kwargs):
    """A stream's chunks, and the chunks of the continuation of its first `cut` chunks."""
    sent = list(stream(target, drafter_for(), PROMPT, config, DraftLimit(4, 4), **kwargs))
    resumed = list(stream(target, drafter_for(), PROMPT, config, DraftLimit(4, 4),
                          generated=[c.token_ids for c in sent[:cut]], **kwargs))
    return sent, resumed


@pytest.mark.parametrize("cut", [1, 3, 8])
@pytest.mark.parametrize("name", ["plain", "mixed", "lookup", "draft"])
def test_a_greedy_continuation_replays_the_sent_chunks_then_gives_the_uninterrupted_rest(
        cut, name, target_model, draft_model, reference, plain):
    target = NativeDecoder.from_hf(target_model)
    sent, resumed = sent_then_continued(
        target, lambda: NoDrafter() if name == "plain" else make_drafter(
            name, target, reference, draft_model, target_model), greedy(), cut,
        decode=fake_decode)
    assert [(c.token_ids, c.text) for c in resumed[:cut]] == [(c.token_ids, c.text)
                                                              for c in sent[:cut]]
    assert sum((c.token_ids for c in resumed), []) == plain
    assert "".join(c.text for c in resumed) == fake_decode(plain)
    forced = sum(len(c.token_ids) for c in sent[:cut])
    assert resumed[-1].finish_reason == "length"
    assert resumed[-1].stats.new_tokens == NEW - forced  # the limit counts the earlier tokens


def test_a_continuation_stops_at_a_stop_string_that_straddles_the_cut(target_model, plain):
    full = fake_decode(plain)
    stop = full[9:12]
    target = NativeDecoder.from_hf(target_model)
    config = greedy(stop=(stop,))
    sent = list(stream(target, NoDrafter(), PROMPT, config, None, decode=fake_decode))
    assert "".join(c.text for c in sent) == full[: full.find(stop)]
    cut = next(i for i in range(len(sent)) if len(fake_decode(sum(
        (c.token_ids for c in sent[: i + 1]), []))) > full.find(stop))  # its first character
    resumed = list(stream(target, NoDrafter(), PROMPT, config, None, decode=fake_decode,
                          generated=[c.token_ids for c in sent[:cut]]))
    assert [(c.token_ids, c.text, c.finish_reason) for c in resumed] == [
        (c.token_ids, c.text, c.finish_reason) for c in sent]


def test_a_seeded_continuation_draws_what_the_uninterrupted_run_draws(target_model, draft_model,
                                                                     reference):
    target = NativeDecoder.from_hf(target_model)
    config = GenerationConfig(30, SamplingParams(1.0, top_k=10), seed=1234)
    sent, resumed = sent_then_continued(target, lambda: DraftModel(
        NativeDecoder.from_hf(draft_model)), config, 4)
    # seeded draws are keyed by position, so even the draws are the same
    assert sum((c.token_ids for c in resumed), []) == sum((c.token_ids for c in sent), [])


def test_a_continuation_counts_its_earlier_tokens_for_the_penalties(target_model, plain):
    target = NativeDecoder.from_hf(target_model)
    config = greedy(penalties=Penalties(presence=2.0, frequency=2.0))
    sent = list(stream(target, NoDrafter(), PROMPT, config, None))
    assert sum((c.token_ids for c in sent), []) != plain  # the penalties change the answer
    resumed = list(stream(target, NoDrafter(), PROMPT, config, None,
                          generated=[c.token_ids for c in sent[:10]]))
    assert sum((c.token_ids for c in resumed), []) == sum((c.token_ids for c in sent), [])


def test_a_continuation_past_its_limit_or_its_stop_string_is_refused(target_model, plain):
    target = NativeDecoder.from_hf(target_model)
    with pytest.raises(InvalidParameterError, match="max_new_tokens"):
        list(stream(target, NoDrafter(), PROMPT, greedy(5), None, generated=[plain[:5]]))
    with pytest.raises(InvalidParameterError, match="stop string"):
        list(stream(target, NoDrafter(), PROMPT, greedy(stop=(fake_decode(plain[2:4]),)), None,
                    decode=fake_decode, generated=[plain[:6]]))
