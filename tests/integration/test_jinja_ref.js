#!/usr/bin/env node
// The chat template renderer (common/chat_template.h, through `exld
// chat-template --template FILE`) against the reference, @huggingface/jinja,
// on two corpora: every template of the peer's llama.cpp tree
// (PEER_DIR/llama.cpp-src/models/templates, PEER_DIR defaulting to
// /tmp/peer) over a set of conversations, and the language snippets of
// tests/data/jinja_snippets.txt over one context.
//
// Where the reference renders, the bytes must be identical; where it
// raises (raise_exception), we must fail with its message.  Where it fails
// otherwise, Jinja2 (transformers' renderer, jinja2_ref.py) decides: if it
// renders, the reference lacks a feature and we must render Jinja2's bytes;
// if it fails, we must fail.
//
// Skips (77) without the npm package (tests/jinja-ref: `npm ci --prefix
// tests/jinja-ref`, which tests/install-deps.sh runs), and without the
// peer's templates once the snippets have passed (a snippet that differs
// fails the test all the same); without python3-jinja2 the cases where the
// reference fails go unjudged (and are counted).
//
//   node test_jinja_ref.js EXLD [--verbose] [--only SUBSTRING] [--dump DIR] [--stride N]
//
// --stride N renders every Nth conversation of each template (a different
// one per template, so every conversation still meets N-th of the
// templates); the ASan/UBSan build runs it so, the release build in full.
'use strict';
const fs = require('fs');
const os = require('os');
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
const stride = args.includes('--stride') ? Number(args[args.indexOf('--stride') + 1]) : 1;
if (!Number.isInteger(stride) || stride < 1) {
	console.error('--stride wants a positive integer');
	process.exit(2);
}
if (!exld)
	skip('usage: test_jinja_ref.js EXLD');

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

const peer = process.env.PEER_DIR || '/tmp/peer';
const tdir = path.join(peer, 'llama.cpp-src', 'models', 'templates');
const snippetFile = path.join(__dirname, '..', 'data', 'jinja_snippets.txt');

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

// The snippets' context: a bit of every type.
const snippetContext = {
	messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Yo' }],
	s: ' Hello World ', n: 3, f: 2.5, neg: -7, b: true, z: null, e: '', l: [3, 1, 2],
	d: { b: 2, a: 1, '10': 'x', '2': 'y' }, u: 'héllo 🌍 ß', fl: 1.0, pi: 3.14159,
	big: 12345678901234567890, tiny: 1e-7, strs: ['b', 'A', 'a', 'C'],
	nested: { a: { b: [1, { c: 'deep' }] } },
	objs: [{ name: 'x', v: 2, t: 'a' }, { name: 'y', v: 1 }, { name: 'z', v: 3, t: 'b' }],
	bos_token: '<s>', eos_token: '</s>',
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

function excerpt(buf, at) {
	return JSON.stringify(buf.subarray(Math.max(0, at - 30), at + 50).toString());
}

// The cases: {group, name, file, tmpl, ctx}.
const groups = new Map();
const cases = [];
function addCase(group, name, file, tmpl, ctx) {
	if (!groups.has(group))
		groups.set(group, { problems: [], notes: [] });
	cases.push({ group, name, file, tmpl, ctx });
}
let templates = 0;
if (fs.existsSync(tdir)) {
	for (const f of fs.readdirSync(tdir).filter((x) => x.endsWith('.jinja')).sort()) {
		if (only && !f.includes(only))
			continue;
		const file = path.join(tdir, f);
		const tmpl = fs.readFileSync(file, 'utf8');
		Object.entries(conversations).forEach(([name, conv], ci) => {
			if ((ci + templates) % stride === 0)
				addCase(f, name, file, tmpl, { ...common, ...conv });
		});
		templates++;
	}
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'jinja-ref-'));
const snippets = fs.readFileSync(snippetFile, 'utf8').split('\n----\n').filter((x) => x.trim());
snippets.forEach((sn, i) => {
	const name = `snippet ${i + 1}`;
	if (only && !name.includes(only) && !sn.includes(only))
		return;
	const file = path.join(tmp, `snippet${i + 1}.jinja`);
	fs.writeFileSync(file, sn);
	addCase('snippets', name + ' ' + JSON.stringify(sn.length > 60 ? sn.slice(0, 60) + '...' : sn), file, sn, snippetContext);
});

let identical = 0, bothFail = 0, extended = 0, unjudged = 0, known = 0;
const pending = [];   // the reference failed on its own: Jinja2 decides
for (const cs of cases) {
	const g = groups.get(cs.group);
	const ref = reference(cs.tmpl, cs.ctx);
	const got = ours(cs.file, cs.ctx);
	cs.ref = ref;
	cs.got = got;
	if (dump) {
		fs.mkdirSync(dump, { recursive: true });
		const base = path.join(dump, path.basename(cs.file).replace(/\.jinja$/, '') + '.' + cs.name.split(' ')[0]);
		fs.writeFileSync(base + '.ref', ref.out !== undefined ? ref.out : 'ERROR: ' + ref.err);
		fs.writeFileSync(base + '.ours', got.status === 0 ? got.out : 'ERROR: ' + got.err);
	}
	if (ref.out !== undefined) {
		const want = Buffer.from(ref.out, 'utf8');
		if (got.status !== 0) {
			g.problems.push(`${cs.name}: the reference renders, we fail: ${got.err.trim()}`);
		} else if (!want.equals(got.out)) {
			const at = firstDiff(want, got.out);
			g.problems.push(`${cs.name}: output differs at byte ${at}:\n    want ${excerpt(want, at)}\n    got  ${excerpt(got.out, at)}`);
		} else {
			identical++;
		}
		continue;
	}
	if (ref.raised) {
		const want = 'exld chat-template: ' + ref.err + '\n';
		if (got.status === 0)
			g.problems.push(`${cs.name}: the reference raises "${ref.err}", we render`);
		else if (got.err !== want)
			g.problems.push(`${cs.name}: the reference raises "${ref.err}", we say ${JSON.stringify(got.err.trim())}`);
		else
			bothFail++;
		continue;
	}
	pending.push(cs);
}

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
		const g = groups.get(p.group);
		if (!j2) {
			unjudged++;
			return;
		}
		const jr = j2[i];
		if (dump)
			fs.writeFileSync(path.join(dump, path.basename(p.file).replace(/\.jinja$/, '') + '.' + p.name.split(' ')[0] + '.jinja2'),
				jr.out !== undefined ? jr.out : 'ERROR: ' + jr.err);
		if (jr.out !== undefined) {
			const want = Buffer.from(jr.out, 'utf8');
			if (p.got.status !== 0) {
				g.problems.push(`${p.name}: the reference fails ("${p.ref.err}") but Jinja2 renders, and we fail: ${p.got.err.trim()}`);
			} else if (!want.equals(p.got.out)) {
				const at = firstDiff(want, p.got.out);
				g.problems.push(`${p.name}: the reference fails ("${p.ref.err}"); Jinja2's output differs from ours at byte ${at}:\n    Jinja2 ${excerpt(want, at)}\n    ours   ${excerpt(p.got.out, at)}`);
			} else {
				g.notes.push(`${p.name}: the reference fails ("${p.ref.err}"); we render Jinja2's bytes`);
				extended++;
			}
		} else if (p.got.status === 0 && (KNOWN[p.group] || []).includes(p.name)) {
			g.notes.push(`${p.name}: the reference fails ("${p.ref.err}") and Jinja2 too ("${jr.err}"); we render (known: the reference got past Jinja2's error first)`);
			known++;
		} else if (p.got.status === 0) {
			g.problems.push(`${p.name}: the reference fails ("${p.ref.err}") and Jinja2 too ("${jr.err}"), but we render`);
		} else {
			bothFail++;
		}
	});
}
fs.rmSync(tmp, { recursive: true, force: true });

const pass = [], ext = [], fail = [];
for (const [name, g] of groups) {
	(g.problems.length ? fail : g.notes.length ? ext : pass).push(name);
	if (verbose || g.problems.length) {
		console.log(`${g.problems.length ? 'FAIL' : g.notes.length ? 'ext ' : 'ok  '} ${name}`);
		for (const p of g.problems)
			console.log('  ' + p);
		if (verbose)
			for (const n of g.notes)
				console.log('  ' + n);
	}
}
console.log(`\n${templates} templates x ${Object.keys(conversations).length} conversations` +
	(stride > 1 ? ` (every ${stride}th)` : '') + ` + ${snippets.length} snippets = ${cases.length} cases: ` +
	`${identical} byte-identical to the reference, ${bothFail} failing on both sides, ` +
	`${extended} identical to Jinja2 where the reference lacks a feature, ${known} known differences, ${unjudged} unjudged`);
console.log(`groups: ${pass.length} identical everywhere, ${ext.length} identical where the reference renders, ${fail.length} failing`);
if (ext.length)
	console.log('  where the reference lacks a feature: ' + ext.join(', '));
if (fail.length)
	console.log('  FAILING: ' + fail.join(', '));
if (fail.length)
	process.exit(1);
if (!templates && !only)
	skip(`no reference templates at ${tdir} (set PEER_DIR to the folder holding llama.cpp-src); ` +
		'the snippets alone agree');
process.exit(0);
