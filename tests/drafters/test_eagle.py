"""The `eagle` drafter, on the mock target and a tiny native Llama: the head layer the target
builds equals the trainable module, the incremental cache gives the same trees as a fresh start,
and greedy output is lossless."""

from __future__ import annotations

import pytest
import torch
from drafter_helpers import V, as_model

from specdecode.core.engine import generate, start, step
from specdecode.core.sampling import SamplingParams
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.drafters import create_drafter, make_options
from specdecode.drafters.eagle import Eagle
from specdecode.drafters.plain import NoDrafter
from specdecode.errors import ModelLoadError
from specdecode.models.heads import EagleHead, load_head, save_head
from specdecode.models.decoder import NativeDecoder

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


def random_head(target, seed: int = 0, draft_vocab: list[int] | None = None) -> EagleHead:
    torch.manual_seed(seed)
    cfg = target.layer_shape()
    if draft_vocab:
        cfg["draft_vocab"] = draft_vocab
    head = EagleHead(cfg).eval()
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0, 0.3)
    return head


def test_native_head_layer_equals_the_trainable_module(tiny_llama):
    target = NativeDecoder.from_hf(tiny_llama(11, vocab=V, layers=2))
    head = random_head(target)
    drafter = Eagle(target, head)
    T = 12
    features = torch.randn(T, target.hidden_size, generator=torch.Generator().manual_seed(1))
    tokens = torch.randint(0, V, (T,), generator=torch.Generator().manual_seed(2))
    cos, sin = target.rope_tables(T)
    with torch.no_grad():
        expected = head(features[None], target.embedding(tokens)[None], cos, sin)[0]
    # in two chunks, as the drafter feeds newly confirmed pairs
    cache = drafter.layer.new_cache()
    got = torch.cat([drafter._head(cache, features[:7], tokens[:7]),
                     drafter._head(cache, features[7:], tokens[7:])])
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def greedy_run(target, drafter, new: int = 30, depth: int | None = 4, nodes: int = 9):
    config = GenerationConfig(new, SamplingParams())
    return generate(target, drafter, PROMPT, config, DraftLimit(nodes, depth) if depth else None)


@pytest.mark.parametrize("topk, nodes, draft_vocab", [(4, 12, None), (2, 5, None),
                                                      (3, 8, [0, 2, 3, 5, 7, 9, 10, 11, 13])])
def test_eagle_greedy_output_equals_plain_greedy(topk, nodes, draft_vocab, make_target):
    plain = greedy_run(make_target(), NoDrafter(), depth=None)
    target = make_target()
    drafter = Eagle(target, random_head(target, draft_vocab=draft_vocab), topk)
    result = greedy_run(target, drafter, nodes=nodes)
    assert result.token_ids == plain.token_ids
    assert result.stats.accepted > 0  # some tree paths were accepted and compacted
    assert result.stats.drafted <= nodes * result.stats.target_forwards


def test_eagle_trees_from_the_incremental_cache_equal_trees_from_scratch(make_target):
    """The drafter only feeds the pairs each step confirmed; a fresh drafter given the whole
    context at once must propose the same tree."""
    target = make_target()
    head = random_head(target, seed=3)
    drafter = Eagle(target, head, topk=3)
    proposals = []
    original = drafter.propose

    def recording(seq, budget):
        draft = original(seq, budget)
        proposals.append((seq.context.tolist(), budget, draft))
        return draft

    drafter.propose = recording
    greedy_run(target, drafter, new=20)
    assert len(proposals) > 3
    for context, budget, draft in proposals:
        fresh_target = make_target()
        fresh = Eagle(fresh_target, head, topk=3)
        seq = start(fresh_target, fresh, context, GenerationConfig(1), None)
        again = fresh.propose(seq, budget)
        assert again.tokens.tolist() == draft.tokens.tolist()
        assert again.parents.tolist() == draft.parents.tolist()


def test_one_drafter_serves_two_sequences_in_turn_as_if_each_ran_alone(make_target):
    """Per-request state lives on the sequence: interleaving two requests' steps on one drafter
    gives each the trees it gets alone."""
    target = make_target()
    drafter = Eagle(target, random_head(target, seed=4), topk=3)
    prompts = [PROMPT, [7, 7, 2, 9, 4]]
    alone = [greedy_run(target, drafter, new=12, nodes=6).token_ids,
             generate(target, drafter, prompts[1], GenerationConfig(12), DraftLimit(6, 3)).token_ids]
    seqs = [start(target, drafter, p, GenerationConfig(12), DraftLimit(6, depth))
            for p, depth in zip(prompts, (4, 3))]
    while any(s.finish_reason is None for s in seqs):
        for s in seqs:
            if s.finish_reason is None:
                step(target, drafter, s)
    assert [s.generated for s in seqs] == alone


def test_eagle_loads_a_saved_head_through_the_registry(make_target, tmp_path):
    target = make_target()
    head = random_head(target, seed=5)
    save_head(head, tmp_path / "head")
    model = as_model(target)
    drafter = create_drafter("eagle", model,
                             make_options("eagle", {"draft_model": str(tmp_path / "head")}))
    assert isinstance(drafter, Eagle)
    assert load_head(tmp_path / "head").cfg["hidden_size"] == head.cfg["hidden_size"]
    with pytest.raises(ModelLoadError, match="train one with"):
        create_drafter("eagle", model,
                       make_options("eagle", {"draft_model": str(tmp_path / "missing")}))


def test_eagle_drafts_up_to_the_end_of_a_short_context_window(make_target):
    """The head's own cache holds the committed pairs plus every expanded node; near the end of
    the context window the tree must shrink rather than overflow either cache."""
    plain = generate(make_target(max_positions=32), NoDrafter(), PROMPT * 3,
                     GenerationConfig(16, SamplingParams()), None)
    target = make_target(max_positions=32)
    result = generate(target, Eagle(target, random_head(target), topk=4), PROMPT * 3,
                      GenerationConfig(16, SamplingParams()), DraftLimit(12, 6))
    assert result.token_ids == plain.token_ids
    assert len(PROMPT * 3) + len(result.token_ids) == 32 or result.finish_reason == "stop"
