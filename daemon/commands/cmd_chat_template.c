/* exld chat-template: a model's chat template rendered over a conversation.
 *
 *   exld chat-template --model FILE [--template FILE]
 *	reads {"messages": [...], "add_generation_prompt": true, "tools": [...],
 *	...} on stdin and prints the prompt the template makes of it (nothing
 *	added: no newline).  The template is the GGUF's tokenizer.chat_template,
 *	or ChatML when it has none (said on stderr), or --template's file;
 *	bos_token and eos_token are the vocabulary's, unless the input sets
 *	them.  With --template, --model may be left out.  A template that
 *	raises (raise_exception) or fails exits 1 with its message.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/chat_template.h"
#include "common/read_all.h"
#include "common/json_parse.h"
#include "daemon/commands/commands.h"
#include "daemon/core/gguf/gguf.h"

#define INPUT_MAX ((size_t)EXL_JSON_MAX_TEXT)

struct ct_opts {
	const char *model;
	const char *tmpl_file;
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: exld chat-template --model FILE [--template FILE]\n"
		"  reads {\"messages\": [...], \"add_generation_prompt\": true, \"tools\": [...]}\n"
		"  on stdin, prints the model's chat template rendered over it\n"
		"  --template FILE  render this template instead of the model's\n"
		"                   (then --model is optional: it gives bos_token and eos_token)\n");
}

/* 0 to run, 1 when help was printed, -1 on a usage error (printed). */
static int parse_args(int argc, char **argv, struct ct_opts *o)
{
	memset(o, 0, sizeof(*o));
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 1;
		} else if ((!strcmp(a, "--model") || !strcmp(a, "-m") || !strcmp(a, "--template")) &&
			   i + 1 < argc) {
			if (!strcmp(a, "--template"))
				o->tmpl_file = argv[++i];
			else
				o->model = argv[++i];
		} else {
			fprintf(stderr, "exld chat-template: %s '%s'\n",
				(!strcmp(a, "--model") || !strcmp(a, "-m") || !strcmp(a, "--template")) ?
				"a file is needed after" : "unknown argument", a);
			usage(stderr);
			return -1;
		}
	}
	if (!o->model && !o->tmpl_file) {
		fprintf(stderr, "exld chat-template: --model FILE or --template FILE is required\n");
		usage(stderr);
		return -1;
	}
	return 0;
}

/* The vocabulary entry of the token the id key names, or NULL. */
static const struct gguf_str *special_token(const struct gguf_file *f, const char *key)
{
	const struct gguf_array *toks = exl_gguf_get_arr(f, "tokenizer.ggml.tokens");
	uint32_t id;

	if (!toks || toks->elem_type != GGUF_VT_STRING || !exl_gguf_get_u32(f, key, &id) ||
	    id >= toks->count)
		return NULL;
	return &toks->strs[id];
}

struct membuf {
	char *p;
	size_t n, cap;
	bool oom;
};

static void mem_put(void *u, const char *s, size_t n)
{
	struct membuf *m = u;

	if (m->oom)
		return;
	if (m->cap - m->n < n + 1) {
		size_t cap = m->cap ? m->cap : 4096;
		char *np;

		while (cap - m->n < n + 1)
			cap *= 2;
		np = realloc(m->p, cap);
		if (!np) {
			m->oom = true;
			return;
		}
		m->p = np;
		m->cap = cap;
	}
	memcpy(m->p + m->n, s, n);
	m->n += n;
}

/* The input with bos_token and eos_token added where it has none.  The
 * result is malloc'ed; NULL with a message. */
static char *with_tokens(const char *in, size_t len, const struct gguf_file *f, size_t *out_len,
			 char *err, size_t errlen)
{
	static const char *const keys[2] = { "bos_token", "eos_token" };
	static const char *const ids[2] = { "tokenizer.ggml.bos_token_id",
					    "tokenizer.ggml.eos_token_id" };
	struct exl_json_doc *doc = exl_json_parse(in, len, err, errlen);
	const struct exl_json *root;
	struct exl_json *obj;
	struct membuf m = { 0 };
	size_t extra = 0, at = 0;

	if (!doc)
		return NULL;
	root = exl_json_root(doc);
	if (root->type != EXL_JSON_OBJECT) {
		snprintf(err, errlen, "the input must be a JSON object");
		exl_json_free(doc);
		return NULL;
	}
	for (int k = 0; k < 2; k++)
		if (f && !exl_json_get(root, keys[k]) && special_token(f, ids[k]))
			extra++;
	obj = exl_json_new(doc, EXL_JSON_OBJECT, root->n + extra);
	if (!obj)
		goto oom;
	for (int k = 0; k < 2; k++) {
		const struct gguf_str *t;
		struct exl_json *s;

		if (!f || exl_json_get(root, keys[k]) || !(t = special_token(f, ids[k])))
			continue;
		s = exl_json_new(doc, EXL_JSON_STRING, 0);
		if (!s)
			goto oom;
		s->str = t->ptr;
		s->len = (size_t)t->len;
		obj->keys[at] = keys[k];
		obj->key_lens[at] = strlen(keys[k]);
		obj->v[at++] = s;
	}
	for (size_t i = 0; i < root->n; i++) {
		obj->keys[at] = root->keys[i];
		obj->key_lens[at] = root->key_lens[i];
		obj->v[at++] = root->v[i];
	}
	exl_json_write(obj, mem_put, &m);
	exl_json_free(doc);
	if (m.oom || !m.p) {
		free(m.p);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	*out_len = m.n;
	return m.p;
oom:
	exl_json_free(doc);
	snprintf(err, errlen, "out of memory");
	return NULL;
}

int exl_cmd_chat_template(int argc, char **argv)
{
	struct ct_opts o;
	struct gguf_file *f = NULL;
	char err[1024];
	char *input = NULL, *ctx = NULL, *tmpl_buf = NULL, *out = NULL;
	const char *tmpl = NULL;
	size_t input_len, ctx_len, tmpl_len = 0, out_len;
	int rc = parse_args(argc, argv, &o), status = 1;

	if (rc)
		return rc > 0 ? 0 : 2;
	if (o.model && !(f = exl_gguf_open(o.model, err, sizeof(err)))) {
		fprintf(stderr, "exld chat-template: %s\n", err);
		return 1;
	}
	if (o.tmpl_file) {
		tmpl_buf = exl_read_file(o.tmpl_file, INPUT_MAX, &tmpl_len, err, sizeof(err));
		if (!tmpl_buf)
			goto fail;
		tmpl = tmpl_buf;
	} else {
		const struct gguf_kv *kv = exl_gguf_find_kv(f, "tokenizer.chat_template");

		if (kv && kv->val.type == GGUF_VT_STRING) {
			tmpl = kv->val.str.ptr;
			tmpl_len = (size_t)kv->val.str.len;
		} else {
			fprintf(stderr, "exld chat-template: %s has no tokenizer.chat_template; "
				"using ChatML\n", o.model);
			tmpl = exl_chat_template_chatml;
			tmpl_len = strlen(exl_chat_template_chatml);
		}
	}
	input = exl_read_all(stdin, "stdin", INPUT_MAX, &input_len, err, sizeof(err));
	if (!input)
		goto fail;
	ctx = with_tokens(input, input_len, f, &ctx_len, err, sizeof(err));
	if (!ctx)
		goto fail;
	if (exl_chat_template_render(tmpl, tmpl_len, ctx, ctx_len, &out, &out_len, err,
				     sizeof(err)))
		goto fail;
	if (fwrite(out, 1, out_len, stdout) != out_len || fflush(stdout)) {
		snprintf(err, sizeof(err), "cannot write the output: %s", strerror(errno));
		goto fail;
	}
	status = 0;
	goto done;
fail:
	fprintf(stderr, "exld chat-template: %s\n", err);
done:
	free(out);
	free(ctx);
	free(input);
	free(tmpl_buf);
	exl_gguf_close(f);
	return status;
}
