"""What agent and structured-output libraries get from `specdecode serve`, used as their users use
them: LangChain's `with_structured_output` (json_schema, function_calling, json_mode)
and `bind_tools` (whole and streamed), instructor's four OpenAI modes, the OpenAI Agents SDK
(a tool-using agent, whole and streamed, and a typed output) over chat completions and over its
default, the Responses API, LiteLLM's `completion` (text, streamed with usage, tools, a pydantic
response format, a prediction), and the `anthropic` SDK (`messages.create`, `messages.stream`, a
tool-use round trip). Greedy, one address and one weather question. The libraries live in their
own venv (they pin their own `openai`):

    python -m venv /tmp/clients
    /tmp/clients/bin/pip install openai-agents==0.24.0 instructor==1.17.0 langchain-openai==1.7.4 \
        litellm==1.110.2 anthropic==2.17.0
    specdecode serve --model qwen2.5-coder-1.5b --port 8811 &
    /tmp/clients/bin/python docs/benchmarks/clients/clients.py http://127.0.0.1:8811/v1 [LIBRARY...]

(LIBRARY: the first word of a section's name, e.g. LiteLLM or anthropic; default all.) The Vercel AI SDK, in
JavaScript, is `ai_sdk.mjs` beside this file.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

from pydantic import BaseModel

BASE = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8811/v1"
ADDRESS = "Hauptstrasse 12, Berlin, Germany"
WEATHER = "What is the weather in Paris?"
# "Use the tools to answer." alone: the 1.5B Coder calls the tool again after its result, turn
# after turn (MaxTurnsExceeded); told to answer from the result, it does
INSTRUCTIONS = ("Use the tools to answer. Once a tool has given its result, answer the user "
                "from it in one sentence.")


class Address(BaseModel):
    street: str
    city: str
    country: str


def model_id() -> str:
    from openai import OpenAI

    return OpenAI(base_url=BASE, api_key="x").models.list().data[0].id


def langchain_structured(model: str) -> dict:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=model, base_url=BASE, api_key="x", temperature=0, max_tokens=64)
    prompt = f"Extract the address as JSON with keys street, city, country: {ADDRESS}"
    return {method: _outcome(lambda: llm.with_structured_output(Address, method=method)
                             .invoke(prompt))
            for method in ("json_schema", "function_calling", "json_mode")}


def langchain_tools(model: str) -> dict:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """Get the weather in a city."""
        return "sunny"

    def llm(streaming: bool):
        return ChatOpenAI(model=model, base_url=BASE, api_key="x", temperature=0, max_tokens=64,
                          streaming=streaming).bind_tools([get_weather])

    def streamed():
        pieces = list(llm(True).stream(WEATHER))
        return sum(pieces[1:], pieces[0]).tool_calls

    return {"whole": _outcome(lambda: llm(False).invoke(WEATHER).tool_calls),
            "streamed": _outcome(streamed)}


def instructor_modes(model: str) -> dict:
    import instructor
    from openai import OpenAI

    out = {}
    for mode in (instructor.Mode.TOOLS, instructor.Mode.JSON, instructor.Mode.JSON_SCHEMA,
                 instructor.Mode.MD_JSON):
        client = instructor.from_openai(OpenAI(base_url=BASE, api_key="x"), mode=mode)
        out[mode.name] = _outcome(lambda: client.chat.completions.create(
            model=model, response_model=Address, max_tokens=64, temperature=0,
            messages=[{"role": "user", "content": ADDRESS}]))
    return out


def agents_sdk(model: str, responses: bool = False) -> dict:
    from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel,
                        Runner, function_tool, set_tracing_disabled)
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=BASE, api_key="x")
    # the SDK's default model class is OpenAIResponsesModel; chat completions are the other
    chat = (OpenAIResponsesModel if responses else OpenAIChatCompletionsModel)(
        model=model, openai_client=client)

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather in a city."""
        return f"It is sunny in {city}."

    greedy = ModelSettings(temperature=0)  # the SDK sends no temperature: OpenAI's default, 1
    agent = Agent(name="weather", instructions=INSTRUCTIONS, tools=[get_weather], model=chat,
                  model_settings=greedy)
    typed = Agent(name="extract", instructions="Extract the address.", output_type=Address,
                  model=chat, model_settings=greedy)

    async def streamed():
        run = Runner.run_streamed(agent, WEATHER, max_turns=3)
        async for _ in run.stream_events():
            pass
        return run.final_output

    def whole():
        result = Runner.run_sync(agent, WEATHER, max_turns=3)
        return [type(item).__name__ for item in result.new_items], result.final_output

    return {"tool agent": _outcome(whole),
            "tool agent, streamed": _outcome(lambda: asyncio.run(streamed())),
            "typed output": _outcome(lambda: Runner.run_sync(typed, ADDRESS,
                                                             max_turns=2).final_output)}


def agents_sdk_responses(model: str) -> dict:
    return agents_sdk(model, responses=True)


def anthropic_sdk(model: str) -> dict:
    import anthropic

    client = anthropic.Anthropic(base_url=BASE.removesuffix("/v1"), api_key="x")
    # the current client has no `temperature` argument (Anthropic's default is 1): sent as a field
    ask = dict(model=model, max_tokens=64, extra_body={"temperature": 0})
    question = [{"role": "user", "content": WEATHER}]
    weather = {"name": "get_weather", "description": "Get the weather in a city.",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                "required": ["city"]}}

    def streamed():
        with client.messages.stream(messages=question, **ask) as stream:
            text = "".join(stream.text_stream)
            return text, stream.get_final_message().stop_reason

    def round_trip():
        first = client.messages.create(messages=question, tools=[weather], system=INSTRUCTIONS,
                                       tool_choice={"type": "any"}, **ask)
        call = next(b for b in first.content if b.type == "tool_use")
        turns = [*question, {"role": "assistant", "content": first.content},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                               "content": "It is sunny in Paris."}]}]
        answer = client.messages.create(messages=turns, tools=[weather], system=INSTRUCTIONS,
                                        **ask)
        return (call.name, call.input), [b.model_dump(include={"type", "text", "name", "input"})
                                         for b in answer.content], answer.stop_reason

    return {"messages.create": _outcome(lambda: client.messages.create(
                messages=question, **ask).content[0].text),
            "messages.stream": _outcome(streamed),
            "tool-use round trip": _outcome(round_trip)}


def litellm_checks(model: str) -> dict:
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch at import
    import litellm

    ask = dict(model=f"openai/{model}", api_base=BASE, api_key="x", temperature=0, max_tokens=64)
    address = [{"role": "user", "content": f"Extract the address: {ADDRESS}"}]
    weather = [{"role": "user", "content": WEATHER}]
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]

    def streamed():
        chunks = list(litellm.completion(**ask, messages=weather, stream=True,
                                         stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return text, chunks[-1].usage.completion_tokens

    def call(**more):
        message = litellm.completion(**ask, **more).choices[0].message
        calls = [(c.function.name, c.function.arguments) for c in message.tool_calls or ()]
        return calls or message.content

    return {"text": _outcome(lambda: call(messages=weather)),
            "streamed with usage": _outcome(streamed),
            "tools": _outcome(lambda: call(messages=weather, tools=tools)),
            "response_format pydantic": _outcome(lambda: call(messages=address,
                                                              response_format=Address)),
            "prediction": _outcome(lambda: call(messages=address, prediction={
                "type": "content", "content": '{"street": "Hauptstrasse 12"}'}))}


def _outcome(run: Callable[[], object]) -> object:
    try:
        return run()
    except Exception as exc:  # a library's failure is the finding, reported as such
        return f"FAILED {type(exc).__name__}: {str(exc)[:200]}"


def main() -> None:
    model = model_id()
    print(f"# {BASE}, model {model}")
    wanted = sys.argv[2:]
    for name, check in (("LangChain with_structured_output", langchain_structured),
                        ("LangChain bind_tools", langchain_tools),
                        ("instructor", instructor_modes), ("OpenAI Agents SDK", agents_sdk),
                        ("OpenAI Agents SDK (Responses API)", agents_sdk_responses),
                        ("LiteLLM", litellm_checks), ("anthropic SDK", anthropic_sdk)):
        if wanted and name.split()[0] not in wanted:
            continue
        for case, result in check(model).items():
            print(f"{name} / {case}: {result!r}", flush=True)


if __name__ == "__main__":
    main()
