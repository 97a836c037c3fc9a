// End-to-end tests of `tessera serve` with the client libraries people build on OpenAI-compatible
// servers: LangChain (`@langchain/openai` ChatOpenAI) and the Vercel AI SDK (`ai` with
// `@ai-sdk/openai-compatible`). Started by tests/server/node_e2e_test.cpp against the demo model
// with the test script hook: TESSERA_URL (ends in /v1), TESSERA_API_KEY, TESSERA_NPM_DIR. Both
// libraries pass extra body fields through (LangChain modelKwargs, the AI SDK's providerOptions),
// which carry `tessera_script` so answers and tool calls are deterministic. Exits non-zero on any
// failure.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const require = createRequire(process.env.TESSERA_NPM_DIR + '/');
const { ChatOpenAI } = require('@langchain/openai');
const { HumanMessage, AIMessage, ToolMessage } = require('@langchain/core/messages');
const { generateText, streamText, generateObject, streamObject, tool } = require('ai');
const { createOpenAICompatible } = require('@ai-sdk/openai-compatible');
const { z } = require('zod');

const baseURL = process.env.TESSERA_URL, apiKey = process.env.TESSERA_API_KEY;
const EOS = '<｜end▁of▁sentence｜>';
const modelId = (await (await fetch(baseURL + '/models', { headers: { Authorization: `Bearer ${apiKey}` } })).json()).data[0].id;

const weatherScript = 'Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n' +
                      '{"city": "Paris", "days": [1, 2]}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>' + EOS;
const weatherParams = { type: 'object', properties: { city: { type: 'string' }, days: { type: 'array', items: { type: 'integer' } } },
                        required: ['city'] };

const tests = [];
const test = (name, fn) => tests.push([name, fn]);

const langchain = (script, extra = {}) =>
  new ChatOpenAI({ model: modelId, apiKey, configuration: { baseURL }, maxRetries: 0, maxTokens: 60, temperature: 0,
                   modelKwargs: { tessera_script: script }, ...extra });

test('LangChain: invoke and stream give the scripted text', async () => {
  const llm = langchain('Hello from tessera.' + EOS);
  const r = await llm.invoke([new HumanMessage('hi')]);
  assert.equal(r.content, 'Hello from tessera.');
  assert.ok(r.usage_metadata.input_tokens > 0 && r.usage_metadata.output_tokens > 0);
  let streamed = '';
  for await (const chunk of await llm.stream([new HumanMessage('hi')])) streamed += chunk.content;
  assert.equal(streamed, 'Hello from tessera.');
});

test('LangChain: bindTools gets a parsed tool call, and the tool result goes back', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: weatherParams } }];
  const r = await langchain(weatherScript).bindTools(tools).invoke([new HumanMessage('Weather in Paris?')]);
  assert.equal(r.tool_calls.length, 1);
  assert.equal(r.tool_calls[0].name, 'get_weather');
  assert.deepEqual(r.tool_calls[0].args, { city: 'Paris', days: [1, 2] });
  assert.ok(r.tool_calls[0].id);
  // The conversation LangChain sends back: the assistant turn with its text and its call, then
  // the tool's answer (the DeepSeek template alone would drop the call: tessera writes it in).
  const next = await langchain('It is sunny.' + EOS).bindTools(tools).invoke([
    new HumanMessage('Weather in Paris?'),
    new AIMessage({ content: r.content, tool_calls: r.tool_calls }),
    new ToolMessage({ tool_call_id: r.tool_calls[0].id, content: '{"sky": "sunny"}' }),
  ]);
  assert.equal(next.content, 'It is sunny.');
  assert.ok(next.usage_metadata.input_tokens > r.usage_metadata.input_tokens);
});

const provider = createOpenAICompatible({ name: 'tessera', baseURL, apiKey });
const aiOptions = (script) => ({ model: provider(modelId), maxOutputTokens: 60, temperature: 0, maxRetries: 0,
                                 providerOptions: { tessera: { tessera_script: script } } });

test('AI SDK: generateText and streamText give the scripted text', async () => {
  const r = await generateText({ ...aiOptions('Hello from tessera.' + EOS), prompt: 'hi' });
  assert.equal(r.text, 'Hello from tessera.');
  assert.equal(r.finishReason, 'stop');
  assert.ok(r.usage.inputTokens > 0 && r.usage.outputTokens > 0);
  const s = streamText({ ...aiOptions('Hello from tessera.' + EOS), prompt: 'hi' });
  let streamed = '';
  for await (const t of s.textStream) streamed += t;
  assert.equal(streamed, 'Hello from tessera.');
});

test('AI SDK: a tool call with typed input', async () => {
  const tools = { get_weather: tool({ description: 'Weather of a city',
                                      inputSchema: z.object({ city: z.string(), days: z.array(z.number().int()).optional() }) }) };
  const r = await generateText({ ...aiOptions(weatherScript), prompt: 'Weather in Paris?', tools });
  assert.equal(r.finishReason, 'tool-calls');
  assert.equal(r.toolCalls.length, 1);
  assert.equal(r.toolCalls[0].toolName, 'get_weather');
  assert.deepEqual(r.toolCalls[0].input, { city: 'Paris', days: [1, 2] });
  const s = streamText({ ...aiOptions(weatherScript), prompt: 'Weather in Paris?', tools });
  const calls = await s.toolCalls;
  assert.equal(calls.length, 1);
  assert.deepEqual(calls[0].input, { city: 'Paris', days: [1, 2] });
});

// Structured output. Every value bounded (enum, boolean, integer), so that an unscripted random
// model, held to the schema by the grammar, finishes within max_tokens.
const Weather = z.object({ unit: z.enum(['celsius', 'fahrenheit']), ok: z.boolean(), n: z.number().int() });
const weatherJson = '{"unit": "celsius", "ok": true, "n": 21}';

test('LangChain: withStructuredOutput (json_schema by default, and function calling)', async () => {
  const scripted = await langchain(weatherJson + EOS, { maxTokens: 120 }).withStructuredOutput(Weather, { name: 'weather' })
    .invoke([new HumanMessage('Weather?')]);
  assert.deepEqual(scripted, { unit: 'celsius', ok: true, n: 21 });
  // Unscripted: LangChain parses with zod; the grammar is what makes random weights pass.
  const free = langchain(undefined, { maxTokens: 120, temperature: 1, modelKwargs: { seed: 2 } });
  Weather.parse(await free.withStructuredOutput(Weather, { name: 'weather' }).invoke([new HumanMessage('Weather?')]));
  // method functionCalling: a named tool_choice, enforced.
  Weather.parse(await free.withStructuredOutput(Weather, { name: 'weather', method: 'functionCalling' })
    .invoke([new HumanMessage('Weather?')]));
});

test('AI SDK: generateObject and streamObject (json_object, and json_schema with supportsStructuredOutputs)', async () => {
  // The default provider sends json_object (the schema goes into the prompt): scripted.
  const r = await generateObject({ ...aiOptions(weatherJson + EOS), maxOutputTokens: 120, prompt: 'Weather?', schema: Weather });
  assert.deepEqual(r.object, { unit: 'celsius', ok: true, n: 21 });
  // With structured outputs the schema itself is sent and enforced: unscripted.
  const strict = createOpenAICompatible({ name: 'tessera', baseURL, apiKey, supportsStructuredOutputs: true });
  const free = { model: strict(modelId), maxOutputTokens: 120, temperature: 1, seed: 3, maxRetries: 0, prompt: 'Weather?', schema: Weather };
  Weather.parse((await generateObject(free)).object);
  const s = streamObject(free);
  let partials = 0;
  for await (const _ of s.partialObjectStream) partials++;  // the object settles once the stream is read
  assert.ok(partials > 1);
  Weather.parse(await s.object);
});

let failed = 0;
for (const [name, fn] of tests) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}\n${e.stack ?? e}`);
  }
}
console.log(`${tests.length - failed}/${tests.length} passed`);
process.exit(failed ? 1 : 0);
