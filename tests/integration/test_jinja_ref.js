#!/usr/bin/env node
// The chat template renderer (common/chat_template.h, through `exld
// chat-template --template FILE`) against the reference, @huggingface/jinja:
// every template of ../llama.cpp-src/models/templates (the peer's tree,
// PEER_DIR or /tmp/peer) over a set of conversations.  Where the reference
// renders, the bytes must be identical; where it raises (raise_exception),
// we must fail with its message.  Where it fails otherwise, Jinja2 (the
// renderer of transformers, jinja2_ref.py) decides: if it renders, the
// reference lacks a feature, and we must render too; if it fails, we must
// fail.  Skips (77) without the templates or the npm package
// (tests/jinja-ref: `npm ci --prefix tests/jinja-ref`, which
// tests/install-deps.sh runs); without python3-jinja2 the cases where
// the reference fails go unjudged (and are counted).
//
//   node test_jinja_ref.js EXLD [--verbose] [--only SUBSTRING] [--dump DIR]
'use strict';
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');

function skip(why) {
	console.log('skipped: ' + why);
	process.exit(77);
}

const args = process.argv.slice(2);
const exld = args[0];
const verbose = args.includes('--verbose');
const only = args.includes('--only') ? args[args.indexOf('--only') + 1] : null;
const dump = args.includes('--dump') ? args[args.indexOf('--dump') + 1] : null;
if (!exld)
	skip('usage: test_jinja_ref.js EXLD');

const peer = process.env.PEER_DIR || '/tmp/peer';
const tdir = path.join(peer, 'llama.cpp-src', 'models', 'templates');
if (!fs.existsSync(tdir))
	skip(`no reference templates at ${tdir} (set PEER_DIR to the folder holding llama.cpp-src)`);

let jinja;
for (const base of [process.env.JINJA_REF_DIR, path.join(__dirname, '..', 'jinja-ref')]) {
	if (!base)
		continue;
	try {
		jinja = require(require.resolve('@huggingface/jinja', { paths: [base] }));
		break;
	} catch (e) { /* next */ }
}
if (!jinja)
	skip('@huggingface/jinja is not installed (npm ci --prefix tests/jinja-ref)');

// strftime_now: a fixed local time on both sides.
const NOW = '2024-07-26T09:15';
const FIXED = new Date(2024, 6, 26, 9, 15, 0).getTime();
const RealDate = Date;
global.Date = class extends RealDate {
	constructor(...a) {
		if (a.length)
			super(...a);
		else
			super(FIXED);
	}
	static now() {
		return FIXED;
	}
};

// raise_exception's errors, told apart from the renderer's own.
const origSet = jinja.Environment.prototype.set;
jinja.Environment.prototype.set = function (name, value) {
	if (name === 'raise_exception') {
		value = (msg) => {
			const e = new Error(msg);
			e.raised = true;
			throw e;
		};
	}
	return origSet.call(this, name, value);
};

// Where the reference goes past something Jinja2 raises on (a string + a
// list, an attribute of an undefined value) and then fails on a feature it
// lacks: our renderer, which follows the reference until it meets such a
// feature, has rendered the first by then; Jinja2 fails on it.  Both
// conversations are nonsense for these templates (text parts where they
// take a string, no messages at all).
const KNOWN = {
	'CohereForAI-c4ai-command-r-plus-tool_use.jinja': ['parts', 'empty'],
	'llama-cpp-rwkv-world.jinja': ['parts'],
};

const tools = [{
	type: 'function',
	function: {
		name: 'get_weather',
		description: 'Get the current weather in a city',
		parameters: {
			type: 'object',
			properties: {
				city: { type: 'string', description: 'The city, e.g. "Paris"' },
				unit: { type: 'string', enum: ['celsius', 'fahrenheit'], description: 'Units' },
				days: { type: 'integer', description: 'Forecast days', default: 1 },
			},
			required: ['city'],
		},
	},
}, {
	type: 'function',
	function: {
		name: 'search',
		description: 'Search the web',
		parameters: {
			type: 'object',
			properties: {
				query: { type: 'string' },
				filters: { type: 'object', properties: { site: { type: 'string' }, recent: { type: 'boolean' } } },
				tags: { type: 'array', items: { type: 'string' } },
			},
			required: ['query'],
		},
	},
}];

const common = { bos_token: '<s>', eos_token: '</s>' };
const conversations = {
	system: { messages: [{ role: 'system', content: 'You are a helpful assistant.' }, { role: 'user', content: 'Hello!' }], add_generation_prompt: true },
	multi: {
		messages: [{ role: 'user', content: 'Hi there' }, { role: 'assistant', content: 'Hello! How can I help?' },
			{ role: 'user', content: 'Tell me a joke.' }, { role: 'assistant', content: 'Why did the chicken cross the road?' },
			{ role: 'user', content: 'Why?' }],
		add_generation_prompt: true,
	},
	prefill: { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Name a color.' }, { role: 'assistant', content: 'Blue.' }], add_generation_prompt: false },
	unicode: {
		messages: [{ role: 'system', content: 'Réponds en français. 答えてください。' },
			{ role: 'user', content: 'héllo wörld — 你好，世界 🌍🚀 مرحبا Ελληνικά ß İstanbul ΣΊΣΥΦΟΣ' },
			{ role: 'assistant', content: 'Привет! 👋🏽 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 e\u0301' }, { role: 'user', content: '¿Qué tal? ½ ∑ ∞ \u00a0nbsp\u2028ls' }],
		add_generation_prompt: true,
	},
	whitespace: {
		messages: [{ role: 'system', content: '  \n\tIndented system prompt\n\n' },
			{ role: 'user', content: '   leading and trailing   \n\n\n' },
			{ role: 'assistant', content: '\n\nline one\n  line two\n\t\ttabs\n' },
			{ role: 'user', content: 'quotes " \' and backslash \\ and {{ braces }} {% tags %} {# note #} <|im_end|>' }],
		add_generation_prompt: true,
	},
	tools: {
		messages: [{ role: 'system', content: 'You can call tools.' }, { role: 'user', content: "What's the weather in Paris?" },
			{ role: 'assistant', content: '', tool_calls: [{ id: 'call0Abc9', type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris', unit: 'celsius' } } }] },
			{ role: 'tool', tool_call_id: 'call0Abc9', name: 'get_weather', content: '{"temperature": 21, "sky": "clear"}' }],
		tools,
		add_generation_prompt: true,
	},
	tools_str: {
		messages: [{ role: 'user', content: 'Search for jinja and the weather in Oslo' },
			{ role: 'assistant', content: null, tool_calls: [
				{ id: 'call1Abc9', type: 'function', function: { name: 'search', arguments: '{"query": "jinja", "tags": ["x", "y"]}' } },
				{ id: 'call2Abc9', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Oslo"}' } }] },
			{ role: 'tool', tool_call_id: 'call1Abc9', content: 'Jinja is a template engine.' },
			{ role: 'tool', tool_call_id: 'call2Abc9', content: 'Snow, -3 C' },
			{ role: 'assistant', content: 'Jinja is a template engine; Oslo has snow.' }, { role: 'user', content: 'Thanks' }],
		tools,
		add_generation_prompt: true,
	},
	tools_offered: { messages: [{ role: 'user', content: 'Hi' }], tools, add_generation_prompt: true },
	parts: {
		messages: [{ role: 'system', content: [{ type: 'text', text: 'System in parts.' }] },
			{ role: 'user', content: [{ type: 'text', text: 'First part.' }, { type: 'text', text: 'Second part.' }] }],
		add_generation_prompt: true,
	},
	reasoning: {
		messages: [{ role: 'user', content: '2+2?' }, { role: 'assistant', content: '4', reasoning_content: 'Two plus two is four.' },
			{ role: 'user', content: 'And 3+3?' }],
		add_generation_prompt: true,
		enable_thinking: false,
	},
	user_only: { messages: [{ role: 'user', content: 'Just one message' }], add_generation_prompt: false },
	empty: { messages: [], add_generation_prompt: true },
};

function reference(tmpl, ctx) {
	try {
		return { out: new jinja.Template(tmpl).render(ctx) };
	} catch (e) {
		return { err: String(e && e.message !== undefined ? e.message : e), raised: !!(e && e.raised) };
	}
}

function ours(file, ctx) {
	const r = spawnSync(exld, ['chat-template', '--template', file], {
		input: JSON.stringify(ctx),
		env: { ...process.env, EXLD_TEMPLATE_NOW: NOW },
		maxBuffer: 64 << 20,
	});
	if (r.error)
		throw r.error;
	return { status: r.status, out: r.stdout, err: r.stderr.toString() };
}

function firstDiff(a, b) {
	let i = 0;
	while (i < a.length && i < b.length && a[i] === b[i])
		i++;
	return i;
}

const files = fs.readdirSync(tdir).filter((f) => f.endsWith('.jinja')).sort()
	.filter((f) => !only || f.includes(only));
const results = { pass: [], ext: [], fail: [] };
let cases = 0, identical = 0, bothFail = 0, extended = 0, unjudged = 0, known = 0;
const perTemplate = new Map();
const pending = [];   // the reference failed: Jinja2 decides

for (const f of files) {
	const file = path.join(tdir, f);
	const tmpl = fs.readFileSync(file, 'utf8');
	const t = { problems: [], notes: [] };
	perTemplate.set(f, t);
	for (const [name, conv] of Object.entries(conversations)) {
		const ctx = { ...common, ...conv };
		const ref = reference(tmpl, ctx);
		const got = ours(file, ctx);
		cases++;
		if (dump) {
			fs.mkdirSync(dump, { recursive: true });
			const base = path.join(dump, f.replace(/\.jinja$/, '') + '.' + name);
			fs.writeFileSync(base + '.ref', ref.out !== undefined ? ref.out : 'ERROR: ' + ref.err);
			fs.writeFileSync(base + '.ours', got.status === 0 ? got.out : 'ERROR: ' + got.err);
		}
		if (ref.out !== undefined) {
			const want = Buffer.from(ref.out, 'utf8');
			if (got.status !== 0) {
				t.problems.push(`${name}: the reference renders, we fail: ${got.err.trim()}`);
			} else if (!want.equals(got.out)) {
				const at = firstDiff(want, got.out);
				t.problems.push(`${name}: output differs at byte ${at}:\n    want ${JSON.stringify(want.subarray(Math.max(0, at - 30), at + 50).toString())}\n    got  ${JSON.stringify(got.out.subarray(Math.max(0, at - 30), at + 50).toString())}`);
			} else {
				identical++;
			}
			continue;
		}
		if (ref.raised) {
			const want = 'exld chat-template: ' + ref.err + '\n';
			if (got.status === 0)
				t.problems.push(`${name}: the reference raises "${ref.err}", we render`);
			else if (got.err !== want)
				t.problems.push(`${name}: the reference raises "${ref.err}", we say ${JSON.stringify(got.err.trim())}`);
			else
				bothFail++;
			continue;
		}
		pending.push({ f, name, file, ctx, ref, got });
	}
}

// Where the reference failed on its own (not raise_exception): Jinja2's word.
if (pending.length) {
	const r = spawnSync('python3', [path.join(__dirname, 'jinja2_ref.py')], {
		input: JSON.stringify(pending.map((p) => ({ file: p.file, context: p.ctx }))),
		maxBuffer: 256 << 20,
	});
	const j2 = r.status === 0 ? JSON.parse(r.stdout.toString()) : null;
	if (!j2)
		console.log(`(no Jinja2: ${(r.stdout || '').toString().trim() || (r.stderr || '').toString().trim() || r.error}; ` +
			`${pending.length} cases where the reference fails go unjudged)`);
	pending.forEach((p, i) => {
		const t = perTemplate.get(p.f);
		if (!j2) {
			unjudged++;
			return;
		}
		const jr = j2[i];
		if (dump)
			fs.writeFileSync(path.join(dump, p.f.replace(/\.jinja$/, '') + '.' + p.name + '.jinja2'),
				jr.out !== undefined ? jr.out : 'ERROR: ' + jr.err);
		if (jr.out !== undefined) {
			if (p.got.status !== 0)
				t.problems.push(`${p.name}: the reference fails ("${p.ref.err}") but Jinja2 renders, and we fail: ${p.got.err.trim()}`);
			else {
				t.notes.push(`${p.name}: the reference fails ("${p.ref.err}"), Jinja2 and we render`);
				extended++;
			}
		} else if (p.got.status === 0 && (KNOWN[p.f] || []).includes(p.name)) {
			t.notes.push(`${p.name}: the reference fails ("${p.ref.err}") and Jinja2 too ("${jr.err}"); we render (known: the reference got past Jinja2's error first)`);
			known++;
		} else if (p.got.status === 0) {
			t.problems.push(`${p.name}: the reference fails ("${p.ref.err}") and Jinja2 too ("${jr.err}"), but we render`);
		} else {
			bothFail++;
		}
	});
}

for (const [f, t] of perTemplate) {
	if (t.problems.length)
		results.fail.push(f);
	else if (t.notes.length)
		results.ext.push(f);
	else
		results.pass.push(f);
	if (verbose || t.problems.length) {
		console.log(`${t.problems.length ? 'FAIL' : t.notes.length ? 'ext ' : 'ok  '} ${f}`);
		for (const p of t.problems)
			console.log('  ' + p);
		if (verbose)
			for (const n of t.notes)
				console.log('  ' + n);
	}
}
console.log(`\n${files.length} templates x ${Object.keys(conversations).length} conversations = ${cases} cases: ` +
	`${identical} byte-identical, ${bothFail} failing on both sides, ` +
	`${extended} rendered where the reference lacks a feature Jinja2 has, ${known} known differences, ${unjudged} unjudged`);
console.log(`templates: ${results.pass.length} identical everywhere, ${results.ext.length} identical where the reference renders, ${results.fail.length} failing`);
if (results.ext.length)
	console.log('  where the reference lacks a feature: ' + results.ext.join(', '));
if (results.fail.length)
	console.log('  FAILING: ' + results.fail.join(', '));
process.exit(results.fail.length ? 1 : 0);
