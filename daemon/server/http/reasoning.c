/* A reply's <think> block (reasoning.h). */
#include "daemon/server/http/reasoning.h"

#include <string.h>

#include "daemon/server/http/text_scan.h"

#define OPEN "<think>"
#define CLOSE "</think>"

bool exl_reasoning_template(const char *t, size_t n)
{
	return exl_text_find(t, n, 0, OPEN) < n;
}

bool exl_reasoning_prompt_open(const char *p, size_t n)
{
	while (n && exl_text_is_ws(p[n - 1]))
		n--;
	return n >= strlen(OPEN) && !memcmp(p + n - strlen(OPEN), OPEN, strlen(OPEN));
}

void exl_reasoning_split(const char *s, size_t n, bool open, bool final, size_t from,
			 struct exl_reasoning *r)
{
	size_t i = 0, end;

	if (!open) {
		while (i < n && exl_text_is_ws(s[i]))
			i++;
		size_t k = strlen(OPEN);
		if (n - i >= k && !memcmp(s + i, OPEN, k)) {
			i += k;
		} else if (!final && n - i < k && !memcmp(s + i, OPEN, n - i)) {
			/* all of it may still be the opening tag */
			r->r_start = r->r_end = 0;
			r->c_start = n;
			return;
		} else {
			r->r_start = r->r_end = r->c_start = 0;
			return;
		}
	}
	while (i < n && exl_text_is_ws(s[i]))
		i++;
	r->r_start = i;
	size_t close = exl_text_find(s, n, from > i ? from : i, CLOSE);
	if (close < n) {
		end = close;
		r->c_start = close + strlen(CLOSE);
		while (r->c_start < n && exl_text_is_ws(s[r->c_start]))
			r->c_start++;
	} else {
		end = final ? n : n - exl_text_partial_tail(s, n, CLOSE);
		r->c_start = n;
	}
	while (end > i && exl_text_is_ws(s[end - 1]))
		end--;
	r->r_end = end;
}
