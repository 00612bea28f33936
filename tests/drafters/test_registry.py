"""`drafters/registry.py`: the registry and drafters' options."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from mock_target import MockTarget

from specdecode.core.budget import DraftBudget
from specdecode.core.drafter import Drafter
from specdecode.drafters import DRAFTERS, create_drafter, make_options, option
from specdecode.drafters.registry import drafter_class, option_fields, register
from specdecode.errors import InvalidParameterError


def test_every_drafter_is_registered_and_unknown_names_raise():
    assert {"ar", "lookup", "draft", "layerskip", "eagle", "medusa"} <= set(DRAFTERS)
    with pytest.raises(InvalidParameterError, match="unknown method"):
        create_drafter("no-such-method", None)


def test_create_drafter_builds_lookup_from_its_options():
    model = SimpleNamespace(target=MockTarget(vocab=32, layers=2, max_length=256, seed=1),
                            key="mock", weights="float64", kernels="torch")
    drafter = create_drafter("lookup", model, make_options("lookup", {"ngram_max": 5,
                                                                      "ngram_min": 2}))
    assert (drafter.ngram_max, drafter.ngram_min) == (5, 2)
    assert drafter.default_budget == DraftBudget(10, 10)


def test_draft_method_without_a_draft_model_raises():
    with pytest.raises(InvalidParameterError, match="needs --draft-model.*mock has no default"):
        create_drafter("draft", SimpleNamespace(name="mock", drafter=None))


def test_draft_method_takes_the_targets_own_drafter_by_default():
    cls = drafter_class("draft")
    options = make_options("draft", {})
    assert cls.unavailable(SimpleNamespace(name="q", drafter="small-alias"), options) is None
    assert [c["draft_model"] for c in cls.tune_candidates(
        SimpleNamespace(name="q", drafter="small-alias"), None)] == ["small-alias"] * 3


def test_options_take_their_own_fields_parse_text_and_validate_in_one_line():
    options = make_options("layerskip", {"layers": "0,2,1", "ngram_max": 3})  # ngram: lookup's
    assert options.layers == (0, 2, 1)
    with pytest.raises(InvalidParameterError, match="--layers: cannot read 'x,1'"):
        make_options("layerskip", {"layers": "x,1"})
    with pytest.raises(InvalidParameterError, match="ngram-min <= ngram-max"):
        make_options("lookup", {"ngram_max": 2, "ngram_min": 3})
    with pytest.raises(InvalidParameterError, match="--tree-topk must be >= 1"):
        make_options("eagle", {"tree_topk": 0})


def test_an_option_several_drafters_declare_is_listed_once_with_each_of_them():
    fields = option_fields()
    assert [method for method, _ in fields["draft_model"]] == ["draft", "eagle", "medusa"]
    assert [method for method, _ in fields["ngram_max"]] == ["lookup", "suffix"]


def test_a_drafter_registered_later_brings_its_options(monkeypatch):
    monkeypatch.setattr("specdecode.drafters.registry.DRAFTERS", dict(DRAFTERS))

    @register("later")
    class Later(Drafter):
        @dataclass(frozen=True)
        class Options:
            width: int = option(2, "how wide")

        @classmethod
        def create(cls, model, options):
            return cls()

        def propose(self, seq, budget):
            raise NotImplementedError

    assert option_fields()["width"][0][0] == "later"
    assert make_options("later", {"width": 5}).width == 5
