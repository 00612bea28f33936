"""Server fixtures: the tiny real-vocabulary model, loaded once for the server and once more for
reference runs in the test thread (a model must never be used by two threads at once)."""

from __future__ import annotations

import time

import openai
import pytest

from specdecode.models import load_model
from specdecode.pipeline import SpecDecoder

STEP_DELAY = 0.04  # seconds added to each target forward of the slow model


@pytest.fixture(scope="session")
def served_model(tiny_real_vocab_model):
    return load_model(str(tiny_real_vocab_model))


@pytest.fixture(scope="session")
def reference_model(tiny_real_vocab_model):
    return load_model(str(tiny_real_vocab_model))


@pytest.fixture(scope="session")
def slow_model(tiny_real_vocab_model):
    """The tiny model with every target forward slowed down, so a generation takes seconds (plain
    decoding: one token per forward) and queueing, cancellation and timeouts can be observed."""
    model = load_model(str(tiny_real_vocab_model))
    hidden_batch = model.target.hidden_batch  # the engine's one target forward per step

    def slow_hidden_batch(*args, **kwargs):
        time.sleep(STEP_DELAY)
        return hidden_batch(*args, **kwargs)

    model.target.hidden_batch = slow_hidden_batch
    return model


@pytest.fixture
def slow_decoder(slow_model):
    return SpecDecoder(slow_model, "ar")


@pytest.fixture(scope="module")
def client(server):
    """The official `openai` client on the module's `server` (a module may define its own)."""
    with openai.OpenAI(base_url=server.v1, api_key="x", max_retries=0, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def model_id(client):
    return client.models.list().data[0].id

