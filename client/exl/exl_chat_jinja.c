/* exl chat's Jinja rendering (see exl_chat_jinja.h): the context as JSON,
 * then common/chat_template.c, the renderer the daemon uses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/exl/exl_chat_jinja.h"
#include "common/chat_template.h"
#include "common/json_string.h"

static void json_cstr(FILE *f, const char *s)
{
	json_string(f, s ? s : "", s ? strlen(s) : 0);
}

int chat_jinja_render(const char *tmpl, const char *bos, const char *eos,
		      const struct chat_msg *msgs, size_t n, char **out, char *err, size_t errlen)
{
	char *ctx = NULL;
	size_t ctx_len = 0, out_len = 0;
	FILE *f = open_memstream(&ctx, &ctx_len);

	*out = NULL;
	if (!f) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	fputs("{\"messages\": [", f);
	for (size_t i = 0; i < n; i++) {
		fputs(i ? ", {\"role\": " : "{\"role\": ", f);
		json_cstr(f, msgs[i].role);
		fputs(", \"content\": ", f);
		json_cstr(f, msgs[i].content);
		fputc('}', f);
	}
	fputs("], \"add_generation_prompt\": true, \"bos_token\": ", f);
	json_cstr(f, bos);
	fputs(", \"eos_token\": ", f);
	json_cstr(f, eos);
	fputc('}', f);
	int failed = ferror(f);
	if (fclose(f) || failed) {
		free(ctx);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	int rc = exl_chat_template_render(tmpl, strlen(tmpl), ctx, ctx_len, out, &out_len, err,
					  errlen);
	free(ctx);
	return rc;
}
