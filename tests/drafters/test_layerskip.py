"""The `layerskip` drafter, on the mock target and a tiny native Llama: drafting with a subset of
the target's own layers keeps greedy output and leaves the cache as it was; without a profile it
decodes plainly and says why."""

from __future__ import annotations

import pytest
from drafter_helpers import as_model

from specdecode.core.budget import DraftBudget
from specdecode.core.engine import generate, start
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.drafters import create_drafter, make_options
from specdecode.drafters.layerskip import LayerSkip
from specdecode.drafters.plain import NoDrafter
from specdecode.errors import InvalidParameterError

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


@pytest.mark.parametrize("layers", [(0,), (0, 1)])
def test_layerskip_greedy_output_equals_plain_greedy(make_target, layers):
    config = GenerationConfig(25)
    plain = generate(make_target(), NoDrafter(), PROMPT, config, None)
    target = make_target()
    result = generate(target, LayerSkip(target, layers), PROMPT, config, DraftLimit(3, 3))
    assert result.token_ids == plain.token_ids
    assert result.stats.drafted > 0
    if layers == (0, 1):  # all layers: the draft is the target itself
        assert result.stats.accepted == result.stats.drafted


def test_a_layerskip_proposal_leaves_the_sequences_cache_as_it_found_it(make_target):
    target = make_target()
    drafter = LayerSkip(target, (0,))
    seq = start(target, drafter, PROMPT, GenerationConfig(4), DraftLimit(3, 3))
    before = seq.cache.length
    assert len(drafter.propose(seq, DraftBudget(3, 3)).tokens) == 3
    assert seq.cache.length == before


def test_layerskip_without_a_profile_decodes_plainly_and_says_so(make_target, tmp_path,
                                                                monkeypatch, caplog):
    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    drafter = create_drafter("layerskip", as_model(make_target(), "no-profile"))
    assert drafter.layers is None and "run `specdecode tune`" in drafter.describe()
    assert "run `specdecode tune`" in caplog.text


def test_layerskip_checks_the_layers_it_is_given(make_target):
    with pytest.raises(InvalidParameterError, match="layers in 0..1"):
        create_drafter("layerskip", as_model(make_target()),
                       make_options("layerskip", {"layers": (0, 5)}))
