"""Structured outputs through a client, on the 1.5B: `specdecode serve --model qwen2.5-coder-1.5b`
started as a user starts it, the official `openai` client against it.

1. `chat.completions.parse` with a pydantic model for each of the 20 extraction prompts of
   extraction.py (the models built from their schemas), whole and streamed: parsed objects, valid
   against the schema the client sent (jsonschema), and token for token what plain constrained
   greedy decoding (`ar`, in this process, on the same schema and prompt) writes.
2. `tool_choice: "required"` on 20 tool prompts: a valid call each (jsonschema on the arguments).
3. A tool round trip (call, tool result, answer), whole and streamed.

    .venv/bin/python docs/benchmarks/grammar/server_openai.py > docs/benchmarks/grammar/server_openai.txt
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

import httpx
import jsonschema
import openai
import pydantic
from openai.lib._pydantic import to_strict_json_schema

sys.path.insert(0, str(Path(__file__).parent))
from extraction import CASES  # noqa: E402

from specdecode.pipeline import SpecDecoder  # noqa: E402

MODEL, PORT = "qwen2.5-coder-1.5b", 8765
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {
    "type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"],
    "additionalProperties": False}
SEARCH = {"type": "object", "properties": {"query": {"type": "string"}, "max_results": {
    "type": "integer"}}, "required": ["query"], "additionalProperties": False}
EVENT = {"type": "object", "properties": {"title": {"type": "string"}, "date": {"type": "string"},
                                          "attendees": {"type": "array", "items": {
                                              "type": "string"}}},
         "required": ["title", "date"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": n, "description": d, "parameters": p}}
         for n, d, p in (("get_weather", "The current weather in a city", WEATHER),
                         ("search_web", "Search the web", SEARCH),
                         ("create_event", "Put an event in the calendar", EVENT))]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
TOOL_PROMPTS = [
    "What is the weather in Paris?", "Is it raining in Tokyo? Answer in fahrenheit.",
    "Find recent news about the Mars rover.", "How warm is it in Cairo today?",
    "Look up the population of Iceland, three results at most.",
    "Schedule a team meeting on 2026-12-10 with Ana and Bo.", "Do I need an umbrella in London?",
    "Search for the best pizza in Naples.", "Put 'Dentist' in my calendar for 2027-01-04.",
    "What's the temperature in Reykjavik in celsius?", "Who won the 2022 World Cup?",
    "Plan a launch party on 2026-12-20 with the whole sales team.", "Weather in Sydney, please.",
    "Find a recipe for vegan lasagna.", "Book 'Quarterly review' on 2027-03-31.",
    "Is it snowing in Oslo?", "Search the web for Python 3.13 release notes, five results.",
    "How hot is it in Phoenix in fahrenheit?", "Create an event 'Hackathon' on 2027-02-14.",
    "Look up the height of Mount Everest."]


def model_of(schema: dict, name: str) -> Any:
    """A pydantic model (or type) of one of extraction.py's schemas."""
    kind = schema.get("type")
    if "enum" in schema:
        return Literal[tuple(schema["enum"])]
    if kind == "object":
        fields = {k: (model_of(v, f"{name}_{k}"), ...) for k, v in schema["properties"].items()}
        return pydantic.create_model(name, **fields)
    if kind == "array":
        return list[model_of(schema["items"], name + "_item")]
    return {"string": str, "integer": int, "number": float, "boolean": bool}[kind]


def prompt_of(text: str) -> str:
    return f"Extract the information as JSON.\n\n{text}"


def main() -> None:
    server = subprocess.Popen([sys.executable, "-m", "specdecode.app.cli", "serve", "--model",
                               MODEL, "--port", str(PORT)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                if httpx.get(f"http://127.0.0.1:{PORT}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{PORT}/v1", api_key="x",
                               max_retries=0, timeout=600)
        run(client)
    finally:
        server.terminate()
        server.wait(60)


def run(client: openai.OpenAI) -> None:
    plain = SpecDecoder.load(MODEL, "ar")
    parsed = valid = same = streamed_same = 0
    t0 = time.perf_counter()
    for i, (schema, text) in enumerate(CASES):
        cls = model_of(schema, f"Case{i}")
        sent = to_strict_json_schema(cls)
        messages = [{"role": "user", "content": prompt_of(text)}]
        resp = client.chat.completions.parse(model=MODEL, messages=messages, response_format=cls,
                                             temperature=0, max_tokens=128)
        message = resp.choices[0].message
        parsed += isinstance(message.parsed, cls)
        try:
            jsonschema.validate(json.loads(message.content), sent)
            valid += 1
        except (ValueError, jsonschema.ValidationError):
            pass
        ref = plain.generate(prompt_of(text), max_new_tokens=128,
                             grammar=plain.grammars.json_schema(sent))
        same += message.content == ref.text
        with client.chat.completions.stream(model=MODEL, messages=messages, response_format=cls,
                                            temperature=0, max_tokens=128) as stream:
            final = stream.get_final_completion()
        streamed_same += final.choices[0].message.content == message.content
        print(f"  parse {i:2d}: {resp.choices[0].finish_reason:6s} {message.content}")
    print(f"parse: {parsed}/20 parsed, {valid}/20 valid (jsonschema), {same}/20 equal to plain "
          f"constrained greedy, streamed {streamed_same}/20 equal ({time.perf_counter() - t0:.0f} s)")
    calls_valid = 0
    for prompt in TOOL_PROMPTS:
        resp = client.chat.completions.create(
            model=MODEL, temperature=0, max_tokens=128, tools=TOOLS, tool_choice="required",
            parallel_tool_calls=False, messages=[{"role": "user", "content": prompt}])
        calls = resp.choices[0].message.tool_calls or []
        ok = resp.choices[0].finish_reason == "tool_calls" and len(calls) == 1
        for call in calls:
            try:
                jsonschema.validate(json.loads(call.function.arguments),
                                    SCHEMAS[call.function.name])
            except (KeyError, ValueError, jsonschema.ValidationError):
                ok = False
        calls_valid += ok
        print(f"  tool: {prompt!r} -> " + "; ".join(
            f"{c.function.name}({c.function.arguments})" for c in calls))
    print(f"tool_choice required: {calls_valid}/20 valid calls")
    for stream in (False, True):
        first = client.chat.completions.create(
            model=MODEL, temperature=0, max_tokens=128, tools=TOOLS, tool_choice="required",
            parallel_tool_calls=False, messages=[{"role": "user", "content": TOOL_PROMPTS[0]}])
        call = first.choices[0].message.tool_calls[0]
        messages = [{"role": "user", "content": TOOL_PROMPTS[0]},
                    {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                    {"role": "tool", "tool_call_id": call.id,
                     "content": json.dumps({"temperature": 18, "condition": "sunny"})}]
        resp = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=64,
                                              tools=TOOLS, messages=messages, stream=stream)
        text = ("".join(c.choices[0].delta.content or "" for c in resp if c.choices) if stream
                else resp.choices[0].message.content)
        print(f"round trip ({'streamed' if stream else 'whole'}): {call.function.name}"
              f"({call.function.arguments}) -> tool result -> {text!r}")


if __name__ == "__main__":
    main()
