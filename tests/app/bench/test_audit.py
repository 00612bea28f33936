"""The greedy audit: where two outputs part, and the target's top-2 logit margin there."""

import torch

from specdecode.app.bench.audit import TIE_MARGIN, first_difference, greedy_audit, top2_margin
from specdecode.app.bench.records import Record
from specdecode.models import load_model


def test_first_difference_finds_the_index_or_the_shorter_length():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_margin_is_the_gap_between_the_two_largest_next_token_logits(tiny_real_vocab_model):
    model = load_model(str(tiny_real_vocab_model))
    context = [5, 17, 300, 42]
    with torch.no_grad():
        logits = model.hf_model(input_ids=torch.tensor([context])).logits[0, -1]
    top = logits.topk(2).values
    assert abs(top2_margin(model, context) - float(top[0] - top[1])) < 1e-4


def test_audit_reports_a_planted_mismatch_with_its_position(tiny_real_vocab_model):
    model = load_model(str(tiny_real_vocab_model))
    prompt = [5, 17, 300]

    def rec(method, ids):
        return Record(1, 1, "translation", method, 0, len(ids), 1.0, token_ids=ids)

    found = greedy_audit(model, [rec("ar", [7, 8, 9]), rec("lookup", [7, 8, 10]),
                                 rec("hf", [7, 8, 9])], {(1, 1): prompt})
    assert len(found) == 1
    (a,) = found
    assert (a["method"], a["position"], a["peer"]) == ("lookup", 2, False)
    assert a["margin"] == top2_margin(model, prompt + [7, 8])
    assert a["explained"] == (a["margin"] < TIE_MARGIN)
