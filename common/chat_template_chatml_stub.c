/* TEMPORARY STUB of common/chat_template.h, ChatML only, until the Jinja
 * renderer (branch jinja) is merged; the merge drops this file.
 *
 * It does not interpret Jinja: a template that is recognisably ChatML (it
 * writes <|im_start|>) is rendered as ChatML, and any other template is
 * refused with a message saying so, rather than formatting a conversation
 * in a format the model was not trained on. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/chat_template.h"
#include "common/json_parse.h"

const char exl_chat_template_chatml[] =
	"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
	"message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
	"{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

struct out {
	char *p;
	size_t len, cap;
	bool oom;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->oom)
		return;
	if (o->len + n + 1 > o->cap) {
		size_t cap = o->cap ? o->cap : 256;
		while (cap < o->len + n + 1)
			cap *= 2;
		char *p = realloc(o->p, cap);
		if (!p) {
			o->oom = true;
			return;
		}
		o->p = p;
		o->cap = cap;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
	o->p[o->len] = 0;
}

int exl_chat_template_render(const char *tmpl, size_t tmpl_len, const char *context_json,
			     size_t context_len, char **out, size_t *out_len,
			     char *err, size_t errlen)
{
	static const char im_start[] = "<|im_start|>";
	struct out o = { 0 };
	char jerr[256];
	int ret = -1;

	bool chatml = false;
	for (size_t i = 0; i + sizeof(im_start) - 1 <= tmpl_len && !chatml; i++)
		chatml = !memcmp(tmpl + i, im_start, sizeof(im_start) - 1);
	if (!chatml) {
		snprintf(err, errlen, "this build renders ChatML templates only (the Jinja "
			 "renderer is not merged yet), and the model's template is not ChatML");
		return -1;
	}
	struct exl_json_doc *d = exl_json_parse(context_json, context_len, jerr, sizeof(jerr));
	if (!d) {
		snprintf(err, errlen, "context: %s", jerr);
		return -1;
	}
	const struct exl_json *root = exl_json_root(d);
	const struct exl_json *msgs = root->type == EXL_JSON_OBJECT ?
				      exl_json_get(root, "messages") : NULL;
	const struct exl_json *gen = root->type == EXL_JSON_OBJECT ?
				     exl_json_get(root, "add_generation_prompt") : NULL;
	if (!msgs || msgs->type != EXL_JSON_ARRAY) {
		snprintf(err, errlen, "context: messages: wants an array");
		goto out;
	}
	for (size_t i = 0; i < msgs->n; i++) {
		const struct exl_json *m = msgs->v[i];
		const struct exl_json *role = m->type == EXL_JSON_OBJECT ?
					      exl_json_get(m, "role") : NULL;
		const struct exl_json *content = m->type == EXL_JSON_OBJECT ?
						 exl_json_get(m, "content") : NULL;
		if (!role || role->type != EXL_JSON_STRING) {
			snprintf(err, errlen, "context: messages[%zu]: role: wants a string", i);
			goto out;
		}
		put(&o, im_start, sizeof(im_start) - 1);
		put(&o, role->str, role->len);
		put(&o, "\n", 1);
		if (content && content->type == EXL_JSON_STRING)
			put(&o, content->str, content->len);
		put(&o, "<|im_end|>\n", 11);
	}
	if (gen && gen->type == EXL_JSON_BOOL && gen->b)
		put(&o, "<|im_start|>assistant\n", 22);
	put(&o, "", 0);
	if (o.oom) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	*out = o.p;
	*out_len = o.len;
	o.p = NULL;
	ret = 0;
out:
	free(o.p);
	exl_json_free(d);
	return ret;
}
