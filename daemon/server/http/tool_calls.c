/* Tool calls in a chat model's reply (tool_calls.h). */
#include "daemon/server/http/tool_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_parse.h"
#include "common/utf8.h"
#include "daemon/server/http/json_out.h"
#include "daemon/server/http/text_scan.h"

#define HERMES_OPEN "<tool_call>"
#define HERMES_CLOSE "</tool_call>"
#define MISTRAL_OPEN "[TOOL_CALLS]"
#define MISTRAL_ARGS "[ARGS]"
#define MISTRAL_ID "[CALL_ID]"
#define GRANITE_OPEN "<|tool_call|>"
#define GRANITE_CLOSE "<|/tool_call|>"
#define PYTHON_TAG "<|python_tag|>"

enum exl_tool_fmt exl_tool_fmt_of(const char *t, size_t n)
{
	/* gpt-oss's harmony, Mistral's and Granite's markers first: a
	 * template may also quote another family's tags in its instructions.
	 * gpt-oss's template spells its calls' header in pieces ("to=" then
	 * "functions." + name + "<|channel|>commentary "): its channel marker
	 * is what every harmony template writes (llama.cpp keys on it too). */
	if (exl_text_find(t, n, 0, EXL_HARMONY_CHANNEL) < n)
		return EXL_TOOL_FMT_HARMONY;
	if (exl_text_find(t, n, 0, MISTRAL_OPEN) < n)
		return EXL_TOOL_FMT_MISTRAL;
	if (exl_text_find(t, n, 0, GRANITE_OPEN) < n)
		return EXL_TOOL_FMT_GRANITE;
	if (exl_text_find(t, n, 0, HERMES_OPEN) < n)
		return EXL_TOOL_FMT_HERMES;
	if (exl_text_find(t, n, 0, PYTHON_TAG) < n ||
	    (exl_text_find(t, n, 0, "<|start_header_id|>") < n &&
	     exl_text_find(t, n, 0, "\"parameters\"") < n))
		return EXL_TOOL_FMT_LLAMA3;
	return EXL_TOOL_FMT_NONE;
}

const char *exl_tool_fmt_name(enum exl_tool_fmt f)
{
	switch (f) {
	case EXL_TOOL_FMT_HERMES: return "hermes";
	case EXL_TOOL_FMT_LLAMA3: return "llama3";
	case EXL_TOOL_FMT_MISTRAL: return "mistral";
	case EXL_TOOL_FMT_GRANITE: return "granite";
	case EXL_TOOL_FMT_HARMONY: return "harmony";
	default: return "none";
	}
}

bool exl_tool_fmt_needs_special(enum exl_tool_fmt f)
{
	return f == EXL_TOOL_FMT_MISTRAL || f == EXL_TOOL_FMT_GRANITE;
}

const char *exl_tool_forced_prefix(enum exl_tool_fmt f)
{
	switch (f) {
	case EXL_TOOL_FMT_HERMES: return HERMES_OPEN "\n";
	case EXL_TOOL_FMT_MISTRAL: return MISTRAL_OPEN "[";
	case EXL_TOOL_FMT_GRANITE: return GRANITE_OPEN "[";
	/* a final message holding the call object: harmony's own call
	 * header names one function, and its arguments' schema alone would
	 * need the name chosen first */
	case EXL_TOOL_FMT_HARMONY: return EXL_HARMONY_CHANNEL "final" EXL_HARMONY_MESSAGE;
	default: return "";
	}
}

static const char *args_key(enum exl_tool_fmt f)
{
	return f == EXL_TOOL_FMT_LLAMA3 ? "parameters" : "arguments";
}

/* A tool of the request's array: {"type": "function", "function": {"name",
 * "parameters"}} (Ollama's and OpenAI's shape), or the function object
 * itself. */
static const struct exl_json *tool_function(const struct exl_json *t)
{
	const struct exl_json *fn = t->type == EXL_JSON_OBJECT ? exl_json_get(t, "function") : NULL;

	return fn && fn->type == EXL_JSON_OBJECT ? fn : t;
}

static const struct exl_json *tool_name(const struct exl_json *t)
{
	const struct exl_json *fn = tool_function(t);
	const struct exl_json *n = fn->type == EXL_JSON_OBJECT ? exl_json_get(fn, "name") : NULL;

	return n && n->type == EXL_JSON_STRING && n->len ? n : NULL;
}

/* A tool's parameters schema as the call's constraint.  Apps write these
 * for OpenAI, which treats what it does not check as notes; exld's
 * converter refuses what it cannot enforce (docs/grammar.md).  For a call,
 * a constraint a little looser than the schema beats no call at all: a
 * keyword the converter does not take is left out (a format other than
 * date, time, date-time and uuid, or one beside a length or pattern;
 * uniqueItems; multipleOf, not, if/then/else, patternProperties, ...), and
 * oneOf becomes anyOf (the converter takes oneOf only where it can prove
 * its branches disjoint).  Property names, enum and const values are
 * copied as they are. */
static void write_param_schema(struct exl_jw *w, const struct exl_json *s, const char *base);

static void write_schema_array(struct exl_jw *w, const struct exl_json *a, const char *base)
{
	exl_jw_arr(w);
	for (size_t i = 0; i < a->n; i++)
		write_param_schema(w, a->v[i], base);
	exl_jw_arr_end(w);
}

static bool keyword_kept(const struct exl_json *s, const char *k, const struct exl_json *v)
{
	static const char *const kept[] = {
		"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "nullable", "properties",
		"required", "additionalProperties", "items", "prefixItems", "additionalItems",
		"minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum",
		"maximum", "exclusiveMinimum", "exclusiveMaximum", "title", "description", "default",
		"examples", "$defs", "definitions", "$schema", "$id", "$comment", NULL,
	};
	bool known = false;

	for (int i = 0; kept[i] && !known; i++)
		known = !strcmp(k, kept[i]);
	if (!known)
		return false;
	if (strcmp(k, "format"))
		return true;
	return v->type == EXL_JSON_STRING && !exl_json_get(s, "pattern") &&
	       !exl_json_get(s, "minLength") && !exl_json_get(s, "maxLength") &&
	       (!strcmp(v->str, "date") || !strcmp(v->str, "time") || !strcmp(v->str, "date-time") ||
		!strcmp(v->str, "uuid"));
}

/* The kept members of schema object s, inside an object being written.
 * base: where the parameters sit in the call's schema, the root their
 * "#..." references now resolve against. */
static void write_param_members(struct exl_jw *w, const struct exl_json *s, const char *base)
{
	for (size_t i = 0; i < s->n; i++) {
		const char *k = s->keys[i];
		const struct exl_json *v = s->v[i];

		if (memchr(k, 0, s->key_lens[i]) || !keyword_kept(s, k, v))
			continue;
		exl_jw_key(w, !strcmp(k, "oneOf") ? "anyOf" : k);
		if (!strcmp(k, "$ref") && v->type == EXL_JSON_STRING && v->len && v->str[0] == '#') {
			char ref[512];
			snprintf(ref, sizeof(ref), "%s%.*s", base, (int)(v->len - 1), v->str + 1);
			exl_jw_cstr(w, ref);
		} else if ((!strcmp(k, "properties") || !strcmp(k, "$defs") || !strcmp(k, "definitions")) &&
		    v->type == EXL_JSON_OBJECT) {
			exl_jw_obj(w);
			for (size_t j = 0; j < v->n; j++) {
				if (memchr(v->keys[j], 0, v->key_lens[j]))
					continue;
				exl_jw_key(w, v->keys[j]);
				write_param_schema(w, v->v[j], base);
			}
			exl_jw_obj_end(w);
		} else if ((!strcmp(k, "anyOf") || !strcmp(k, "oneOf") || !strcmp(k, "allOf") ||
			    !strcmp(k, "prefixItems") || !strcmp(k, "items")) &&
			   v->type == EXL_JSON_ARRAY) {
			write_schema_array(w, v, base);
		} else if (!strcmp(k, "items") || !strcmp(k, "additionalProperties") ||
			   !strcmp(k, "additionalItems")) {
			write_param_schema(w, v, base);
		} else {
			exl_jw_json(w, v);
		}
	}
}

static void write_param_schema(struct exl_jw *w, const struct exl_json *s, const char *base)
{
	if (s->type != EXL_JSON_OBJECT) {
		exl_jw_json(w, s);
		return;
	}
	exl_jw_obj(w);
	write_param_members(w, s, base);
	exl_jw_obj_end(w);
}

static void one_call_schema(struct exl_jw *w, enum exl_tool_fmt f, const struct exl_json *t,
			    int branch)
{
	char base[64];

	if (branch >= 0)
		snprintf(base, sizeof(base), "#/anyOf/%d/properties/%s", branch, args_key(f));
	else
		snprintf(base, sizeof(base), "#/properties/%s", args_key(f));
	const struct exl_json *fn = tool_function(t);
	const struct exl_json *params = exl_json_get(fn, "parameters");
	const struct exl_json *name = tool_name(t);

	exl_jw_obj(w);
	exl_jw_kstr(w, "type", "object");
	exl_jw_key(w, "properties");
	exl_jw_obj(w);
	exl_jw_key(w, "name");
	exl_jw_obj(w);
	exl_jw_key(w, "const");
	exl_jw_str(w, name->str, name->len);
	exl_jw_obj_end(w);
	exl_jw_key(w, args_key(f));
	if (params && params->type == EXL_JSON_OBJECT && params->n) {
		/* Arguments the function does not declare are a model's
		 * invention: unless the schema allows them, a forced call
		 * gets none (JSON schema's default would let a model write
		 * keys until max_tokens; llama.cpp's converter also defaults
		 * to none). */
		exl_jw_obj(w);
		write_param_members(w, params, base);
		if (!exl_json_get(params, "additionalProperties") &&
		    !exl_json_get(params, "anyOf") && !exl_json_get(params, "oneOf") &&
		    !exl_json_get(params, "allOf") && !exl_json_get(params, "$ref")) {
			exl_jw_key(w, "additionalProperties");
			exl_jw_bool(w, false);
		}
		exl_jw_obj_end(w);
	} else {
		exl_jw_obj(w);
		exl_jw_kstr(w, "type", "object");
		exl_jw_obj_end(w);
	}
	exl_jw_obj_end(w);
	exl_jw_key(w, "required");
	exl_jw_arr(w);
	exl_jw_cstr(w, "name");
	exl_jw_cstr(w, args_key(f));
	exl_jw_arr_end(w);
	exl_jw_key(w, "additionalProperties");
	exl_jw_bool(w, false);
	exl_jw_obj_end(w);
}

char *exl_tool_schema(enum exl_tool_fmt f, const char *tools_json, size_t tools_len,
		      const char *only, size_t *len, char *err, size_t errlen)
{
	struct exl_json_doc *d = exl_json_parse(tools_json, tools_len, err, errlen);
	const struct exl_json *tools = d ? exl_json_root(d) : NULL;
	struct exl_jw w;
	int n = 0;

	if (!tools)
		return NULL;
	exl_jw_init(&w);
	if (tools->type != EXL_JSON_ARRAY || !tools->n) {
		snprintf(err, errlen, "tools: wants a non-empty array of functions");
		goto fail;
	}
	for (size_t i = 0; i < tools->n; i++) {
		const struct exl_json *name = tool_name(tools->v[i]);

		if (!name) {
			snprintf(err, errlen, "tools[%zu]: wants a function with a name", i);
			goto fail;
		}
		n += !only || (strlen(only) == name->len && !memcmp(only, name->str, name->len));
	}
	if (!n) {
		snprintf(err, errlen, "tool_choice: no function named '%.100s' in tools", only);
		goto fail;
	}
	if (n > 1) {
		exl_jw_obj(&w);
		exl_jw_key(&w, "anyOf");
		exl_jw_arr(&w);
	}
	for (size_t i = 0, b = 0; i < tools->n; i++) {
		const struct exl_json *name = tool_name(tools->v[i]);

		if (!only || (strlen(only) == name->len && !memcmp(only, name->str, name->len)))
			one_call_schema(&w, f, tools->v[i], n > 1 ? (int)b++ : -1);
	}
	if (n > 1) {
		exl_jw_arr_end(&w);
		exl_jw_obj_end(&w);
	}
	if (exl_jw_failed(&w)) {
		snprintf(err, errlen, "tools: the call's schema could not be written (out of memory, "
			 "or parameters nested deeper than %d levels)", EXL_JW_MAX_DEPTH - 6);
		goto fail;
	}
	exl_json_free(d);
	*len = w.len;
	return w.buf;
fail:
	exl_json_free(d);
	exl_jw_free(&w);
	return NULL;
}

/* ---- reading the reply ---- */

/* The end of the JSON object or array at s[i] (after its closing bracket),
 * or 0 when it does not close within n.  Brackets inside strings do not
 * count; whether the value is valid JSON is the parser's to say. */
static size_t json_end(const char *s, size_t n, size_t i)
{
	int depth = 0;
	bool in_str = false;

	for (; i < n; i++) {
		char c = s[i];

		if (in_str) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_str = false;
		} else if (c == '"') {
			in_str = true;
		} else if (c == '{' || c == '[') {
			depth++;
		} else if (c == '}' || c == ']') {
			if (--depth == 0)
				return i + 1;
			if (depth < 0)
				return 0;
		}
	}
	return 0;
}

static char *dup_n(const char *s, size_t n)
{
	char *d = malloc(n + 1);

	if (d) {
		memcpy(d, s, n);
		d[n] = 0;
	}
	return d;
}

/* A function name as a reply may spell one: 1-256 bytes of UTF-8 with no
 * control character or space, and none of the forms' brackets. */
static bool name_ok(const char *s, size_t n)
{
	if (!n || n > 256 || exl_utf8_bad_at(s, n) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || s[i] == 0x7f || strchr("<>[]", s[i]))
			return false;
	return true;
}

/* Appends a call; name and args are copied.  -1 when out of memory, 1
 * when the name is not one. */
static int add_call(struct exl_tool_parse *p, const char *name, size_t name_len, const char *args,
		    size_t args_len, const char *id, size_t id_len)
{
	struct exl_tool_call *v;

	if (!name_ok(name, name_len) || (id && (!name_ok(id, id_len))))
		return 1;
	v = realloc(p->calls, (size_t)(p->n_calls + 1) * sizeof(*v));
	if (!v)
		return -1;
	p->calls = v;
	struct exl_tool_call *c = &v[p->n_calls];
	memset(c, 0, sizeof(*c));
	c->name = dup_n(name, name_len);
	c->args = dup_n(args, args_len);
	c->args_len = args_len;
	c->id = id ? dup_n(id, id_len) : NULL;
	p->n_calls++;
	if (!c->name || !c->args || (id && !c->id))
		return -1;
	return 0;
}

/* The arguments value v written as a compact JSON object: an object as it
 * is, a string holding one (some models quote it) parsed first.  1 when it
 * is neither. */
static int write_args(struct exl_jw *w, const struct exl_json *v)
{
	if (!v) {
		exl_jw_obj(w);
		exl_jw_obj_end(w);
		return 0;
	}
	if (v->type == EXL_JSON_OBJECT) {
		exl_jw_json(w, v);
		return 0;
	}
	if (v->type != EXL_JSON_STRING)
		return 1;
	struct exl_json_doc *d = exl_json_parse(v->str, v->len, NULL, 0);
	const struct exl_json *o = d ? exl_json_root(d) : NULL;
	int rc = 1;
	if (o && o->type == EXL_JSON_OBJECT) {
		exl_jw_json(w, o);
		rc = 0;
	}
	exl_json_free(d);
	return rc;
}

/* One call object {"name": N, "arguments" or "parameters": {...}} (an
 * "id" kept).  1 when o is not one, -1 when out of memory. */
static int call_of_object(struct exl_tool_parse *p, const struct exl_json *o)
{
	const struct exl_json *name, *args, *id;
	struct exl_jw w;
	int rc;

	if (o->type != EXL_JSON_OBJECT)
		return 1;
	name = exl_json_get(o, "name");
	if (!name || name->type != EXL_JSON_STRING || !name->len)
		return 1;
	args = exl_json_get(o, "arguments");
	if (!args)
		args = exl_json_get(o, "parameters");
	id = exl_json_get(o, "id");
	if (id && id->type != EXL_JSON_STRING)
		id = NULL;
	exl_jw_init(&w);
	rc = write_args(&w, args);
	if (!rc)
		rc = exl_jw_failed(&w) ? -1 :
		     add_call(p, name->str, name->len, w.buf, w.len, id ? id->str : NULL,
			      id ? id->len : 0);
	exl_jw_free(&w);
	return rc;
}

/* The calls of the JSON at s[i, end): one call object, or an array of
 * them (each must be one).  1 when it is not that. */
static int calls_of_json(struct exl_tool_parse *p, const char *s, size_t i, size_t end)
{
	struct exl_json_doc *d = exl_json_parse(s + i, end - i, NULL, 0);
	const struct exl_json *v = d ? exl_json_root(d) : NULL;
	int rc = 1;

	if (v && v->type == EXL_JSON_ARRAY) {
		rc = v->n ? 0 : 1;
		for (size_t k = 0; k < v->n && !rc; k++)
			rc = call_of_object(p, v->v[k]);
	} else if (v) {
		rc = call_of_object(p, v);
	}
	exl_json_free(d);
	return rc;
}

/* <function=N><parameter=P>value</parameter>...</function> from s[i]
 * (Qwen3-Coder's form): each value JSON where it reads as JSON other than
 * a bare string, else the text.  The end in *next.  1 when malformed. */
static int call_of_xml(struct exl_tool_parse *p, const char *s, size_t n, size_t i, size_t *next)
{
	size_t name_end = exl_text_find(s, n, i, ">");
	struct exl_jw w;
	int rc = 1;

	i += strlen("<function=");
	if (name_end >= n || name_end == i)
		return 1;
	exl_jw_init(&w);
	exl_jw_obj(&w);
	size_t at = exl_text_skip_ws(s, n, name_end + 1);
	while (exl_text_starts(s, n, at, "<parameter=")) {
		size_t key = at + strlen("<parameter=");
		size_t key_end = exl_text_find(s, n, key, ">");
		if (key_end >= n || key_end == key)
			goto out;
		size_t v = key_end + 1;
		size_t v_end = exl_text_find(s, n, v, "</parameter>");
		if (v_end >= n)
			goto out;
		/* the value sits on its own lines */
		size_t a = v, b = v_end;
		if (a < b && s[a] == '\n')
			a++;
		if (b > a && s[b - 1] == '\n')
			b--;
		char *kz = dup_n(s + key, key_end - key);
		if (!kz)
			goto oom;
		exl_jw_key(&w, kz);
		free(kz);
		struct exl_json_doc *d = exl_json_parse(s + a, b - a, NULL, 0);
		const struct exl_json *jv = d ? exl_json_root(d) : NULL;
		if (jv && jv->type != EXL_JSON_STRING)
			exl_jw_json(&w, jv);
		else
			exl_jw_str(&w, s + a, b - a);
		exl_json_free(d);
		at = exl_text_skip_ws(s, n, v_end + strlen("</parameter>"));
	}
	if (!exl_text_starts(s, n, at, "</function>"))
		goto out;
	exl_jw_obj_end(&w);
	if (exl_jw_failed(&w))
		goto oom;
	/* a parameter given twice makes no object */
	struct exl_json_doc *chk = exl_json_parse(w.buf, w.len, NULL, 0);
	if (!chk)
		goto out;
	exl_json_free(chk);
	rc = add_call(p, s + i, name_end - i, w.buf, w.len, NULL, 0);
	*next = at + strlen("</function>");
	goto out;
oom:
	rc = -1;
out:
	exl_jw_free(&w);
	return rc;
}

/* Hermes: <tool_call> JSON or XML </tool_call>, repeated, from the first
 * tag at i.  The closing tag of the last may be missing (the reply ended
 * on the end-of-turn token).  Text after a closed call is not a call:
 * where it starts in *trail (else n). */
static int parse_hermes(struct exl_tool_parse *p, const char *s, size_t n, size_t i, size_t *trail)
{
	*trail = n;
	while (i < n) {
		size_t at = exl_text_skip_ws(s, n, i + strlen(HERMES_OPEN)), end;
		int rc;

		if (at < n && (s[at] == '{' || s[at] == '[')) {
			end = json_end(s, n, at);
			if (!end)
				return 1;
			rc = calls_of_json(p, s, at, end);
		} else if (exl_text_starts(s, n, at, "<function=")) {
			rc = call_of_xml(p, s, n, at, &end);
		} else {
			return 1;
		}
		if (rc)
			return rc;
		i = exl_text_skip_ws(s, n, end);
		bool closed = exl_text_starts(s, n, i, HERMES_CLOSE);
		if (closed)
			i = exl_text_skip_ws(s, n, i + strlen(HERMES_CLOSE));
		if (i < n && !exl_text_starts(s, n, i, HERMES_OPEN)) {
			if (!closed)
				return 1;
			*trail = i;
			return 0;
		}
	}
	return 0;
}

/* Mistral after [TOOL_CALLS] at i: a JSON list of calls, or
 * N[CALL_ID]id[ARGS]{...}, each of which may follow its own marker. */
static int parse_mistral(struct exl_tool_parse *p, const char *s, size_t n, size_t i)
{
	while (i < n) {
		size_t at = exl_text_skip_ws(s, n, i + strlen(MISTRAL_OPEN)), end;
		int rc;

		if (at < n && (s[at] == '[' || s[at] == '{')) {
			end = json_end(s, n, at);
			if (!end)
				return 1;
			rc = calls_of_json(p, s, at, end);
		} else {
			size_t args = exl_text_find(s, n, at, MISTRAL_ARGS);
			size_t idm = exl_text_find(s, n, at, MISTRAL_ID);
			size_t name_end = idm < args ? idm : args, id = 0, id_len = 0;

			if (args >= n || name_end == at)
				return 1;
			if (idm < args) {
				id = idm + strlen(MISTRAL_ID);
				id_len = args - id;
			}
			size_t j = exl_text_skip_ws(s, n, args + strlen(MISTRAL_ARGS));
			if (j >= n || s[j] != '{' || !(end = json_end(s, n, j)))
				return 1;
			struct exl_json_doc *d = exl_json_parse(s + j, end - j, NULL, 0);
			const struct exl_json *o = d ? exl_json_root(d) : NULL;
			struct exl_jw w;
			exl_jw_init(&w);
			rc = o ? write_args(&w, o) : 1;
			exl_json_free(d);
			size_t ne = name_end;
			while (ne > at && (s[ne - 1] == ' ' || s[ne - 1] == '\n'))
				ne--;
			if (!rc)
				rc = exl_jw_failed(&w) ? -1 :
				     add_call(p, s + at, ne - at, w.buf, w.len, idm < args ? s + id : NULL,
					      id_len);
			exl_jw_free(&w);
		}
		if (rc)
			return rc;
		i = exl_text_skip_ws(s, n, end);
		if (i < n && !exl_text_starts(s, n, i, MISTRAL_OPEN))
			return 1;
	}
	return 0;
}

/* Granite / Phi-4-mini: <|tool_call|> then a JSON list (or one call),
 * optionally closed by <|/tool_call|>. */
static int parse_granite(struct exl_tool_parse *p, const char *s, size_t n, size_t i)
{
	size_t at = exl_text_skip_ws(s, n, i + strlen(GRANITE_OPEN)), end;
	int rc;

	if (at >= n || (s[at] != '[' && s[at] != '{') || !(end = json_end(s, n, at)))
		return 1;
	rc = calls_of_json(p, s, at, end);
	if (rc)
		return rc;
	i = exl_text_skip_ws(s, n, end);
	if (exl_text_starts(s, n, i, GRANITE_CLOSE))
		i = exl_text_skip_ws(s, n, i + strlen(GRANITE_CLOSE));
	return i < n ? 1 : 0;
}

/* Llama 3: from i, call objects separated by ';' (or whitespace), and
 * nothing else. */
static int parse_llama3(struct exl_tool_parse *p, const char *s, size_t n, size_t i)
{
	if (exl_text_starts(s, n, i, PYTHON_TAG))
		i = exl_text_skip_ws(s, n, i + strlen(PYTHON_TAG));
	do {
		size_t end;
		int rc;

		if (i >= n || s[i] != '{' || !(end = json_end(s, n, i)))
			return 1;
		rc = calls_of_json(p, s, i, end);
		if (rc)
			return rc;
		i = exl_text_skip_ws(s, n, end);
		if (i < n && s[i] == ';')
			i = exl_text_skip_ws(s, n, i + 1);
	} while (i < n);
	return 0;
}

/* Harmony, from the content's start (reasoning.h): messages, each after
 * <|start|>assistant but the first, which may also be a body without its
 * header (the reasoning split left the header out).  The content is the
 * final and commentary bodies joined by blank lines; a message to
 * functions.N is a call; analysis is dropped.  The content goes to out
 * (room for n bytes: each blank line between bodies stands for markers
 * longer than it).  1 when the text is not that. */
static int parse_harmony(struct exl_tool_parse *p, const char *s, size_t n, char *out,
			 size_t *out_len)
{
	size_t i = 0;
	bool first = true, any = false;

	while (i < n) {
		struct exl_harmony_head h;
		int k = exl_harmony_head(s, n, i, &h);
		size_t b, e, mark;

		if (k < 1 && !first)
			return 1;
		b = k == 1 ? h.body : i;
		e = exl_harmony_body_end(s, n, b, &mark);
		if (k == 1 && h.to_len) {
			static const char fn[] = "functions.";
			size_t fl = sizeof(fn) - 1;
			size_t a = exl_text_skip_ws(s, n, b), ae = e;
			struct exl_json_doc *d;
			struct exl_jw w;
			int rc;

			if (h.to_len <= fl || memcmp(s + h.to, fn, fl))
				return 1;
			while (ae > a && exl_text_is_ws(s[ae - 1]))
				ae--;
			d = exl_json_parse(s + a, ae - a, NULL, 0);
			if (!d)
				return 1;
			exl_jw_init(&w);
			rc = write_args(&w, exl_json_root(d));
			exl_json_free(d);
			if (!rc)
				rc = exl_jw_failed(&w) ? -1 :
				     add_call(p, s + h.to + fl, h.to_len - fl, w.buf, w.len, NULL, 0);
			exl_jw_free(&w);
			if (rc)
				return rc;
		} else if (k < 1 || !exl_harmony_channel_is(s, &h, "analysis")) {
			/* a body for the user: final, or commentary (a preamble);
			 * one without its header starts the text, as it is */
			size_t a = k == 1 ? exl_text_skip_ws(s, n, b) : b, ce = e;

			if (mark)
				while (ce > a && exl_text_is_ws(s[ce - 1]))
					ce--;
			if (ce > a) {
				if (any) {
					memcpy(out + *out_len, "\n\n", 2);
					*out_len += 2;
				}
				memcpy(out + *out_len, s + a, ce - a);
				*out_len += ce - a;
				any = true;
			}
		}
		first = false;
		if (e == n)
			break;
		i = exl_text_skip_ws(s, n, e + mark);
		if (i == n)
			break;
		if (!exl_text_starts(s, n, i, EXL_HARMONY_START))
			return 1;
		i += strlen(EXL_HARMONY_START);
	}
	return 0;
}

/* Where the calls start in s, or n. */
static size_t calls_start(enum exl_tool_fmt f, const char *s, size_t n)
{
	size_t i;

	switch (f) {
	case EXL_TOOL_FMT_HERMES: return exl_text_find(s, n, 0, HERMES_OPEN);
	case EXL_TOOL_FMT_MISTRAL: return exl_text_find(s, n, 0, MISTRAL_OPEN);
	case EXL_TOOL_FMT_GRANITE: return exl_text_find(s, n, 0, GRANITE_OPEN);
	case EXL_TOOL_FMT_LLAMA3:
		i = exl_text_skip_ws(s, n, 0);
		return i < n && (s[i] == '{' || exl_text_starts(s, n, i, PYTHON_TAG)) ? i : n;
	default: return n;
	}
}

static void drop_calls(struct exl_tool_parse *p)
{
	for (int i = 0; i < p->n_calls; i++) {
		free(p->calls[i].name);
		free(p->calls[i].args);
		free(p->calls[i].id);
	}
	free(p->calls);
	p->calls = NULL;
	p->n_calls = 0;
}

int exl_tool_parse(enum exl_tool_fmt f, bool forced, const char *text, size_t len,
		   struct exl_tool_parse *p)
{
	size_t at = forced ? 0 : calls_start(f, text, len);
	size_t keep = len, trail = len;
	int rc = 1;

	memset(p, 0, sizeof(*p));
	if (f == EXL_TOOL_FMT_HARMONY && !forced) {
		p->content = malloc(len + 1);
		if (!p->content)
			return -1;
		rc = parse_harmony(p, text, len, p->content, &p->content_len);
		if (rc < 0)
			return -1;
		if (rc > 0) {
			/* not harmony's shape: all of it, as it is */
			drop_calls(p);
			memcpy(p->content, text, len);
			p->content_len = len;
		}
		p->content[p->content_len] = 0;
		return 0;
	}
	if (forced) {
		/* the prompt opened the call: the reply is its object */
		size_t i = exl_text_skip_ws(text, len, 0), end;
		if (i < len && text[i] == '{' && (end = json_end(text, len, i)))
			rc = calls_of_json(p, text, i, end);
	} else if (at < len) {
		switch (f) {
		case EXL_TOOL_FMT_HERMES: rc = parse_hermes(p, text, len, at, &trail); break;
		case EXL_TOOL_FMT_MISTRAL: rc = parse_mistral(p, text, len, at); break;
		case EXL_TOOL_FMT_GRANITE: rc = parse_granite(p, text, len, at); break;
		case EXL_TOOL_FMT_LLAMA3: rc = parse_llama3(p, text, len, at); break;
		default: break;
		}
	}
	if (rc < 0)
		return -1;
	if (rc > 0) {
		drop_calls(p);
		trail = len;
	} else {
		/* the content is what came before the calls */
		keep = forced ? 0 : at;
		while (keep && (text[keep - 1] == ' ' || text[keep - 1] == '\n'))
			keep--;
	}
	/* and what came after them, after a blank line */
	size_t tail = len - trail;
	while (tail && (text[trail + tail - 1] == ' ' || text[trail + tail - 1] == '\n'))
		tail--;
	size_t sep = tail && keep ? 2 : 0;
	p->content = malloc(keep + sep + tail + 1);
	if (!p->content)
		return -1;
	memcpy(p->content, text, keep);
	memcpy(p->content + keep, "\n\n", sep);
	memcpy(p->content + keep + sep, text + trail, tail);
	p->content[keep + sep + tail] = 0;
	p->content_len = keep + sep + tail;
	return 0;
}

void exl_tool_parse_free(struct exl_tool_parse *p)
{
	drop_calls(p);
	free(p->content);
	p->content = NULL;
	p->content_len = 0;
}

size_t exl_tool_stream_safe(enum exl_tool_fmt f, const char *s, size_t n, bool *started)
{
	const char *marker;
	size_t at;

	*started = false;
	switch (f) {
	case EXL_TOOL_FMT_HERMES: marker = HERMES_OPEN; break;
	case EXL_TOOL_FMT_MISTRAL: marker = MISTRAL_OPEN; break;
	case EXL_TOOL_FMT_GRANITE: marker = GRANITE_OPEN; break;
	case EXL_TOOL_FMT_HARMONY: {
		/* from the content's start (reasoning.h): a header there is a
		 * call's (or may become one); in a body, what may follow its
		 * end is held: another message, perhaps a call */
		struct exl_harmony_head h;
		size_t mark;

		int k = exl_harmony_head(s, n, 0, &h);
		if (k >= 0) {
			*started = k == 1;
			return 0;
		}
		at = exl_harmony_body_end(s, n, 0, &mark);
		if (at < n)
			*started = true;
		else
			at = n - exl_harmony_partial_tail(s, n);
		while (at && exl_text_is_ws(s[at - 1]))
			at--;
		return at;
	}
	case EXL_TOOL_FMT_LLAMA3: {
		/* a call is the whole reply: held until its first character
		 * says whether it is one */
		size_t i = exl_text_skip_ws(s, n, 0);
		size_t tag = strlen(PYTHON_TAG);
		if (i == n)
			return 0;
		if (s[i] == '{' || (n - i >= tag && !memcmp(s + i, PYTHON_TAG, tag))) {
			*started = true;
			return 0;
		}
		return n - i < tag && !memcmp(s + i, PYTHON_TAG, n - i) ? 0 : n;
	}
	default:
		return n;
	}
	at = exl_text_find(s, n, 0, marker);
	if (at < n)
		*started = true;
	else
		at = n - exl_text_partial_tail(s, n, marker);
	/* whitespace before a call is not content (exl_tool_parse drops it) */
	while (at && (s[at - 1] == ' ' || s[at - 1] == '\n'))
		at--;
	return at;
}
