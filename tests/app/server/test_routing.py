"""The conversation router's policy (`routing.ConversationRouter`) and the key it routes by
(`ray_ingress.conversation_key`), without a Ray instance."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

pytest.importorskip("ray", reason="the [ray] extra is not installed")

from specdecode.app.server.ray_ingress import conversation_key  # noqa: E402
from specdecode.app.server.ray_replica import Forwarded  # noqa: E402
from specdecode.app.server.relay import Relay  # noqa: E402
from specdecode.app.server.routing import ConversationRouter  # noqa: E402

CHAT = "/v1/chat/completions"


def _chat(*messages: tuple[str, str]) -> bytes:
    return json.dumps({"messages": [{"role": r, "content": c} for r, c in messages],
                       "max_tokens": 8}).encode()


def test_every_turn_of_a_conversation_has_its_first_turns_key():
    first = _chat(("system", "Be brief."), ("user", "Hi"))
    later = _chat(("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello!"),
                  ("user", "How are you?"))
    assert conversation_key(CHAT, first) == conversation_key(CHAT, later) is not None


def test_conversations_that_open_differently_have_different_keys():
    keys = {conversation_key(CHAT, _chat(("user", q))) for q in ("Hi", "Hello", "hi")}
    keys.add(conversation_key(CHAT, _chat(("system", "Be brief."), ("user", "Hi"))))
    assert len(keys) == 4


def test_completion_prompts_are_keyed_by_their_head_and_other_bodies_by_none():
    head = "x" * 300
    assert conversation_key("/v1/completions", json.dumps({"prompt": head + "a"}).encode()) == \
        conversation_key("/v1/completions", json.dumps({"prompt": head + "b"}).encode())
    assert conversation_key("/v1/completions", json.dumps({"prompt": [1, 2]}).encode()) is None
    assert conversation_key(CHAT, b"not json") is None
    assert conversation_key("/health", b"") is None


class _Cache:
    def __init__(self, loads: dict[str, int]) -> None:
        self.loads = loads

    def get(self, replica_id: str) -> int | None:
        return self.loads.get(replica_id)


def _router(loads: dict[str, int], imbalance: int = 2) -> ConversationRouter:
    router = ConversationRouter.__new__(ConversationRouter)  # no Ray handle behind it
    router.initialize_state(imbalance=imbalance, remembered=2)
    router._replica_queue_len_cache = _Cache(loads)
    return router


def _request(key: str | None) -> SimpleNamespace:
    return SimpleNamespace(args=[Forwarded("POST", CHAT, b"", [], b"", key, Relay("s", 0))])


REPLICAS = [SimpleNamespace(replica_id=name) for name in ("a", "b", "c")]


def _ids(ranks) -> list[list[str]]:
    return [[r.replica_id for r in rank] for rank in ranks]


def test_a_conversation_goes_back_to_its_replica_while_it_is_within_the_imbalance():
    loads = {"a": 0, "b": 2, "c": 1}
    router = _router(loads, imbalance=2)
    router._remember("k", "b")
    ranks = asyncio.run(router.choose_replicas(REPLICAS, _request("k")))
    assert _ids(ranks) == [["b"], ["a", "c", "b"]]  # then the least loaded first
    loads["b"] = 3  # 3 more than the least loaded replica: the conversation moves there
    ranks = asyncio.run(router.choose_replicas(REPLICAS, _request("k")))
    assert _ids(ranks) == [["a"], ["a", "c", "b"]]
    assert router.homes["k"] == "a" and +router.conversations == {"a": 1}


def test_new_conversations_spread_over_equally_loaded_replicas():
    router = _router({})
    chosen = [asyncio.run(router.choose_replicas(REPLICAS, _request(key)))[0][0].replica_id
              for key in "pqrstu"]
    assert chosen == ["a", "b", "c", "a", "b", "c"]


def test_unknown_conversations_and_replicas_gone_go_to_the_least_loaded():
    router = _router({"a": 2, "b": 0, "c": 1})
    router._remember("k", "gone")
    for request in (_request("k"), _request(None), None):
        assert _ids(asyncio.run(router.choose_replicas(REPLICAS, request))) == \
            [["b"], ["b", "c", "a"]]
    assert router.homes["k"] == "b" and len(router.homes) == 1


def test_the_least_recently_routed_conversation_is_forgotten_first():
    router = _router({})
    for key, replica in (("x", "a"), ("y", "b"), ("x", "a"), ("z", "c")):
        router._remember(key, replica)
    assert dict(router.homes) == {"x": "a", "z": "c"}
    assert +router.conversations == {"a": 1, "c": 1}
