/* Byte-string scans of the reply readers (text_scan.h). */
#include "daemon/server/http/text_scan.h"

#include <string.h>

size_t exl_text_find(const char *s, size_t n, size_t from, const char *what)
{
	size_t k = strlen(what);

	for (size_t i = from; k <= n && i <= n - k; i++)
		if (s[i] == what[0] && !memcmp(s + i, what, k))
			return i;
	return n;
}

bool exl_text_starts(const char *s, size_t n, size_t at, const char *what)
{
	size_t k = strlen(what);

	return at <= n && n - at >= k && !memcmp(s + at, what, k);
}

bool exl_text_is_ws(char c)
{
	return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

size_t exl_text_skip_ws(const char *s, size_t n, size_t i)
{
	while (i < n && exl_text_is_ws(s[i]))
		i++;
	return i;
}

size_t exl_text_partial_tail(const char *s, size_t n, const char *what)
{
	for (size_t t = strlen(what) - 1; t > 0; t--)
		if (t <= n && !memcmp(s + n - t, what, t))
			return t;
	return 0;
}

/* ---- gpt-oss's harmony format ---- */

/* A header longer than this is not one (a recipient, a channel and a
 * content type are a few dozen bytes). */
#define HARMONY_HEAD_MAX 512

static const char *const harmony_ends[] = { "<|end|>", "<|call|>", "<|return|>" };

static bool head_word_char(char c)
{
	return !exl_text_is_ws(c) && c != '<';
}

int exl_harmony_head(const char *s, size_t n, size_t at, struct exl_harmony_head *h)
{
	static const char *const marks[] = { EXL_HARMONY_CHANNEL, "<|constrain|>",
					     EXL_HARMONY_MESSAGE };
	bool any = false;   /* a channel or a recipient seen: it is a header */
	size_t i = at;

	memset(h, 0, sizeof(*h));
	while (i < n) {
		if (i - at > HARMONY_HEAD_MAX)
			return -1;
		if (exl_text_is_ws(s[i])) {
			i++;
			continue;
		}
		if (s[i] == '<') {
			int k = 0;

			while (k < 3 && !exl_text_starts(s, n, i, marks[k]))
				k++;
			if (k == 3) {
				/* a marker cut short by the end: only <|channel|>
				 * may open a header */
				for (k = 0; k < 3; k++) {
					size_t l = strlen(marks[k]);
					if (n - i < l && !memcmp(s + i, marks[k], n - i))
						return any || k == 0 ? 0 : -1;
				}
				return -1;
			}
			if (k > 0 && !any)
				return -1;
			i += strlen(marks[k]);
			if (k == 2) {
				h->body = i;
				return 1;
			}
			size_t w = i;
			while (i < n && head_word_char(s[i]))
				i++;
			if (k == 0) {
				h->channel = w;
				h->channel_len = i - w;
				any = true;
			}
			continue;
		}
		/* a word: the recipient (to=...), or a content type (json) */
		size_t w = i;
		while (i < n && head_word_char(s[i]))
			i++;
		bool to = i - w >= 3 && !memcmp(s + w, "to=", 3);
		if (i == n)
			/* the word may go on */
			return any || to || !memcmp(s + w, "to=", n - w < 3 ? n - w : 3) ? 0 : -1;
		if (to) {
			h->to = w + 3;
			h->to_len = i - w - 3;
			/* a stray "to=assistant" is no call */
			if (h->to_len == 9 && !memcmp(s + h->to, "assistant", 9))
				h->to_len = 0;
			any = true;
		} else if (!any) {
			return -1;
		}
	}
	return 0;
}

size_t exl_harmony_body_end(const char *s, size_t n, size_t from, size_t *mark)
{
	for (size_t i = from; i + 1 < n; i++) {
		const char *p = memchr(s + i, '<', n - i - 1);

		if (!p)
			break;
		i = (size_t)(p - s);
		if (s[i + 1] != '|')
			continue;
		for (int k = 0; k < 3; k++) {
			if (exl_text_starts(s, n, i, harmony_ends[k])) {
				*mark = strlen(harmony_ends[k]);
				return i;
			}
		}
	}
	*mark = 0;
	return n;
}

size_t exl_harmony_partial_tail(const char *s, size_t n)
{
	size_t best = 0;

	for (int k = 0; k < 3; k++) {
		size_t t = exl_text_partial_tail(s, n, harmony_ends[k]);
		if (t > best)
			best = t;
	}
	return best;
}

bool exl_harmony_channel_is(const char *s, const struct exl_harmony_head *h, const char *name)
{
	return h->channel_len == strlen(name) && !memcmp(s + h->channel, name, h->channel_len);
}
