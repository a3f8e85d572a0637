/* A reply's reasoning block, <think> or [THINK] (reasoning.h). */
#include "daemon/server/http/reasoning.h"

#include <string.h>

#include "daemon/server/http/text_scan.h"

static const char *const open_tag[] = { "", "<think>", "[THINK]" };
static const char *const close_tag[] = { "", "</think>", "[/THINK]" };

enum exl_reasoning_tags exl_reasoning_template(const char *t, size_t n)
{
	if (exl_text_find(t, n, 0, open_tag[EXL_REASONING_THINK]) < n)
		return EXL_REASONING_THINK;
	if (exl_text_find(t, n, 0, open_tag[EXL_REASONING_MISTRAL]) < n)
		return EXL_REASONING_MISTRAL;
	return EXL_REASONING_NONE;
}

bool exl_reasoning_needs_special(enum exl_reasoning_tags tags)
{
	return tags == EXL_REASONING_MISTRAL;
}

bool exl_reasoning_prompt_open(enum exl_reasoning_tags tags, const char *p, size_t n)
{
	const char *open = open_tag[tags];
	size_t k = strlen(open);

	if (tags == EXL_REASONING_NONE)
		return false;
	while (n && exl_text_is_ws(p[n - 1]))
		n--;
	return n >= k && !memcmp(p + n - k, open, k);
}

void exl_reasoning_split(enum exl_reasoning_tags tags, const char *s, size_t n, bool open,
			 bool final, size_t from, struct exl_reasoning *r)
{
	const char *otag = open_tag[tags], *ctag = close_tag[tags];
	size_t i = 0, end;

	if (tags == EXL_REASONING_NONE) {
		r->r_start = r->r_end = r->c_start = 0;
		return;
	}
	if (!open) {
		while (i < n && exl_text_is_ws(s[i]))
			i++;
		size_t k = strlen(otag);
		if (n - i >= k && !memcmp(s + i, otag, k)) {
			i += k;
		} else if (!final && n - i < k && !memcmp(s + i, otag, n - i)) {
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
	size_t close = exl_text_find(s, n, from > i ? from : i, ctag);
	if (close < n) {
		end = close;
		r->c_start = close + strlen(ctag);
		while (r->c_start < n && exl_text_is_ws(s[r->c_start]))
			r->c_start++;
	} else {
		end = final ? n : n - exl_text_partial_tail(s, n, ctag);
		r->c_start = n;
	}
	while (end > i && exl_text_is_ws(s[end - 1]))
		end--;
	r->r_end = end;
}
