/* exl_chat_template_render: the context's JSON and the template in, the
 * prompt out; one arena for the whole render. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/chat_template.h"
#include "common/jinja.h"
#include "common/json_parse.h"

/* ChatML, with content given as a string or as a list of text parts (the
 * other parts have no text to show). */
const char exl_chat_template_chatml[] =
	"{%- for message in messages -%}\n"
	"{{- '<|im_start|>' + message['role'] + '\\n' -}}\n"
	"{%- if message['content'] is string -%}\n"
	"{{- message['content'] -}}\n"
	"{%- elif message['content'] is iterable -%}\n"
	"{%- for part in message['content'] -%}\n"
	"{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}\n"
	"{%- endfor -%}\n"
	"{%- endif -%}\n"
	"{{- '<|im_end|>\\n' -}}\n"
	"{%- endfor -%}\n"
	"{%- if add_generation_prompt -%}\n"
	"{{- '<|im_start|>assistant\\n' -}}\n"
	"{%- endif -%}\n";

/* EXLD_TEMPLATE_NOW=YYYY-MM-DD[THH:MM]: strftime_now's time, for tests
 * that compare renders of templates that print the date. */
static int fixed_now(struct jctx *c)
{
	const char *s = getenv("EXLD_TEMPLATE_NOW");
	int y, mo, d, h = 0, mi = 0, n = 0;

	if (!s || !*s)
		return 0;
	if (sscanf(s, "%4d-%2d-%2d%n", &y, &mo, &d, &n) != 3 ||
	    (s[n] && (sscanf(s + n, "T%2d:%2d", &h, &mi) != 2 || strlen(s + n) != 6)) ||
	    mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || h < 0 || mi < 0)
		return exl_jfail(c, 0,
				 "EXLD_TEMPLATE_NOW: expected YYYY-MM-DD or YYYY-MM-DDTHH:MM");
	memset(&c->now, 0, sizeof(c->now));
	c->now.tm_year = y - 1900;
	c->now.tm_mon = mo - 1;
	c->now.tm_mday = d;
	c->now.tm_hour = h;
	c->now.tm_min = mi;
	c->have_now = true;
	return 0;
}

static int declare(struct jctx *c, struct jenv *g, const char *name, size_t n, struct jv v)
{
	/* as the reference: a context key may not shadow a global */
	if (exl_jobj_get(&g->vars, name, n) || (n == 9 && !memcmp(name, "namespace", 9)))
		return exl_jfail(c, 0, "context: variable already declared: %.*s", (int)n, name);
	return exl_jenv_set(c, g, name, n, v);
}

static int globals(struct jctx *c, struct jenv *g, const struct exl_json *root)
{
	static const struct {
		const char *name;
		int value;      /* 0 false, 1 true, 2 none */
	} consts[] = {
		{ "false", 0 }, { "true", 1 }, { "none", 2 },
		{ "True", 1 }, { "False", 0 }, { "None", 2 },
	};
	struct jv ctx;

	for (size_t i = 0; i < sizeof(consts) / sizeof(consts[0]); i++) {
		struct jv v = consts[i].value == 2 ? jv_null() : jv_bool(consts[i].value);

		if (exl_jenv_set(c, g, consts[i].name, strlen(consts[i].name), v))
			return -1;
	}
	for (int id = 0; id < JG_COUNT; id++) {
		struct jfn *f;

		if (id == JG_NAMESPACE)
			continue;
		f = exl_jalloc(c, sizeof(*f));
		if (!f)
			return -1;
		f->kind = JF_GLOBAL;
		f->id = id;
		if (exl_jenv_set(c, g, exl_jinja_global_name(id), strlen(exl_jinja_global_name(id)),
				 jv_fn(f)))
			return -1;
	}
	if (exl_jv_from_json(c, root, &ctx, 0))
		return -1;
	for (size_t i = 0; i < ctx.u.o->n; i++)
		if (declare(c, g, ctx.u.o->keys[i].p, ctx.u.o->keys[i].n, ctx.u.o->vals[i]))
			return -1;
	return 0;
}

int exl_chat_template_render(const char *tmpl, size_t tmpl_len, const char *context_json,
			     size_t context_len, char **out, size_t *out_len,
			     char *err, size_t errlen)
{
	struct jctx c = { 0 };
	struct exl_json_doc *doc = NULL;
	const struct exl_json *root;
	struct jtoken *toks;
	struct jbuf b = { .output = true };
	struct jlist prog;
	struct jenv *g;
	size_t ntoks;
	char jerr[256];
	char *res = NULL;

	*out = NULL;
	*out_len = 0;
	if (errlen)
		err[0] = 0;
	c.err = err;
	c.errlen = errlen;
	if (fixed_now(&c))
		return -1;
	doc = exl_json_parse(context_json, context_len, jerr, sizeof(jerr));
	if (!doc) {
		exl_jfail(&c, 0, "context: %s", jerr);
		return -1;
	}
	root = exl_json_root(doc);
	if (root->type != EXL_JSON_OBJECT) {
		exl_jfail(&c, 0, "context: expected a JSON object, got %s",
			  exl_json_type_name(root->type));
		goto done;
	}
	if (exl_jinja_lex(&c, tmpl, tmpl_len, &toks, &ntoks) ||
	    exl_jinja_parse(&c, toks, ntoks, &prog))
		goto done;
	g = exl_jenv_new(&c, NULL);
	if (!g || globals(&c, g, root) || exl_jinja_run(&c, &prog, g, &b))
		goto done;
	res = malloc(b.n + 1);
	if (!res) {
		exl_jfail(&c, 0, "out of memory for the output");
		goto done;
	}
	if (b.n)
		memcpy(res, b.p, b.n);
	*out_len = exl_jt_fix_surrogates(res, b.n);
	res[*out_len] = 0;
	*out = res;
done:
	exl_jarena_free(&c);
	exl_json_free(doc);
	return res ? 0 : -1;
}
