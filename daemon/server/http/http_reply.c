/* Pieces of OpenAI and Ollama replies (http_internal.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "daemon/core/model/model.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "daemon/server/http/http_internal.h"

const char *exl_http_finish_reason(const char *stop_reason)
{
	if (!strcmp(stop_reason, "max_new_tokens") || !strcmp(stop_reason, "max_context"))
		return "length";
	return "stop";
}

void exl_http_now_rfc3339(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;
	char day[40];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, len, "%s.%09ldZ", day, (long)ts.tv_nsec);
}

/* A token as text (its bytes, special tokens spelled out). */
static size_t token_text(const struct exl_model *m, int32_t id, char *buf, size_t len)
{
	size_t n = exl_token_bytes(exl_model_tokenizer(m), id, true, buf, len);

	return n < len ? n : len;
}

static double logprob(float p)
{
	return p > 0 ? log((double)p) : -9999.0;
}

static void write_bytes(struct exl_jw *w, const char *s, size_t n)
{
	exl_jw_arr(w);
	for (size_t i = 0; i < n; i++)
		exl_jw_int(w, (uint8_t)s[i]);
	exl_jw_arr_end(w);
}

/* chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}]} */
static void chat_logprobs(struct exl_jw *w, const struct exl_http_tokinfo *t,
			  const struct exl_model *m)
{
	char buf[256];

	exl_jw_obj(w);
	exl_jw_key(w, "content");
	exl_jw_arr(w);
	for (int i = 0; i < t->n; i++) {
		size_t n = token_text(m, t->ids[i], buf, sizeof(buf));

		exl_jw_obj(w);
		exl_jw_key(w, "token");
		exl_jw_str(w, buf, n);
		exl_jw_key(w, "logprob");
		exl_jw_num(w, logprob(t->probs ? t->probs[i] : 0));
		exl_jw_key(w, "bytes");
		write_bytes(w, buf, n);
		exl_jw_key(w, "top_logprobs");
		exl_jw_arr(w);
		for (int k = 0; k < t->k && t->top_ids; k++) {
			int32_t id = t->top_ids[(size_t)i * t->k + k];

			n = token_text(m, id, buf, sizeof(buf));
			exl_jw_obj(w);
			exl_jw_key(w, "token");
			exl_jw_str(w, buf, n);
			exl_jw_key(w, "logprob");
			exl_jw_num(w, logprob(t->top_probs[(size_t)i * t->k + k]));
			exl_jw_key(w, "bytes");
			write_bytes(w, buf, n);
			exl_jw_obj_end(w);
		}
		exl_jw_arr_end(w);
		exl_jw_obj_end(w);
	}
	exl_jw_arr_end(w);
	exl_jw_obj_end(w);
}

/* completions: {tokens, token_logprobs, top_logprobs: [{tok: lp}], text_offset} */
static void completion_logprobs(struct exl_jw *w, const struct exl_http_tokinfo *t,
				const struct exl_model *m)
{
	char buf[256];
	size_t off = 0;

	exl_jw_obj(w);
	exl_jw_key(w, "tokens");
	exl_jw_arr(w);
	for (int i = 0; i < t->n; i++) {
		size_t n = token_text(m, t->ids[i], buf, sizeof(buf));
		exl_jw_str(w, buf, n);
	}
	exl_jw_arr_end(w);
	exl_jw_key(w, "token_logprobs");
	exl_jw_arr(w);
	for (int i = 0; i < t->n; i++)
		exl_jw_num(w, logprob(t->probs ? t->probs[i] : 0));
	exl_jw_arr_end(w);
	exl_jw_key(w, "top_logprobs");
	exl_jw_arr(w);
	for (int i = 0; i < t->n; i++) {
		exl_jw_obj(w);
		for (int k = 0; k < t->k && t->top_ids; k++) {
			size_t n = token_text(m, t->top_ids[(size_t)i * t->k + k], buf, sizeof(buf) - 1);

			buf[n] = 0;
			/* a key must be a C string here; a token with a NUL byte is cut */
			exl_jw_key(w, buf);
			exl_jw_num(w, logprob(t->top_probs[(size_t)i * t->k + k]));
		}
		exl_jw_obj_end(w);
	}
	exl_jw_arr_end(w);
	exl_jw_key(w, "text_offset");
	exl_jw_arr(w);
	for (int i = 0; i < t->n; i++) {
		exl_jw_uint(w, off);
		off += token_text(m, t->ids[i], buf, sizeof(buf));
	}
	exl_jw_arr_end(w);
	exl_jw_obj_end(w);
}

void exl_http_write_logprobs(struct exl_jw *w, bool chat, const struct exl_http_tokinfo *t,
			     const struct exl_model *m)
{
	if (chat)
		chat_logprobs(w, t, m);
	else
		completion_logprobs(w, t, m);
}
