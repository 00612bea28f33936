"""The `eagle` drafter on tiny random models: the head it runs natively equals the trainable
module, its incremental cache gives the same trees as a fresh start, and greedy output is lossless."""

from __future__ import annotations

import pytest
import torch

from specdecode.drafters.base import DraftLength, DrafterOptions, create_drafter
from specdecode.drafters.eagle import Eagle
from specdecode.drafters.plain import NoDrafter
from specdecode.engine import GenerationConfig, generate
from specdecode.errors import ModelLoadError
from specdecode.models.heads import EagleHead, layer_config, load_head, save_head
from specdecode.rope import config_tables
from specdecode.models.llama import NativeLlama
from specdecode.sampling import SamplingParams

V = 16  # a small vocabulary: a random head's top-4 children are often right, so paths get accepted
PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


def random_head(model, seed: int = 0, draft_vocab: list[int] | None = None) -> EagleHead:
    torch.manual_seed(seed)
    cfg = layer_config(model.config)
    if draft_vocab:
        cfg["draft_vocab"] = draft_vocab
    head = EagleHead(cfg).eval()
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0, 0.3)
    return head


@pytest.fixture(scope="module")
def target_model(tiny_llama):
    return tiny_llama(11, vocab=V, layers=2)


def test_native_head_layer_equals_the_trainable_module(target_model):
    head = random_head(target_model)
    target = NativeLlama.from_hf(target_model)
    drafter = Eagle(target, head)
    T = 12
    features = torch.randn(T, target.embed.shape[1], generator=torch.Generator().manual_seed(1))
    tokens = torch.randint(0, V, (T,), generator=torch.Generator().manual_seed(2))
    cos, sin = config_tables(target_model.config, T)
    with torch.no_grad():
        expected = head(features[None], target.embed[tokens][None], cos, sin)[0]
    # in two chunks, as the drafter feeds newly confirmed pairs
    got = torch.cat([drafter._head(features[:7], tokens[:7]), drafter._head(features[7:], tokens[7:])])
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def greedy_run(target, drafter, new: int = 30, k: int | None = 4):
    config = GenerationConfig(new, SamplingParams())
    return generate(target, drafter, PROMPT, config, DraftLength(k) if k else None)


@pytest.mark.parametrize("topk, nodes, draft_vocab", [(4, 12, None), (2, 5, None),
                                                      (3, 8, [0, 2, 3, 5, 7, 11, 13])])
def test_eagle_greedy_output_equals_plain_greedy(topk, nodes, draft_vocab, target_model):
    plain = greedy_run(NativeLlama.from_hf(target_model), NoDrafter(), k=None)
    target = NativeLlama.from_hf(target_model)
    drafter = Eagle(target, random_head(target_model, draft_vocab=draft_vocab), topk, nodes)
    result = greedy_run(target, drafter)
    assert result.token_ids == plain.token_ids
    assert result.stats.accepted > 0  # some tree paths were accepted and compacted
    assert result.stats.drafted <= nodes * result.stats.target_forwards


def test_eagle_trees_from_the_incremental_cache_equal_trees_from_scratch(target_model):
    """The drafter only feeds the pairs each step confirmed; a fresh drafter given the whole
    context at once must propose the same tree."""
    target = NativeLlama.from_hf(target_model)
    head = random_head(target_model, seed=3)
    drafter = Eagle(target, head, topk=3, nodes=9)
    proposals = []
    original = drafter.propose

    def recording(context, k, params, generator):
        draft = original(context, k, params, generator)
        proposals.append((context.clone(), k, draft))
        return draft

    drafter.propose = recording
    greedy_run(target, drafter, new=20)
    assert len(proposals) > 3
    for context, k, draft in proposals:
        fresh_target = NativeLlama.from_hf(target_model)
        fresh = Eagle(fresh_target, head, topk=3, nodes=9)
        fresh.observe_features(fresh_target.prefill(context[:-1]))
        again = fresh.propose(context, k, SamplingParams(), None)
        assert again.tokens.tolist() == draft.tokens.tolist()
        assert again.parents.tolist() == draft.parents.tolist()


def test_eagle_loads_a_saved_head_through_the_registry(target_model, tmp_path):
    from specdecode.models.loader import LoadedModel

    target = NativeLlama.from_hf(target_model)
    head = random_head(target_model, seed=5)
    save_head(head, tmp_path / "head")
    model = LoadedModel("tiny", "tiny", None, target, "native", frozenset(), "tiny")
    drafter = create_drafter("eagle", model, DrafterOptions(draft_model=str(tmp_path / "head")))
    assert isinstance(drafter, Eagle)
    assert load_head(tmp_path / "head").cfg["hidden_size"] == head.cfg["hidden_size"]
    with pytest.raises(ModelLoadError, match="train one with"):
        create_drafter("eagle", model, DrafterOptions(draft_model=str(tmp_path / "missing")))


def test_eagle_drafts_up_to_the_end_of_a_short_context_window(tiny_llama):
    """The head's own cache holds the committed pairs plus every expanded node; near the end of
    the context window the tree must shrink rather than overflow either cache."""
    model = tiny_llama(13, vocab=V, layers=2, max_positions=32)
    plain = generate(NativeLlama.from_hf(model), NoDrafter(), PROMPT * 3,
                     GenerationConfig(16, SamplingParams()), None)
    target = NativeLlama.from_hf(model)
    result = generate(target, Eagle(target, random_head(model), topk=4, nodes=12), PROMPT * 3,
                      GenerationConfig(16, SamplingParams()), DraftLength(6))
    assert result.token_ids == plain.token_ids
    assert len(PROMPT * 3) + len(result.token_ids) == 32 or result.finish_reason == "stop"
