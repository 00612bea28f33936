"""The draft caps a request runs with come from one rule, whatever their source: the request's
`speculative` object, else the server's --max-draft-nodes / --max-draft-depth, else the tuned
profile's, else the drafter's default; the usage report says which were used and the engine keeps
within them."""

from __future__ import annotations

import httpx
import pytest
from server_helpers import running

import specdecode.spec
from specdecode.app.server import create_app
from specdecode.pipeline import SpecDecoder

BODY = {"prompt": "one two three four one two three four one two three four one two",
        "max_tokens": 24, "temperature": 0}


def served(app, body: dict) -> dict:
    with running(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as client:
        r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()["usage"]["speculative"]


def test_the_servers_caps_reach_a_request_without_its_own(served_model):
    usage = served(create_app(SpecDecoder(served_model, "lookup", max_draft_nodes=3,
                                          max_draft_depth=2)), BODY)
    assert (usage["max_draft_nodes"], usage["max_draft_depth"]) == (3, 2)
    assert 0 < usage["drafted"] <= 2 * usage["target_forwards"]  # depth 2 a step at most


def test_the_tuned_profiles_caps_reach_a_request_without_its_own(served_model, monkeypatch):
    monkeypatch.setattr(specdecode.spec, "tuned_defaults", lambda model: {
        "method": "lookup", "max_draft_nodes": 5, "max_draft_depth": 3, "options": {}})
    usage = served(create_app(served_model), BODY)
    assert (usage["method"], usage["max_draft_nodes"], usage["max_draft_depth"]) == (
        "lookup", 5, 3)


@pytest.mark.parametrize("speculative, expected", [
    ({"max_draft_nodes": 4}, (4, 2)), ({"max_draft_depth": 1}, (3, 1)),
    ({"method": "lookup", "max_draft_nodes": 6, "max_draft_depth": 6}, (6, 6))])
def test_a_requests_own_caps_replace_the_servers(served_model, speculative, expected):
    app = create_app(SpecDecoder(served_model, "lookup", max_draft_nodes=3, max_draft_depth=2))
    usage = served(app, {**BODY, "speculative": speculative})
    assert (usage["max_draft_nodes"], usage["max_draft_depth"]) == expected
