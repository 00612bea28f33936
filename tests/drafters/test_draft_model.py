"""The `draft` drafter, on the mock target and a tiny native Llama: greedy and sampled runs with
a second model keep the target's output, and its cache is reused across steps and requests."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from specdecode.core.engine import generate
from specdecode.core.sampling import SamplingParams
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.drafters.draft_model import DraftModel, _AddedRows, _Columns
from specdecode.drafters.plain import NoDrafter
from specdecode.models.fim import FimTokens, fim_window

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


def sequence(context: list[int]) -> SimpleNamespace:
    """What the drafter reads of a sequence (greedy, no grammar)."""
    return SimpleNamespace(context=torch.tensor(context), config=GenerationConfig(),
                           sampling=SamplingParams(), draw=None, drafter_state=None,
                           constraint=None)


def test_draft_model_greedy_output_equals_plain_greedy(make_target):
    config = GenerationConfig(30)
    plain = generate(make_target(11), NoDrafter(), PROMPT, config, None)
    drafter = DraftModel(make_target(12))
    result = generate(make_target(11), drafter, PROMPT, config, DraftLimit(4, 4))
    assert result.token_ids == plain.token_ids
    assert result.stats.draft_forwards == result.stats.drafted > 0


def test_a_draft_model_with_the_targets_weights_is_always_accepted(make_target):
    result = generate(make_target(11), DraftModel(make_target(11)), PROMPT,
                      GenerationConfig(20), DraftLimit(4, 4))
    assert result.stats.accepted == result.stats.drafted > 0


def test_one_draft_model_serves_requests_one_after_another_unchanged(make_target):
    target, drafter = make_target(11), DraftModel(make_target(12))
    runs = [generate(target, drafter, p, GenerationConfig(12), DraftLimit(3, 3)).token_ids
            for p in (PROMPT, [2, 2, 7], PROMPT)]
    assert runs[0] == runs[2]


def test_sampling_with_a_draft_model_is_reproducible_for_a_seed(make_target):
    config = GenerationConfig(15, SamplingParams(0.8), seed=3)
    runs = [generate(make_target(11), DraftModel(make_target(12)), PROMPT, config,
                     DraftLimit(3, 3)).token_ids for _ in range(2)]
    assert runs[0] == runs[1] and all(0 <= t < 16 for t in runs[0])
    assert torch.tensor(runs[0]).numel() == 15


def test_a_draft_model_over_a_reduced_vocabulary_keeps_greedy_output_and_drafts_only_its_ids(
        make_target):
    config = GenerationConfig(30)
    plain = generate(make_target(11), NoDrafter(), PROMPT, config, None)
    ids = torch.tensor([0, 2, 4, 6, 8, 10, 12, 14])
    drafter = DraftModel(_Columns(make_target(12), ids), "cut", ids, 16)
    drafted: list[int] = []
    propose = drafter.propose
    drafter.propose = lambda seq, budget: _record(propose(seq, budget), drafted)
    result = generate(make_target(11), drafter, PROMPT, config, DraftLimit(4, 4))
    assert result.token_ids == plain.token_ids
    assert drafted and set(drafted) <= set(ids.tolist())


def _record(draft, into: list[int]):
    into.extend(draft.tokens.tolist())
    return draft


EVEN = torch.arange(0, 16, 2)


def _cut_adding_context(model, ids: torch.Tensor, most_added: int = 1024) -> DraftModel:
    """`model` drafting over `ids` only, plus the tokens outside them its context holds."""
    addable = torch.ones(model.vocab_size, dtype=torch.bool)
    addable[ids] = False
    cut = model.with_vocabulary(ids)
    return DraftModel(cut, "cut", ids, model.vocab_size, addable=addable,
                      head_rows=cut.output_rows, most_added=most_added)


def test_a_cut_draft_model_drafts_tokens_outside_its_cut_only_once_the_context_holds_them(
        tiny_llama):
    target, config = _native(tiny_llama), GenerationConfig(40)
    plain = generate(target, NoDrafter(), PROMPT, config, None)
    drafter = _cut_adding_context(_native(tiny_llama), EVEN)  # the target's own weights
    seen: list[tuple[set[int], list[int]]] = []
    propose = drafter.propose

    def recorded(seq, budget):
        context = set(seq.context.tolist())
        draft = propose(seq, budget)
        seen.append((context, draft.tokens.tolist()))
        return draft

    drafter.propose = recorded
    result = generate(target, drafter, PROMPT, config, DraftLimit(4, 4))
    assert result.token_ids == plain.token_ids
    odd = [(t, context) for context, tokens in seen for t in tokens if t % 2]
    assert odd and all(t in context for t, context in odd)
    # the tokens added back are drafted and accepted: more than the cut alone gets
    cut_only = DraftModel(_native(tiny_llama).with_vocabulary(EVEN), "cut", EVEN, 16)
    alone = generate(target, cut_only, PROMPT, config, DraftLimit(4, 4))
    assert alone.token_ids == plain.token_ids
    assert result.stats.accepted > alone.stats.accepted


def test_added_rows_score_their_tokens_as_the_whole_output_layer_does(tiny_llama):
    model = _native(tiny_llama)
    added = torch.tensor([5, 1, 9])
    cut = model.with_vocabulary(EVEN)
    view = _AddedRows(cut, cut.output_rows(added))  # the cut copy reads the whole layer's rows
    hidden = model.hidden(model.new_cache(), torch.tensor(PROMPT))
    expected = model.logits(hidden)[:, torch.cat([EVEN, added])]
    torch.testing.assert_close(view.logits(hidden), expected, rtol=1e-5, atol=1e-5)


def test_a_sequence_adds_at_most_its_cap_of_context_tokens_in_order_of_appearance(tiny_llama):
    from specdecode.core.budget import DraftBudget
    from specdecode.core.engine import start

    drafter = _cut_adding_context(_native(tiny_llama), EVEN, most_added=2)
    seq = start(_native(tiny_llama), drafter, PROMPT, GenerationConfig(8), DraftLimit(2, 2))
    drafter.propose(seq, DraftBudget(2, 2))
    state = seq.drafter_state
    assert state.added.tolist() == [3, 1]  # PROMPT's first odd tokens; 5 and 9 over the cap
    assert state.added_rows.shape == (2, _native(tiny_llama).hidden_size)
    other = start(_native(tiny_llama), drafter, [2, 7, 4], GenerationConfig(8), DraftLimit(2, 2))
    drafter.propose(other, DraftBudget(2, 2))
    assert other.drafter_state.added.tolist() == [7]  # each sequence its own


def test_n_gram_matches_draft_for_free_where_they_promise_more_and_greedy_output_holds(
        make_target):
    same, drafts = _drafts_of_a_run(make_target, DraftModel(make_target(12), ngram=3),
                                    GenerationConfig(60), DraftLimit(4, 4))
    assert same
    matched = [d for d in drafts if d.forwards == 0 and len(d)]
    assert matched and len(matched) < len(drafts)  # both sources drafted


def _drafts_of_a_run(make_target, drafter, config, limit) -> tuple[bool, list]:
    """A greedy run of `drafter` on target 11: (whether its output is plain decoding's, its
    drafts)."""
    plain = generate(make_target(11), NoDrafter(), PROMPT, config, None)
    drafts: list = []
    propose = drafter.propose
    drafter.propose = lambda seq, budget: _record_draft(propose(seq, budget), drafts)
    result = generate(make_target(11), drafter, PROMPT, config, limit)
    return result.token_ids == plain.token_ids, drafts


def _record_draft(draft, into: list):
    into.append(draft)
    return draft


def test_a_draft_model_reading_only_the_last_tokens_keeps_greedy_output(make_target):
    config = GenerationConfig(30)
    long_prompt = PROMPT * 4
    plain = generate(make_target(11), NoDrafter(), long_prompt, config, None)
    drafter = DraftModel(make_target(12), window=5)
    fed: list[int] = []
    model = drafter.model
    drafter.model = _Feeding(model, fed)
    result = generate(make_target(11), drafter, long_prompt, config, DraftLimit(4, 4))
    assert result.token_ids == plain.token_ids
    # the window less its last token is read with the prompt's prefill, not the 32-token prompt;
    # the first step feeds that last token alone
    assert fed[:2] == [4, 1]


def test_the_first_draft_after_the_prompt_is_the_draft_models_own_greedy_continuation(
        make_target):
    from specdecode.core.budget import DraftBudget
    from specdecode.core.engine import start

    own = generate(make_target(12), NoDrafter(), PROMPT, GenerationConfig(4), None).token_ids
    drafter = DraftModel(make_target(12))
    seq = start(make_target(11), drafter, PROMPT, GenerationConfig(8), DraftLimit(4, 4))
    assert seq.drafter_state.cached.tolist() == PROMPT[:-1]  # read during the prefill
    assert drafter.propose(seq, DraftBudget(4, 4)).tokens.tolist() == own


class _Feeding:
    """A draft model that records how many tokens each call feeds."""

    def __init__(self, model, fed: list[int]) -> None:
        self.model, self.fed, self.max_length = model, fed, model.max_length

    def new_cache(self):
        return self.model.new_cache()

    def hidden(self, cache, tokens):
        self.fed.append(tokens.shape[0])
        return self.model.hidden(cache, tokens)

    def logits(self, hidden):
        return self.model.logits(hidden)


def test_a_step_drafted_from_a_match_leaves_the_draft_models_record_of_its_cache_exact(
        make_target):
    """After a draft-model step, a match-drafted step rolls the draft model's cache back; the
    tokens it holds must be forgotten too, or a later step 'keeps' more than the cache has."""
    from specdecode.core.budget import DraftBudget

    drafter = DraftModel(make_target(12), ngram=2)
    seq = sequence(PROMPT + [3, 1])
    drafter.start(seq)
    budget = DraftBudget(4, 4)
    first = drafter.propose(seq, budget)  # the draft model drafts (nothing measured yet)
    assert first.forwards > 0
    drafter.observe(seq, len(first), 0)  # all rejected: its steps net less than a match
    seq.context = torch.tensor(PROMPT + [3, 1, 4])  # "3 1" was followed by "4" in the prompt
    matched = drafter.propose(seq, budget)
    assert matched.forwards == 0 and len(matched)
    state = seq.drafter_state
    assert state.cached.shape[0] == state.cache.length
    seq.context = torch.cat([seq.context, first.tokens])  # the old draft's tokens come back
    drafter.propose(seq, budget)  # must not keep more than the cache holds


def test_a_draft_model_growing_trees_keeps_greedy_output_and_drafts_branches(make_target):
    drafter = DraftModel(make_target(12), width=3)
    same, drafts = _drafts_of_a_run(make_target, drafter, GenerationConfig(40), DraftLimit(8, 4))
    assert same
    branched = [d for d in drafts if d.parents is not None and not d.tree.is_chain]
    # the mock target cannot append under a mask: its drafter stays a chain
    assert bool(branched) == (drafter.width == 3)


def _native(tiny_llama):
    from specdecode.models.decoder import NativeDecoder

    return NativeDecoder.from_hf(tiny_llama(12, vocab=16, layers=2, max_positions=256))


def test_a_tree_draft_lists_nodes_best_first_parents_before_children_within_its_caps(
        tiny_llama):
    from specdecode.drafters.draft_model import draft_tree

    model = _native(tiny_llama)
    draft, fed, _ = draft_tree(model, model.new_cache(), torch.tensor(PROMPT), 4, 9, 3, None,
                            0.0, 0.0)
    assert len(draft) == 9 and draft.tree.depth <= 4
    assert bool((draft.parents < torch.arange(len(draft))).all())
    assert bool((draft.chances[1:] <= draft.chances[:-1]).all())
    children = [int((draft.parents == p).sum()) for p in range(-1, len(draft))]
    assert max(children) <= 3  # at most `width` continuations of a node
    # every fed node's parent was fed before it (its logits drafted the node)
    assert all(-1 <= parent < i for i, (_, parent) in enumerate(fed))


def test_a_tree_one_wide_is_the_chain_drafted_alone(tiny_llama):
    from specdecode.drafters.chain import draft_chain
    from specdecode.drafters.draft_model import draft_tree

    model = _native(tiny_llama)
    tree, _, _ = draft_tree(model, model.new_cache(), torch.tensor(PROMPT), 5, 5, 1, None, 0.1,
                         0.2)
    cache = model.new_cache()
    chain = draft_chain(lambda t: model.logits(model.hidden(cache, t)), torch.tensor(PROMPT), 5,
                        SamplingParams(), None, stop_below=0.3)
    assert tree.tokens.tolist() == chain.tokens.tolist()
    assert tree.tree.is_chain


def test_after_a_tree_step_the_draft_models_cache_holds_the_path_the_context_took(
        tiny_llama):
    """The entries kept of a tree are those of the accepted path, packed behind the prefix: the
    cache then matches feeding the context in one chain (to rounding: its rows attended to other
    cache places)."""
    from specdecode.core.budget import DraftBudget

    model = _native(tiny_llama)
    drafter = DraftModel(model, width=3)
    seq = sequence(PROMPT)
    drafter.start(seq)
    draft = drafter.propose(seq, DraftBudget(9, 4))
    deepest = max(range(len(draft)), key=lambda n: int(draft.tree.depths[n]))
    path, node = [], deepest
    while node >= 0:
        path.insert(0, int(draft.tokens[node]))
        node = int(draft.parents[node])
    assert len(path) >= 2 and not draft.tree.is_chain
    seq.context = torch.tensor(PROMPT + path + [0])  # the path accepted, then the target's token
    drafter.propose(seq, DraftBudget(1, 1))
    state = seq.drafter_state
    kept = len(PROMPT) + len(path)
    assert state.cached.tolist()[:kept] == seq.context.tolist()[:kept]
    fresh = model.new_cache()
    model.hidden(fresh, seq.context)
    assert torch.allclose(state.cache.keys[:, :, :kept].float(),
                          fresh.keys[:, :, :kept].float(), atol=1e-5)


def test_a_paused_draft_model_drafts_only_its_matches_and_runs_no_forward(make_target):
    from specdecode.core.budget import DraftBudget

    drafter = DraftModel(make_target(12), ngram=2)
    seq = sequence(PROMPT + [3, 1])
    drafter.start(seq)
    paused = DraftBudget(4, 4, forwards=False)
    matched = drafter.propose(seq, paused)  # "3 1" went on "4 1 5 9" in the prompt
    assert matched.forwards == 0 and matched.tokens.tolist() == [4, 1, 5, 9]
    seq.context = torch.tensor(PROMPT + [3, 1, 8])  # 8 is new: no match
    unmatched = drafter.propose(seq, paused)
    assert unmatched.forwards == 0 and len(unmatched) == 0
    assert drafter.propose(seq, DraftBudget(4, 4)).forwards > 0  # running again once unpaused
    assert not DraftModel(make_target(12)).free_drafts  # no matches: nothing free to draft


def test_the_draft_model_does_not_run_when_its_forward_costs_more_than_a_token_is_worth(
        make_target):
    """In a step shared by many sequences a token costs a fraction of the step: a draft-model
    forward that costs more than a whole token cannot pay, so none runs (it ran once per
    sequence and step before, drafting nothing, 8 clients' steps 3x slower)."""
    from specdecode.core.budget import DraftBudget

    drafter = DraftModel(make_target(12))
    seq = sequence(PROMPT)
    drafter.start(seq)
    drafter.clock.seconds = 0.01  # a draft-model forward: 10 ms
    alone = drafter.propose(seq, DraftBudget(4, 4, token_seconds=0.03))
    assert alone.forwards > 0
    shared = drafter.propose(seq, DraftBudget(4, 4, token_seconds=0.005))
    assert shared.forwards == 0 and len(shared) == 0


def test_a_draft_model_priced_out_by_a_passing_slowdown_drafts_again_after_a_probe(make_target):
    """A few seconds of other work on the cores can leave a forward's estimate where no token
    pays for it: without the probe's forward, nothing would ever time it again (the 1.5B pair
    stayed at τ 1.16 on every later request)."""
    from specdecode.core.budget import DraftBudget
    from specdecode.drafters.clock import ForwardClock

    drafter = DraftModel(make_target(12))
    seq = sequence(PROMPT)
    drafter.start(seq)
    drafter.clock.seconds = 1.0  # what the slowdown left: a second a forward
    budget = DraftBudget(4, 4, token_seconds=0.03)
    forwards = [drafter.propose(seq, budget).forwards for _ in range(ForwardClock.PROBE + 2)]
    assert forwards[: ForwardClock.PROBE] == [0] * ForwardClock.PROBE
    assert forwards[ForwardClock.PROBE] > 0  # the probe, timed at the model's real speed
    assert drafter.clock.seconds < 0.03 and len(drafter.propose(seq, budget)) > 0
    # fallen further behind than a timed forward feeds, a sequence is no probe: its catch-up
    # would cost much and time nothing
    drafter.clock.seconds = 1.0
    seq.context = torch.cat([seq.context, torch.tensor(PROMPT * 3)])
    assert all(drafter.propose(seq, budget).forwards == 0
               for _ in range(ForwardClock.PROBE + 2))


def test_a_negative_draft_option_is_refused_before_any_model_loads():
    from specdecode.errors import InvalidParameterError

    options = DraftModel.Options(draft_model="never-loaded", draft_context_tokens=-1)
    with pytest.raises(InvalidParameterError, match="--draft-context-tokens must be >= 0"):
        DraftModel.create(SimpleNamespace(drafter=None), options)


def test_a_fim_prompt_keeps_its_shape_in_the_draft_models_window(make_target):
    """The window of a fill-in-the-middle prompt is the code around the cursor (`fim_window`),
    not the suffix's end; other prompts keep their last tokens; greedy output holds."""
    fim = FimTokens(prefix=13, suffix=14, middle=15)
    prompt = [13, *[1, 2, 3, 4, 5] * 4, 14, *[6, 7, 8] * 5, 15]  # prefix 20, suffix 15
    config = GenerationConfig(12)
    plain = generate(make_target(11), NoDrafter(), prompt, config, None)
    drafter = DraftModel(make_target(12), window=12, fim=fim)
    result = generate(make_target(11), drafter, prompt, config, DraftLimit(4, 4))
    assert result.token_ids == plain.token_ids
    seq = sequence(prompt)
    drafter.start(seq)
    drafter.prepare(seq)
    assert seq.drafter_state.cached.tolist() == fim_window(prompt, fim, 12)[:-1] == [
        13, 4, 5, 1, 2, 3, 4, 5, 14, 6, 7]  # the prefix's last 7, the suffix's first 2
    seq = sequence(PROMPT * 3)
    drafter.start(seq)
    drafter.prepare(seq)
    assert seq.drafter_state.cached.tolist() == (PROMPT * 3)[-12:-1]
