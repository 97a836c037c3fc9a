// End-to-end tests of `tessera serve` with the official OpenAI SDK for Node.js. Started by
// tests/server/node_e2e_test.cpp against a server on 127.0.0.1 (demo model, random weights, test
// script hook enabled): TESSERA_URL, TESSERA_API_KEY, TESSERA_NPM_DIR. Scripted outputs
// (`tessera_script`, forced token by token through the real engine) make reasoning and tool calls
// deterministic; everything else runs greedy on the random model. Exits non-zero on any failure.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const require = createRequire(process.env.TESSERA_NPM_DIR + '/');
const mod = require('openai');
const OpenAI = mod.OpenAI ?? mod.default ?? mod;
const client = new OpenAI({ baseURL: process.env.TESSERA_URL, apiKey: process.env.TESSERA_API_KEY, maxRetries: 0 });
const EOS = '<｜end▁of▁sentence｜>';
let model;

const tests = [];
const test = (name, fn) => tests.push([name, fn]);

// Collects a chat stream into the shape of a non-streamed response (per choice).
async function collectChat(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const choices = new Map();
  let usage = null, id = null, roleFirst = true, sawDone = false;
  for await (const chunk of stream) {
    id ??= chunk.id;
    assert.equal(chunk.id, id, 'same id on every chunk');
    if (chunk.usage) { usage = chunk.usage; assert.deepEqual(chunk.choices, []); continue; }
    for (const c of chunk.choices) {
      if (!choices.has(c.index)) {
        assert.equal(c.delta.role, 'assistant', 'the first delta of a choice carries the role');
        choices.set(c.index, { content: '', reasoning: '', tools: new Map(), finish: null, logprobs: [] });
      }
      const acc = choices.get(c.index);
      assert.equal(acc.finish, null, 'nothing after finish_reason');
      if (c.delta.content) acc.content += c.delta.content;
      if (c.delta.reasoning_content) { acc.reasoning += c.delta.reasoning_content; assert.equal(c.delta.reasoning, c.delta.reasoning_content); }
      for (const tc of c.delta.tool_calls ?? []) {
        if (!acc.tools.has(tc.index)) acc.tools.set(tc.index, { id: '', name: '', arguments: '' });
        const t = acc.tools.get(tc.index);
        if (tc.id) t.id += tc.id;
        if (tc.function?.name) t.name += tc.function.name;
        if (tc.function?.arguments) t.arguments += tc.function.arguments;
      }
      if (c.logprobs?.content) acc.logprobs.push(...c.logprobs.content);
      if (c.finish_reason) acc.finish = c.finish_reason;
    }
  }
  sawDone = true;
  return { choices: [...choices.entries()].sort((a, b) => a[0] - b[0]).map(([, v]) => v), usage, sawDone };
}

function flatten(resp) {
  return resp.choices.map((c) => ({
    content: c.message.content ?? '',
    reasoning: c.message.reasoning_content ?? '',
    // Ids are per request (DeepSeek calls get request-unique ids), so they are compared by presence.
    tools: (c.message.tool_calls ?? []).map((t) => ({ id: !!t.id, name: t.function.name, arguments: t.function.arguments })),
    finish: c.finish_reason,
  }));
}
function flattenStream(s) {
  return s.choices.map((c) => ({ content: c.content, reasoning: c.reasoning,
    tools: [...c.tools.values()].map((t) => ({ id: !!t.id, name: t.name, arguments: t.arguments })), finish: c.finish }));
}
async function chatBoth(params) {
  const full = await client.chat.completions.create(params);
  const streamed = await collectChat(params);
  assert.deepEqual(flattenStream(streamed), flatten(full), 'streamed and non-streamed results are identical');
  // The second of two identical requests may find the first one's prompt pages in the prefix cache.
  const uncached = (u) => ({ ...u, prompt_tokens_details: undefined });
  assert.deepEqual(uncached(streamed.usage), uncached(full.usage), 'usage is identical (cached tokens aside)');
  return full;
}

test('models list labels the demo model', async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  model = list.data[0].id;
  assert.match(model, /random-weights/);
  assert.match(list.data[0].owned_by, /random weights/);
});

test('chat greedy: streamed equals non-streamed; usage fields', async () => {
  const r = await chatBoth({ model, messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 12, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 0);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
  assert.equal(r.choices[0].finish_reason, 'length');
});

test('n > 1 with a seed: two choices, reproducible', async () => {
  const p = { model, messages: [{ role: 'user', content: 'Pick' }], max_tokens: 6, n: 2, seed: 7, temperature: 1 };
  const a = await chatBoth(p);
  assert.equal(a.choices.length, 2);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1]);
  const b = await client.chat.completions.create(p);
  assert.deepEqual(flatten(b), flatten(a));
});

test('logprobs with top_logprobs', async () => {
  const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3 });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 5);
  for (const e of lp) {
    assert.equal(typeof e.token, 'string');
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(Array.isArray(e.bytes));
  }
  // Greedy: the chosen token is the most likely one.
  assert.equal(lp[0].logprob, lp[0].top_logprobs[0].logprob);
  const s = await collectChat({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3 });
  assert.deepEqual(s.choices[0].logprobs.map((e) => e.token), lp.map((e) => e.token));
});

test('stop strings end the answer before the stop string', async () => {
  const r = await chatBoth({ model, messages: [{ role: 'user', content: 'count' }], max_tokens: 30, stop: ['STOP'], tessera_script: 'one two STOP three' + EOS });
  assert.equal(r.choices[0].message.content, 'one two ');
  assert.equal(r.choices[0].finish_reason, 'stop');
});

const tools = [{ type: 'function', function: { name: 'get_weather', description: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
               { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } }];
const toolScript = 'Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris", "days": [1, 2]}\n```<｜tool▁call▁end｜>\n' +
                   '<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>' + EOS;

test('tool calls: ids, names, JSON arguments, finish_reason tool_calls, streamed incrementally', async () => {
  const p = { model, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, max_tokens: 80, tessera_script: toolScript };
  const r = await chatBoth(p);
  const m = r.choices[0].message;
  assert.equal(m.content, 'Checking.');
  assert.equal(m.tool_calls.length, 2);
  assert.equal(m.tool_calls[0].type, 'function');
  assert.equal(m.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: 'Paris', days: [1, 2] });
  assert.equal(m.tool_calls[1].function.name, 'get_time');
  assert.deepEqual(JSON.parse(m.tool_calls[1].function.arguments), {});
  assert.ok(m.tool_calls[0].id && m.tool_calls[0].id !== m.tool_calls[1].id);
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  // Arguments arrive in several deltas, not one blob at the end.
  const stream = await client.chat.completions.create({ ...p, stream: true });
  let argDeltas = 0;
  for await (const ch of stream) for (const c of ch.choices) for (const t of c.delta.tool_calls ?? []) if (t.function?.arguments) argDeltas++;
  assert.ok(argDeltas >= 3, `argument deltas: ${argDeltas}`);
  // The SDK's own stream helper accumulates the same calls.
  const runner = client.beta.chat.completions.stream(p);
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.tool_calls[0].function.arguments, m.tool_calls[0].function.arguments);
});

test('tool calls cut by max_tokens: complete calls recovered', async () => {
  const full = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'w' }], tools, max_tokens: 200, tessera_script: toolScript });
  const total = full.usage.completion_tokens;
  const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'w' }], tools, max_tokens: total - 6, tessera_script: toolScript });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.choices[0].message.tool_calls.length, 1);
  assert.equal(r.choices[0].message.tool_calls[0].function.name, 'get_weather');
});

test('tool_choice none leaves markers unparsed', async () => {
  const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'w' }], tools, tool_choice: 'none', max_tokens: 80, tessera_script: toolScript });
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.equal(r.choices[0].finish_reason, 'stop');
});

test('reasoning: reasoning_content and reasoning, content separate', async () => {
  const r = await chatBoth({ model, messages: [{ role: 'user', content: '2+2?' }], max_tokens: 40, chat_template_kwargs: { thinking: true },
                             tessera_script: 'Two plus two is four.</think>It is 4.' + EOS });
  const m = r.choices[0].message;
  assert.equal(m.reasoning_content, 'Two plus two is four.');
  assert.equal(m.reasoning, m.reasoning_content);
  assert.equal(m.content, 'It is 4.');
  assert.ok(r.usage.completion_tokens_details.reasoning_tokens > 0);
  assert.ok(r.usage.completion_tokens_details.reasoning_tokens < r.usage.completion_tokens);
});

test('multi-byte UTF-8 split across tokens never shows U+FFFD; include_reasoning false hides reasoning', async () => {
  const text = '你好，世界 🙂🚀 café Ωμέγα';
  const r = await chatBoth({ model, messages: [{ role: 'user', content: 'u' }], max_tokens: 60, chat_template_kwargs: { thinking: true },
                             tessera_script: '想一想 🤔</think>' + text + EOS });
  assert.equal(r.choices[0].message.reasoning_content, '想一想 🤔');
  assert.equal(r.choices[0].message.content, text);
  const stream = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'u' }], max_tokens: 60, stream: true,
                                                        tessera_script: text + EOS });
  for await (const ch of stream) for (const c of ch.choices) assert.ok(!(c.delta.content ?? '').includes('\uFFFD'));
  const hidden = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'u' }], max_tokens: 60, include_reasoning: false,
                                                        chat_template_kwargs: { thinking: true }, tessera_script: 'secret</think>shown' + EOS });
  assert.equal(hidden.choices[0].message.reasoning_content, null);
  assert.equal(hidden.choices[0].message.content, 'shown');
});

test('reasoning without budget can eat max_tokens; with a budget the answer keeps room', async () => {
  const base = { model, messages: [{ role: 'user', content: 'think hard' }], max_tokens: 40, temperature: 0, chat_template_kwargs: { thinking: true } };
  const eaten = await chatBoth(base);
  assert.equal(eaten.choices[0].finish_reason, 'length');
  assert.equal(eaten.usage.completion_tokens_details.reasoning_tokens, 40);
  assert.ok(eaten.choices[0].message.reasoning_content.length > 0);
  assert.equal(eaten.choices[0].message.content, null);
  const budgeted = await chatBoth({ ...base, thinking_token_budget: 10 });
  const u = budgeted.usage;
  assert.ok(u.completion_tokens_details.reasoning_tokens <= 11, `reasoning tokens ${u.completion_tokens_details.reasoning_tokens}`);
  assert.ok(budgeted.choices[0].message.content.length > 0, 'the answer got tokens');
  const effort = await client.chat.completions.create({ ...base, reasoning_effort: 'minimal' });
  assert.ok(effort.usage.completion_tokens_details.reasoning_tokens <= 31, 'reasoning_effort maps to a budget within 3/4 of max_tokens');
  assert.ok(effort.choices[0].message.content.length > 0);
});

test('thinking switch: thinking / enable_thinking reach the template; off means no reasoning', async () => {
  const msgs = [{ role: 'user', content: 'hi' }];
  // Seeded, all three: with random demo weights an unseeded draw can end the reasoning early (a
  // CI run drew the end-of-thinking marker among the first 4 tokens: 3 reasoning tokens), or spend
  // the one token left for the answer on text that decodes to nothing yet (a partial UTF-8
  // sequence); both made this test flaky.
  const on = await client.chat.completions.create({ model, messages: msgs, max_tokens: 4, chat_template_kwargs: { thinking: true }, seed: 5 });
  const on2 = await client.chat.completions.create({ model, messages: msgs, max_tokens: 4, chat_template_kwargs: { enable_thinking: true }, seed: 5 });
  const off = await client.chat.completions.create({ model, messages: msgs, max_tokens: 4, chat_template_kwargs: { thinking: false }, seed: 5 });
  assert.equal(on.usage.prompt_tokens, on2.usage.prompt_tokens);
  assert.notEqual(on.usage.prompt_tokens, off.usage.prompt_tokens);
  assert.equal(on.usage.completion_tokens_details.reasoning_tokens, 4);
  assert.equal(off.usage.completion_tokens_details.reasoning_tokens, 0);
  assert.equal(off.choices[0].message.reasoning_content, null);
  assert.ok(off.choices[0].message.content.length > 0);
  // reasoning_effort alone turns thinking on (with its budget, capped at 3/4 of max_tokens).
  const effort = await client.chat.completions.create({ model, messages: msgs, max_tokens: 8, reasoning_effort: 'low', seed: 5 });
  assert.equal(effort.usage.prompt_tokens, on.usage.prompt_tokens);
  assert.ok(effort.usage.completion_tokens_details.reasoning_tokens > 0);
  assert.ok(effort.usage.completion_tokens_details.reasoning_tokens <= 7);
  assert.ok(effort.choices[0].message.content.length > 0);
});

test('16 concurrent pairs: streamed equals non-streamed (seeded sampling, reasoning and tool calls)', async () => {
  const jobs = [];
  for (let i = 0; i < 16; i++) {
    const p = i % 4 === 3
      ? { model, messages: [{ role: 'user', content: `w${i}` }], tools, max_tokens: 80, tessera_script: toolScript }
      : { model, messages: [{ role: 'user', content: `q${i}` }], max_tokens: 10 + i, seed: i, temperature: 0.9,
          chat_template_kwargs: { thinking: i % 2 === 0 }, thinking_token_budget: 4 };
    jobs.push(chatBoth(p));
  }
  await Promise.all(jobs);
});

test('completions: text and token-id prompts, streaming equals non-streaming, logprobs, n', async () => {
  const p = { model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, logprobs: 2 };
  const r = await client.completions.create(p);
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].logprobs.tokens.length, 8);
  assert.equal(r.choices[0].logprobs.tokens.join(''), r.choices[0].text);
  const stream = await client.completions.create({ ...p, stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null, finish = null;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) { text += c.text; if (c.finish_reason) finish = c.finish_reason; }
  }
  assert.equal(text, r.choices[0].text);
  assert.equal(finish, r.choices[0].finish_reason);
  assert.deepEqual(usage, r.usage);
  const ids = await client.completions.create({ model, prompt: [0, 100, 200, 300], max_tokens: 3, n: 2, temperature: 0 });
  assert.equal(ids.choices.length, 2);
  assert.equal(ids.usage.prompt_tokens, 4);
  assert.equal(ids.choices[0].text, ids.choices[1].text, 'greedy choices agree');
});

test('cached prompt tokens are reported', async () => {
  const long = 'The quick brown fox jumps over the lazy dog. '.repeat(30);
  await client.chat.completions.create({ model, messages: [{ role: 'user', content: long }], max_tokens: 1 });
  const again = await client.chat.completions.create({ model, messages: [{ role: 'user', content: long }], max_tokens: 1 });
  assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(again.usage));
});

test('a non-streamed request longer than a second is an ordinary response', async () => {
  const t0 = Date.now();
  const r = await client.completions.create({ model, prompt: 'long', max_tokens: 1500, ignore_eos: true, temperature: 0 });
  assert.equal(r.usage.completion_tokens, 1500);
  assert.equal(r.choices[0].finish_reason, 'length');
  console.log(`     (took ${Date.now() - t0} ms)`);
});

// The Responses API (POST /v1/responses): the SDK's responses.create, streamed and not, its
// responses.stream helper, and a function_call / function_call_output round trip.
async function collectResponse(params) {
  const stream = await client.responses.create({ ...params, stream: true });
  let text = '', reasoning = '', seq = -1, final = null;
  const types = [], args = new Map(), done = [];
  for await (const ev of stream) {
    assert.equal(ev.sequence_number, seq + 1, 'sequence numbers count up');
    seq = ev.sequence_number;
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.reasoning_text.delta') reasoning += ev.delta;
    if (ev.type === 'response.function_call_arguments.delta') args.set(ev.output_index, (args.get(ev.output_index) ?? '') + ev.delta);
    if (ev.type === 'response.output_item.done') done.push(ev.item);
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
  }
  assert.deepEqual(types.slice(0, 2), ['response.created', 'response.in_progress']);
  assert.ok(final, 'the stream ends with response.completed or response.incomplete');
  assert.equal(types.at(-1), `response.${final.status}`);
  assert.deepEqual(final.output, done, 'the final response holds the items as they were done');
  return { text, reasoning, args, final, types };
}

test('responses: output_text and usage; streamed deltas add up to the same text', async () => {
  const p = { model, input: 'Hello there', instructions: 'Be brief.', max_output_tokens: 12, temperature: 0, reasoning: { effort: 'none' } };
  const r = await client.responses.create(p);
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.ok(['completed', 'incomplete'].includes(r.status), r.status);
  assert.equal(typeof r.output_text, 'string');
  assert.equal(r.instructions, 'Be brief.');
  assert.equal(r.store, false);
  assert.ok(r.usage.output_tokens > 0 && r.usage.output_tokens <= 12, JSON.stringify(r.usage));
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(r.usage.output_tokens_details.reasoning_tokens, 0);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
  const s = await collectResponse(p);
  assert.equal(s.text, r.output_text);
  assert.equal(s.final.status, r.status);
  assert.deepEqual(s.final.usage, r.usage);
});

test('responses: scripted text, max_output_tokens gives incomplete, the stream helper', async () => {
  const p = { model, input: [{ role: 'user', content: [{ type: 'input_text', text: 'count' }] }], max_output_tokens: 40,
              reasoning: { effort: 'none' }, tessera_script: 'one two three' + EOS };
  const r = await client.responses.create(p);
  assert.equal(r.status, 'completed');
  assert.equal(r.incomplete_details, null);
  assert.equal(r.output_text, 'one two three');
  assert.equal(r.output[0].type, 'message');
  assert.equal(r.output[0].status, 'completed');
  const cut = await client.responses.create({ ...p, max_output_tokens: 2 });
  assert.equal(cut.status, 'incomplete');
  assert.deepEqual(cut.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(cut.usage.output_tokens, 2);
  assert.ok('one two three'.startsWith(cut.output_text) && cut.output_text.length > 0, cut.output_text);
  const sc = await collectResponse({ ...p, max_output_tokens: 2 });
  assert.equal(sc.final.status, 'incomplete');
  assert.equal(sc.text, cut.output_text);
  // The SDK's own stream helper accumulates the same answer.
  const runner = client.responses.stream(p);
  let helperText = '';
  runner.on('response.output_text.delta', (e) => { helperText += e.delta; });
  const final = await runner.finalResponse();
  // (finalResponse of SDK 4.x adds no output_text without a parse format: the item's text.)
  assert.equal(final.output[0].content[0].text, 'one two three');
  assert.equal(final.status, 'completed');
  assert.equal(helperText, 'one two three');
});

test('responses: reasoning item with reasoning.effort, streamed as reasoning_text deltas', async () => {
  const p = { model, input: '2+2?', max_output_tokens: 40, reasoning: { effort: 'high' }, tessera_script: 'Two plus two is four.</think>It is 4.' + EOS };
  const r = await client.responses.create(p);
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
  assert.match(r.output[0].id, /^rs_/);
  assert.deepEqual(r.output[0].content, [{ type: 'reasoning_text', text: 'Two plus two is four.' }]);
  assert.equal(r.output_text, 'It is 4.');
  assert.ok(r.usage.output_tokens_details.reasoning_tokens > 0);
  assert.ok(r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens);
  assert.deepEqual(r.reasoning, { effort: 'high', summary: null });
  const s = await collectResponse(p);
  assert.equal(s.reasoning, 'Two plus two is four.');
  assert.equal(s.text, 'It is 4.');
  assert.deepEqual(s.final.usage, r.usage);
});

const responseTools = [
  { type: 'function', name: 'get_weather', description: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false },
  { type: 'function', name: 'get_time', parameters: { type: 'object', properties: {} }, strict: false }];

test('responses: function calls, streamed arguments, and the function_call_output round trip', async () => {
  const p = { model, input: 'Weather in Paris?', tools: responseTools, max_output_tokens: 80, tessera_script: toolScript };
  const r = await client.responses.create(p);
  assert.equal(r.status, 'completed');
  assert.equal(r.output_text, 'Checking.');
  const calls = r.output.filter((o) => o.type === 'function_call');
  assert.equal(calls.length, 2);
  assert.match(calls[0].id, /^fc_/);
  assert.match(calls[0].call_id, /^call_/);
  assert.notEqual(calls[0].call_id, calls[1].call_id);
  assert.equal(calls[0].name, 'get_weather');
  assert.deepEqual(JSON.parse(calls[0].arguments), { city: 'Paris', days: [1, 2] });
  assert.equal(calls[1].name, 'get_time');
  assert.deepEqual(JSON.parse(calls[1].arguments), {});
  assert.equal(calls[0].status, 'completed');
  assert.deepEqual(r.tools.map((t) => t.name), ['get_weather', 'get_time']);
  const s = await collectResponse(p);
  const streamedCalls = s.final.output.filter((o) => o.type === 'function_call');
  assert.deepEqual(streamedCalls.map((c) => [c.name, c.arguments]), calls.map((c) => [c.name, c.arguments]));
  assert.deepEqual([...s.args.values()], calls.map((c) => c.arguments), 'the argument deltas add up to the arguments');
  // The next turn: the model's items as they came, then the results.
  const next = await client.responses.create({
    model, tools: responseTools, max_output_tokens: 30, tessera_script: 'It is 18C in Paris.' + EOS,
    input: [{ role: 'user', content: 'Weather in Paris?' }, ...r.output,
            { type: 'function_call_output', call_id: calls[0].call_id, output: '18C' },
            { type: 'function_call_output', call_id: calls[1].call_id, output: 'noon' }] });
  assert.equal(next.output_text, 'It is 18C in Paris.');
  assert.ok(next.usage.input_tokens > r.usage.input_tokens, 'the call and its result reach the prompt');
});

test('responses: errors map to the SDK exceptions and name the field', async () => {
  await assert.rejects(client.responses.create({ model, input: 'x', previous_response_id: 'resp_1' }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id');
  await assert.rejects(client.responses.create({ model, input: 'x', tools: [{ type: 'web_search_preview' }] }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools[0].type');
  await assert.rejects(client.responses.create({ model, input: 'x', max_output_tokens: 0 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_output_tokens');
  await assert.rejects(client.responses.create({ model: 'nope', input: 'x' }), (e) => e instanceof OpenAI.NotFoundError);
});

// Structured output through the SDK's own helpers: zodResponseFormat (json_schema, strict) and
// zodFunction (a strict tool) with .parse(), which parses and validates with zod. Scripted: the
// exact object; unscripted: whatever the random model writes must still pass zod, which only
// the grammar makes possible.
const { zodResponseFormat, zodFunction } = require('openai/helpers/zod');
const { z } = require('zod');
const Weather = z.object({ unit: z.enum(['celsius', 'fahrenheit']), ok: z.boolean(), n: z.number().int() });

test('structured output: chat.completions.parse with zodResponseFormat, scripted and free', async () => {
  const p = { model, messages: [{ role: 'user', content: 'Weather as JSON' }], max_tokens: 120,
              response_format: zodResponseFormat(Weather, 'weather') };
  const r = await client.beta.chat.completions.parse({ ...p, temperature: 0, tessera_script: '{"unit": "celsius", "ok": true, "n": 21}' + EOS });
  assert.deepEqual(r.choices[0].message.parsed, { unit: 'celsius', ok: true, n: 21 });
  for (const seed of [1, 2]) {
    const free = await client.beta.chat.completions.parse({ ...p, temperature: 1, seed });
    assert.equal(free.choices[0].finish_reason, 'stop');
    Weather.parse(free.choices[0].message.parsed);
  }
  // The stream helper accumulates the same JSON.
  const stream = client.beta.chat.completions.stream({ ...p, temperature: 1, seed: 1 });
  const final = await stream.finalChatCompletion();
  Weather.parse(final.choices[0].message.parsed);
});

test('structured output: a strict zodFunction with tool_choice required is called with valid arguments', async () => {
  const tools = [zodFunction({ name: 'report', parameters: Weather })];
  for (const tool_choice of ['required', { type: 'function', function: { name: 'report' } }]) {
    const r = await client.beta.chat.completions.parse({ model, messages: [{ role: 'user', content: 'Report' }], max_tokens: 160,
                                                         tools, tool_choice, temperature: 1, seed: 4 });
    const calls = r.choices[0].message.tool_calls;
    assert.ok(calls.length >= 1, JSON.stringify(r));
    for (const c of calls) {
      assert.equal(c.function.name, 'report');
      Weather.parse(c.function.parsed_arguments);
    }
  }
});

test('errors map to the SDK exceptions', async () => {
  await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 0 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
  await assert.rejects(client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }),
                       (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 1e9 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
  const bad = new OpenAI({ baseURL: process.env.TESSERA_URL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
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
