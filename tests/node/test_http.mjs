// The npm clients people use (openai, ollama) against exld's HTTP front:
// the greedy text through each must be `exld run --completion-only`'s on
// the same prompt, byte for byte (for chat: the prompt the model's
// template makes of the conversation, from /apply-template).
//
//   node test_http.mjs BASE_URL EXLD MODEL_FILE
//
// Prints "N passed, N failed" and exits 1 on a failure.
import { execFileSync } from 'node:child_process';
import OpenAI from 'openai';
import { Ollama } from 'ollama';

const [base, exld, modelFile] = process.argv.slice(2);
const model = 'stories260K';
const N = 24;
let passed = 0, failed = 0;

function check(ok, what, detail) {
	if (ok) {
		passed++;
		console.log(`ok   ${what}`);
	} else {
		failed++;
		console.log(`FAIL ${what}: ${detail}`);
	}
}

// exld run's greedy completion of prompt (the text it prints, less its
// final newline)
function expected(prompt, special) {
	const args = ['run', '--model', modelFile, '--prompt', prompt, '-n', String(N),
		'--temperature', '0', '--threads', '1', '--completion-only'];
	if (special)
		args.push('--special');
	const out = execFileSync(exld, args, { stdio: ['ignore', 'pipe', 'ignore'] }).toString('utf8');
	return out.endsWith('\n') ? out.slice(0, -1) : out;
}

async function chatPrompt(messages) {
	const r = await fetch(`${base}/apply-template`, {
		method: 'POST', headers: { 'Content-Type': 'application/json' },
		body: JSON.stringify({ model, messages }),
	});
	return (await r.json()).prompt;
}

const prompt = 'Once upon a time';
const messages = [{ role: 'system', content: 'You tell stories.' },
	{ role: 'user', content: 'Tell me about a cat.' }];
const want = expected(prompt, false);
const wantChat = expected(await chatPrompt(messages), true);
check(want.length > 0 && wantChat.length > 0, 'exld run gave texts', `${want} / ${wantChat}`);

// ---- openai ----
const oa = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });

const list = await oa.models.list();
check(list.data.some(m => m.id === model), 'openai models.list', JSON.stringify(list.data));

const c = await oa.completions.create({ model, prompt, max_tokens: N, temperature: 0 });
check(c.choices[0].text === want, 'openai completions', `${JSON.stringify(c.choices[0].text)} != ${JSON.stringify(want)}`);
check(c.usage.completion_tokens === N, 'openai completions usage', JSON.stringify(c.usage));

let text = '', usage = null;
for await (const ch of await oa.completions.create({ model, prompt, max_tokens: N, temperature: 0,
	stream: true, stream_options: { include_usage: true } })) {
	if (ch.choices.length)
		text += ch.choices[0].text;
	if (ch.usage)
		usage = ch.usage;
}
check(text === want, 'openai completions streamed', `${JSON.stringify(text)} != ${JSON.stringify(want)}`);
check(usage && usage.completion_tokens === N, 'openai stream usage', JSON.stringify(usage));

const cc = await oa.chat.completions.create({ model, messages, max_tokens: N, temperature: 0 });
check(cc.choices[0].message.content === wantChat, 'openai chat.completions',
	`${JSON.stringify(cc.choices[0].message.content)} != ${JSON.stringify(wantChat)}`);

text = '';
for await (const ch of await oa.chat.completions.create({ model, messages, max_tokens: N,
	temperature: 0, stream: true }))
	text += ch.choices[0]?.delta?.content ?? '';
check(text === wantChat, 'openai chat.completions streamed', `${JSON.stringify(text)} != ${JSON.stringify(wantChat)}`);

try {
	await oa.completions.create({ model: 'no-such-model', prompt, max_tokens: 2 });
	check(false, 'openai unknown model', 'no error');
} catch (e) {
	check(e instanceof OpenAI.NotFoundError && e.status === 404, 'openai unknown model raises 404',
		`${e.constructor.name} ${e.status} ${e.message}`);
}

// embeddings: the same vectors through both clients, exld embed's (unit
// vectors of the mean pooled state)
const texts = ['Once upon a time', 'The cat'];
const wantEmb = execFileSync(exld, ['embed', '--model', modelFile, '--normalize', '--threads', '1',
	...texts], { stdio: ['ignore', 'pipe', 'ignore'] }).toString('utf8').trim().split('\n')
	.map(l => JSON.parse(l).embedding);
const close = (a, b) => a.length === b.length &&
	Math.sqrt(a.reduce((s, x, i) => s + (x - b[i]) ** 2, 0)) <= 1e-6 * Math.sqrt(b.reduce((s, x) => s + x * x, 0));
const emb = await oa.embeddings.create({ model, input: texts });
check(emb.data.length === 2 && emb.data.every((d, i) => d.index === i && close(Array.from(d.embedding), wantEmb[i])),
	'openai embeddings.create', JSON.stringify(emb).slice(0, 300));

// tools, on "hermes" (random weights; its template teaches <tool_call>):
// the reply pinned with exld's regex to a call, read back by the SDK
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather',
	parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } },
		required: ['city'] } } }];
const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
const pinned = { regex: 'Checking\\.\n<tool_call>\n\\{"name": "get_weather", "arguments": ' +
	'\\{"city": "Paris"\\}\\}\n</tool_call>' };
const callOk = (m) => m?.tool_calls?.length === 1 && m.tool_calls[0].type === 'function' &&
	m.tool_calls[0].function.name === 'get_weather' && m.tool_calls[0].id &&
	JSON.parse(m.tool_calls[0].function.arguments).city === 'Paris';
const tc = await oa.chat.completions.create({ model: 'hermes', messages: ask, tools, max_tokens: 200,
	...pinned });
check(callOk(tc.choices[0].message) && tc.choices[0].message.content === 'Checking.' &&
	tc.choices[0].finish_reason === 'tool_calls', 'openai tool_calls', JSON.stringify(tc.choices));
// streamed: the SDK's own accumulation of the deltas
const st = oa.beta.chat.completions.stream({ model: 'hermes', messages: ask, tools, max_tokens: 200,
	...pinned });
const fin = await st.finalChatCompletion();
check(callOk(fin.choices[0].message) && fin.choices[0].message.content === 'Checking.' &&
	fin.choices[0].finish_reason === 'tool_calls', 'openai tool_calls streamed', JSON.stringify(fin.choices));
const forced = await oa.chat.completions.create({ model: 'hermes', messages: ask, tools, max_tokens: 200,
	tool_choice: { type: 'function', function: { name: 'get_weather' } } });
const fargs = JSON.parse(forced.choices[0].message.tool_calls?.[0]?.function?.arguments ?? 'null');
check(forced.choices[0].message.tool_calls?.[0]?.function?.name === 'get_weather' && fargs &&
	typeof fargs.city === 'string' && Object.keys(fargs).length === 1, 'openai tool_choice named',
	JSON.stringify(forced.choices));
// the call and its result sent back, as an agent loop does
const back = await oa.chat.completions.create({ model: 'hermes', max_tokens: 4, tools, messages: [...ask,
	tc.choices[0].message, { role: 'tool', tool_call_id: tc.choices[0].message.tool_calls[0].id,
		content: 'sunny' }] });
check(back.choices.length === 1 && back.usage.prompt_tokens > tc.usage.prompt_tokens,
	'openai tool result turn', JSON.stringify(back.usage));

// ---- ollama ----
const ol = new Ollama({ host: base });

const ot = await ol.chat({ model: 'hermes', messages: ask, tools, stream: false,
	options: { num_predict: 200, ...pinned } });
check(ot.message.tool_calls?.[0]?.function?.name === 'get_weather' &&
	ot.message.tool_calls[0].function.arguments.city === 'Paris', 'ollama chat tool_calls',
	JSON.stringify(ot.message));

const oe = await ol.embed({ model, input: texts });
check(oe.embeddings.length === 2 && oe.embeddings.every((v, i) => close(v, wantEmb[i])),
	'ollama embed', JSON.stringify(oe).slice(0, 300));

const tags = await ol.list();
check(tags.models.some(m => m.name === model), 'ollama list', JSON.stringify(tags));

const g = await ol.generate({ model, prompt, raw: true, stream: false,
	options: { num_predict: N, temperature: 0 } });
check(g.response === want, 'ollama generate', `${JSON.stringify(g.response)} != ${JSON.stringify(want)}`);
check(g.done === true && g.eval_count === N, 'ollama generate counts', JSON.stringify(g));

text = '';
for await (const part of await ol.generate({ model, prompt, raw: true, stream: true,
	options: { num_predict: N, temperature: 0 } }))
	text += part.response;
check(text === want, 'ollama generate streamed', `${JSON.stringify(text)} != ${JSON.stringify(want)}`);

const oc = await ol.chat({ model, messages, stream: false, options: { num_predict: N, temperature: 0 } });
check(oc.message.content === wantChat, 'ollama chat', `${JSON.stringify(oc.message.content)} != ${JSON.stringify(wantChat)}`);

text = '';
for await (const part of await ol.chat({ model, messages, stream: true,
	options: { num_predict: N, temperature: 0 } }))
	text += part.message.content;
check(text === wantChat, 'ollama chat streamed', `${JSON.stringify(text)} != ${JSON.stringify(wantChat)}`);

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
