"""Structured outputs through the official `openai` client: `chat.completions.parse` with pydantic
models returns parsed objects valid against their schemas (checked with jsonschema), streamed and
not; the speculative answer is token for token plain constrained greedy decoding's; llama.cpp's
`json_schema` and GBNF `grammar` fields constrain /v1/completions."""

from __future__ import annotations

import json
from typing import Literal

import jsonschema
import openai
import pydantic
import pytest
from server_helpers import running

from specdecode.app.server import create_app
from specdecode.models import load_model
from specdecode.pipeline import SpecDecoder

pytestmark = pytest.mark.real_model


class Address(pydantic.BaseModel):
    street: str
    city: str
    postal_code: str


class Person(pydantic.BaseModel):
    name: str
    age: int
    status: Literal["new", "returning"]
    address: Address


class Invoice(pydantic.BaseModel):
    number: str
    total: float
    currency: Literal["EUR", "USD", "GBP"]
    paid: bool


CASES = [
    (Person, "Extract the person: Maria Lopez, 34, lives at Calle Mayor 5, 46001 Valencia. "
             "It is her first visit."),
    (Invoice, "Extract the invoice: invoice INV-0412 over 118.50 EUR, already paid."),
    (Person, "Extract the person: John Smith (52), 10 Downing Street, London SW1A 2AA, a "
             "returning customer."),
]


@pytest.fixture(scope="module")
def model():
    return load_model("smollm2-135m")


@pytest.fixture(scope="module")
def client(model):
    with running(create_app(load_model("smollm2-135m"), max_queue=16)) as srv:
        with openai.OpenAI(base_url=srv.v1, api_key="x", max_retries=0, timeout=120) as c:
            yield c


def plain_constrained(model, schema: dict, prompt: str) -> str:
    sd = SpecDecoder(model, "ar")
    return sd.generate(prompt, max_new_tokens=120, grammar=sd.grammars.json_schema(schema)).text


@pytest.mark.parametrize("case", range(len(CASES)))
def test_parse_returns_objects_valid_against_the_schema_and_equal_to_plain(client, model, case):
    cls, prompt = CASES[case]
    resp = client.chat.completions.parse(
        model="smollm2-135m", messages=[{"role": "user", "content": prompt}], response_format=cls,
        temperature=0, max_tokens=120)
    message = resp.choices[0].message
    assert resp.choices[0].finish_reason == "stop"
    assert isinstance(message.parsed, cls)
    schema = openai.lib._pydantic.to_strict_json_schema(cls)
    jsonschema.validate(json.loads(message.content), schema)
    assert message.content == plain_constrained(model, schema, prompt)
    assert resp.usage.model_dump()["speculative"]["method"] == "lookup"


def test_streamed_structured_output_is_the_same_text(client):
    cls, prompt = CASES[0]
    schema = openai.lib._pydantic.to_strict_json_schema(cls)
    whole = client.chat.completions.create(
        model="smollm2-135m", messages=[{"role": "user", "content": prompt}], temperature=0,
        max_tokens=120, response_format={"type": "json_schema", "json_schema": {
            "name": "person", "schema": schema, "strict": True}})
    chunks = list(client.chat.completions.create(
        model="smollm2-135m", messages=[{"role": "user", "content": prompt}], temperature=0,
        max_tokens=120, stream=True, response_format={"type": "json_schema", "json_schema": {
            "name": "person", "schema": schema, "strict": True}}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole.choices[0].message.content
    jsonschema.validate(json.loads(streamed), schema)


def test_json_object_gives_a_json_object(client):
    resp = client.chat.completions.create(
        model="smollm2-135m", temperature=0, max_tokens=60,
        messages=[{"role": "user", "content": "Give the capital of France as JSON."}],
        response_format={"type": "json_object"})
    if resp.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(resp.choices[0].message.content), dict)
    else:  # cut by max_tokens: the output as is, a prefix of an object
        assert resp.choices[0].message.content.startswith("{")


def test_llama_cpp_grammar_and_json_schema_fields_constrain_completions(client):
    resp = client.completions.create(model="smollm2-135m", prompt="Is the sky green? Answer:",
                                     max_tokens=5, temperature=0,
                                     extra_body={"grammar": 'root ::= " yes" | " no"'})
    assert resp.choices[0].text in (" yes", " no") and resp.choices[0].finish_reason == "stop"
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    resp = client.completions.create(model="smollm2-135m", prompt="Two plus two as JSON:",
                                     max_tokens=20, temperature=0, extra_body={"json_schema": schema})
    jsonschema.validate(json.loads(resp.choices[0].text), schema)


def test_a_grammar_cut_by_max_tokens_finishes_with_length_and_the_partial_output(client):
    cls, prompt = CASES[0]
    resp = client.chat.completions.create(
        model="smollm2-135m", messages=[{"role": "user", "content": prompt}], temperature=0,
        max_tokens=5, response_format={"type": "json_schema", "json_schema": {
            "name": "person", "schema": openai.lib._pydantic.to_strict_json_schema(cls)}})
    assert resp.choices[0].finish_reason == "length"
    assert resp.choices[0].message.content.startswith('{"name": ')
