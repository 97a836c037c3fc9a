// End-to-end tests of `tessera serve`'s /v1/messages with the official Anthropic SDK for Node.js.
// Started by tests/server/node_e2e_test.cpp against a server on 127.0.0.1 (demo model, random
// weights, test script hook enabled): TESSERA_URL (the server's root: the SDK adds /v1/messages),
// TESSERA_API_KEY (sent by the SDK as x-api-key), TESSERA_NPM_DIR. Scripted outputs (`tessera_script`)
// make reasoning and tool calls deterministic. Exits non-zero on any failure.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const require = createRequire(process.env.TESSERA_NPM_DIR + '/');
const mod = require('@anthropic-ai/sdk');
const Anthropic = mod.Anthropic ?? mod.default ?? mod;
const url = process.env.TESSERA_URL;
const client = new Anthropic({ baseURL: url, apiKey: process.env.TESSERA_API_KEY, maxRetries: 0 });
const EOS = '<｜end▁of▁sentence｜>';
let model;

const tests = [];
const test = (name, fn) => tests.push([name, fn]);

const tools = [{ name: 'get_weather', description: 'weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } },
               { name: 'get_time', input_schema: { type: 'object', properties: {} } }];
const toolScript = 'Need the weather.</think>Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris", "days": [1, 2]}\n```<｜tool▁call▁end｜>\n' +
                   '<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>' + EOS;
const toolParams = () => ({ model, max_tokens: 200, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools,
                            thinking: { type: 'enabled', budget_tokens: 100 }, tessera_script: toolScript });

// Tool ids are per request: compared by presence.
const withoutIds = (content) => content.map((b) => (b.type === 'tool_use' ? { ...b, id: !!b.id } : b));

test('messages.create: thinking, text and tool_use blocks', async () => {
  const m = await client.messages.create(toolParams());
  assert.match(m.id, /^msg_/);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.model, model);
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text', 'tool_use', 'tool_use']);
  assert.equal(m.content[0].thinking, 'Need the weather.');
  assert.equal(m.content[1].text, 'Checking.');
  assert.equal(m.content[2].name, 'get_weather');
  assert.deepEqual(m.content[2].input, { city: 'Paris', days: [1, 2] });
  assert.equal(m.content[3].name, 'get_time');
  assert.deepEqual(m.content[3].input, {});
  assert.notEqual(m.content[2].id, m.content[3].id);
  assert.equal(m.stop_reason, 'tool_use');
  assert.equal(m.stop_sequence, null);
  assert.ok(m.usage.input_tokens > 5 && m.usage.output_tokens > 10, JSON.stringify(m.usage));
});

test('stream: raw events and the SDK stream helper give the same message', async () => {
  const full = await client.messages.create(toolParams());
  const raw = await client.messages.create({ ...toolParams(), stream: true });
  const types = [];
  let jsonDeltas = 0;
  for await (const ev of raw) {
    types.push(ev.type);
    if (ev.type === 'content_block_delta' && ev.delta.type === 'input_json_delta') jsonDeltas++;
  }
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-2), 'message_delta');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(types.filter((t) => t === 'content_block_start').length, 4);
  assert.ok(jsonDeltas >= 3, `input_json_delta events: ${jsonDeltas}`);
  const stream = client.messages.stream(toolParams());
  let thinking = '';
  stream.on('thinking', (delta) => { thinking += delta; });
  const final = await stream.finalMessage();
  assert.equal(thinking, 'Need the weather.');
  assert.deepEqual(withoutIds(final.content), withoutIds(full.content));
  assert.equal(final.stop_reason, 'tool_use');
  assert.deepEqual(final.usage.output_tokens, full.usage.output_tokens);
});

test('a tool_result turn: the model answers from it; countTokens', async () => {
  const first = await client.messages.create(toolParams());
  const calls = first.content.filter((b) => b.type === 'tool_use');
  const m = await client.messages.create({
    model, max_tokens: 40, tools,
    messages: [{ role: 'user', content: 'Weather in Paris?' },
               { role: 'assistant', content: first.content },
               { role: 'user', content: calls.map((c, i) => ({ type: 'tool_result', tool_use_id: c.id, content: i ? '12:00' : '18C', is_error: false })) }],
    tessera_script: 'It is 18C at noon.' + EOS,
  });
  assert.deepEqual(m.content, [{ type: 'text', text: 'It is 18C at noon.' }]);
  assert.equal(m.stop_reason, 'end_turn');
  assert.ok(m.usage.input_tokens > first.usage.input_tokens);
  const { max_tokens: _, tessera_script: __, ...countParams } = toolParams();
  const counted = await client.messages.countTokens(countParams);
  assert.deepEqual(counted, { input_tokens: first.usage.input_tokens });
});

test('stop_sequences and max_tokens stop reasons', async () => {
  const base = { model, messages: [{ role: 'user', content: 'count' }], tessera_script: 'one two STOP three' + EOS };
  const s = await client.messages.create({ ...base, max_tokens: 30, stop_sequences: ['STOP'] });
  assert.deepEqual(s.content, [{ type: 'text', text: 'one two ' }]);
  assert.equal(s.stop_reason, 'stop_sequence');
  assert.equal(s.stop_sequence, 'STOP');
  const text = await client.messages.stream({ ...base, max_tokens: 30, stop_sequences: ['STOP'] }).finalText();
  assert.equal(text, 'one two ');
  const cut = await client.messages.create({ ...base, max_tokens: 2 });
  assert.equal(cut.stop_reason, 'max_tokens');
  assert.equal(cut.usage.output_tokens, 2);
});

test('errors map to the SDK exceptions', async () => {
  await assert.rejects(client.messages.create({ model, max_tokens: 10, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] }),
                       (e) => e instanceof Anthropic.BadRequestError && e.status === 400 && e.error?.error?.type === 'invalid_request_error' &&
                              e.message.includes('messages[0].content[0].type'));
  await assert.rejects(client.messages.create({ model: 'claude-nope', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }),
                       (e) => e instanceof Anthropic.NotFoundError);
  const bad = new Anthropic({ baseURL: url, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.messages.create({ model, max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }),
                       (e) => e instanceof Anthropic.AuthenticationError && e.error?.error?.type === 'authentication_error');
});

const models = await fetch(`${url}/v1/models`, { headers: { Authorization: `Bearer ${process.env.TESSERA_API_KEY}` } });
model = (await models.json()).data[0].id;
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
