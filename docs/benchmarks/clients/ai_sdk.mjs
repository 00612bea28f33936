// What the Vercel AI SDK gets from `specdecode serve`, used as its users use it: generateText,
// streamText (with usage), generateObject (a zod schema), a tool the SDK runs (two steps) and
// required tool calls streamed, through @ai-sdk/openai-compatible and @ai-sdk/openai's default
// `openai(model)` (the Responses API), chat and completion models. Greedy.
//
//   mkdir /tmp/aisdk && cd /tmp/aisdk && npm init -y && \
//     npm install ai@6.0.333 @ai-sdk/openai-compatible@2.0.92 @ai-sdk/openai@3.0.141 zod@4.6.7
//   specdecode serve --model qwen2.5-coder-1.5b --port 8811 &
//   cp docs/benchmarks/clients/ai_sdk.mjs /tmp/aisdk && node /tmp/aisdk/ai_sdk.mjs http://127.0.0.1:8811/v1
import { generateObject, generateText, stepCountIs, streamText, tool } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { createOpenAI } from '@ai-sdk/openai';
import { z } from 'zod';

const base = process.argv[2] ?? 'http://127.0.0.1:8811/v1';
const id = (await (await fetch(`${base}/models`)).json()).data[0].id;
const compatible = createOpenAICompatible({ name: 'specdecode', baseURL: base, apiKey: 'x',
                                            supportsStructuredOutputs: true });
const openai = createOpenAI({ baseURL: base, apiKey: 'x' });
const models = { 'openai-compatible': compatible(id), 'openai.chat': openai.chat(id),
                 'openai.completion': openai.completion(id), 'openai (Responses API)': openai(id) };
const weather = tool({ description: 'Get the weather in a city.',
                       inputSchema: z.object({ city: z.string() }),
                       execute: async ({ city }) => `It is sunny in ${city}.` });
const ask = { temperature: 0, maxOutputTokens: 64 };
const question = 'What is the weather in Paris?';

async function check(name, run) {
  let result;
  try { result = JSON.stringify(await run()); } catch (e) { result = `FAILED ${e.message}`; }
  console.log(`${name}: ${result.slice(0, 300)}`);
}

console.log(`# ${base}, model ${id}`);
for (const [name, model] of Object.entries(models)) {
  await check(`${name} / text`, async () => (await generateText({ model, prompt: question, ...ask })).text);
  await check(`${name} / streamed`, async () => {
    const run = streamText({ model, prompt: question, ...ask });
    let text = '';
    for await (const delta of run.textStream) text += delta;
    return [text, (await run.usage).outputTokens];
  });
  if (name.includes('completion')) continue;
  await check(`${name} / object`, async () => (await generateObject({
    model, prompt: 'Extract the address: Hauptstrasse 12, Berlin, Germany', ...ask,
    schema: z.object({ street: z.string(), city: z.string(), country: z.string() }) })).object);
  await check(`${name} / tool, two steps`, async () => {
    const run = await generateText({ model, tools: { weather }, prompt: question, ...ask,
                                     stopWhen: stepCountIs(2) });
    return { calls: run.steps.map((s) => s.toolCalls.map((c) => [c.toolName, c.input])),
             text: run.text };
  });
  await check(`${name} / required tool, streamed`, async () => {
    const run = streamText({ model, tools: { weather }, toolChoice: 'required', prompt: question,
                             ...ask });
    const calls = [];
    for await (const part of run.fullStream) {
      if (part.type === 'tool-call') calls.push([part.toolName, part.input]);
      if (part.type === 'error') calls.push(['error', String(part.error)]);
    }
    return calls;
  });
}
