/* A reply's reasoning: a <think> or [THINK] block, or gpt-oss's analysis
 * messages (reasoning.h). */
#include "daemon/server/http/reasoning.h"

#include <string.h>

#include "daemon/server/http/text_scan.h"

static const char *const open_tag[] = { "", "<think>", "[THINK]", "" };
static const char *const close_tag[] = { "", "</think>", "[/THINK]", "" };

enum exl_reasoning_tags exl_reasoning_template(const char *t, size_t n)
{
	/* first: gpt-oss's template may quote other tags in its instructions */
	if (exl_text_find(t, n, 0, EXL_HARMONY_CHANNEL) < n)
		return EXL_REASONING_HARMONY;
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

	if (tags == EXL_REASONING_NONE || tags == EXL_REASONING_HARMONY)
		return false;
	while (n && exl_text_is_ws(p[n - 1]))
		n--;
	return n >= k && !memcmp(p + n - k, open, k);
}

/* s[b, e) less the whitespace at its end (not before b). */
static size_t trim_end(const char *s, size_t b, size_t e)
{
	while (e > b && exl_text_is_ws(s[e - 1]))
		e--;
	return e;
}

/* Harmony: the analysis messages the reply opens with are the reasoning
 * (several in a row: one span, the markers between them in it); the
 * content starts at the body of the first final or commentary message, or
 * at the header of the first message with a recipient (a tool call, which
 * the tool-call reader takes from there). */
static void split_harmony(const char *s, size_t n, bool final, size_t from,
			  struct exl_reasoning *r)
{
	struct exl_harmony_head h;
	size_t at = 0, mark;
	bool first = true;

	r->r_start = r->r_end = 0;
	for (;;) {
		int k = exl_harmony_head(s, n, at, &h);

		if (k == 0 && !final) {
			/* the header is not whole yet */
			r->c_start = n;
			return;
		}
		if (k <= 0) {
			/* no header: a reply that does not open with one is all
			 * content; after a message, the rest is */
			r->c_start = first ? 0 : at;
			return;
		}
		if (h.to_len) {
			/* a call: the tool-call reader takes it from its header */
			r->c_start = at;
			return;
		}
		if (!exl_harmony_channel_is(s, &h, "analysis")) {
			/* final, or commentary to the user (a preamble) */
			r->c_start = exl_text_skip_ws(s, n, h.body);
			return;
		}
		size_t b = exl_text_skip_ws(s, n, h.body);
		if (first)
			r->r_start = b;
		/* no end before from (an earlier split's r_end): the messages
		 * before it were analysis, and its own end is after it */
		size_t e = exl_harmony_body_end(s, n, from > b ? (from < n ? from : n) : b, &mark);
		first = false;
		if (e == n) {
			/* an analysis cut short: all reasoning when final, else
			 * up to what may be its end's marker */
			r->r_end = trim_end(s, r->r_start, final ? n : n - exl_harmony_partial_tail(s, n));
			if (r->r_end < r->r_start)
				r->r_end = r->r_start;
			r->c_start = n;
			return;
		}
		r->r_end = trim_end(s, r->r_start, e);
		at = e + mark;
		size_t k2 = strlen(EXL_HARMONY_START);
		if (exl_text_starts(s, n, at, EXL_HARMONY_START)) {
			at += k2;
			continue;
		}
		if (at == n || (!final && n - at < k2 && !memcmp(s + at, EXL_HARMONY_START, n - at))) {
			/* nothing after it yet (final: and no content) */
			r->c_start = n;
			return;
		}
		r->c_start = at;
		return;
	}
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
	if (tags == EXL_REASONING_HARMONY) {
		split_harmony(s, n, final, from, r);
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
