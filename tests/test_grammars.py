"""JSON schemas as clients write them: an object that lists its properties and says nothing of
others takes no other keys (as llama.cpp's converter and xgrammar's strict mode read it), so a
greedy model cannot add invented keys until the token limit; a schema that allows them says so."""

from __future__ import annotations

import json

import pytest

from specdecode.grammars import GrammarCompiler, closed_objects
from model_fixtures import accepts

# what the `llm` CLI sends for --schema 'name, country, population_millions float'
CITY = {"type": "object", "properties": {"name": {"type": "string"},
                                         "country": {"type": "string"},
                                         "population_millions": {"type": "number"}},
        "required": ["name", "country", "population_millions"]}
ANSWER = {"name": "Paris", "country": "France", "population_millions": 2.1}


def test_objects_that_list_properties_are_closed_and_the_rest_left_as_written():
    nested = {"type": "object", "properties": {"cities": {"type": "array", "items": CITY}},
              "$defs": {"c": CITY}, "anyOf": [CITY, {"type": "string"}]}
    closed = closed_objects(nested)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["cities"]["items"]["additionalProperties"] is False
    assert closed["$defs"]["c"]["additionalProperties"] is False
    assert closed["anyOf"][0]["additionalProperties"] is False and "additionalProperties" not in \
        closed["anyOf"][1]
    assert closed_objects({**CITY, "additionalProperties": True})["additionalProperties"] is True
    assert closed_objects({"type": "object"}) == {"type": "object"}  # json_object: any keys
    assert "additionalProperties" not in CITY  # the caller's schema is not changed


@pytest.mark.real_model
def test_a_schema_without_additional_properties_takes_no_invented_key(qwen_tokenizer):
    tokenizer, vocab = qwen_tokenizer
    compiler = GrammarCompiler(tokenizer, vocab, frozenset([tokenizer.eos_token_id]))
    extra = json.dumps({**ANSWER, "mayor": "Anne"}, separators=(", ", ": "))
    closed = compiler.json_schema(CITY)
    assert accepts(closed, tokenizer, json.dumps(ANSWER, separators=(", ", ": ")))
    assert not accepts(closed, tokenizer, extra)
    assert accepts(compiler.json_schema({**CITY, "additionalProperties": True}), tokenizer,
                   extra)
