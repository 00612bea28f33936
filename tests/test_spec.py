"""`resolve`'s built-in default method: the fastest measured, by whether the model names a
draft model."""

from __future__ import annotations

from types import SimpleNamespace

from specdecode.spec import DEFAULT_METHOD, resolve


def _model(drafter: str | None) -> SimpleNamespace:
    return SimpleNamespace(name="m", key="no-profile-for-this-key", drafter=drafter, target=None)


def test_a_model_naming_its_draft_model_defaults_to_drafting_with_it():
    spec = resolve(_model("small-alias"))
    assert spec.method == "draft" and spec.options.draft_model is None  # the alias's own


def test_a_model_without_one_keeps_the_general_default():
    assert resolve(_model(None)).method == DEFAULT_METHOD == "lookup"


def test_a_tree_drafter_on_a_target_that_scores_chains_only_is_refused_with_the_reason():
    import pytest

    from specdecode.errors import InvalidParameterError
    from specdecode.models.hf_target import HFTarget

    model = _model(None)
    model.target = HFTarget.__new__(HFTarget)  # its class's capabilities; no weights needed
    with pytest.raises(InvalidParameterError, match="suffix proposes token trees.*chains only"):
        resolve(model, "suffix")
    assert resolve(model, "lookup").method == "lookup"
