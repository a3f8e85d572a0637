/* A reply's <think> block (reasoning.h). */
#include "daemon/server/http/reasoning.h"

#include <string.h>

#define OPEN "<think>"
#define CLOSE "</think>"

static bool ws(char c)
{
	return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static size_t find(const char *s, size_t n, size_t from, const char *what)
{
	size_t k = strlen(what);

	for (size_t i = from; k <= n && i <= n - k; i++)
		if (s[i] == what[0] && !memcmp(s + i, what, k))
			return i;
	return n;
}

bool exl_reasoning_template(const char *t, size_t n)
{
	return find(t, n, 0, OPEN) < n;
}

bool exl_reasoning_prompt_open(const char *p, size_t n)
{
	while (n && ws(p[n - 1]))
		n--;
	return n >= strlen(OPEN) && !memcmp(p + n - strlen(OPEN), OPEN, strlen(OPEN));
}

/* The longest tail of s[0, n) that is a proper start of what. */
static size_t partial_tail(const char *s, size_t n, const char *what)
{
	for (size_t t = strlen(what) - 1; t > 0; t--)
		if (t <= n && !memcmp(s + n - t, what, t))
			return t;
	return 0;
}

void exl_reasoning_split(const char *s, size_t n, bool open, bool final, size_t from,
			 struct exl_reasoning *r)
{
	size_t i = 0, end;

	if (!open) {
		while (i < n && ws(s[i]))
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
	while (i < n && ws(s[i]))
		i++;
	r->r_start = i;
	size_t close = find(s, n, from > i ? from : i, CLOSE);
	if (close < n) {
		end = close;
		r->c_start = close + strlen(CLOSE);
		while (r->c_start < n && ws(s[r->c_start]))
			r->c_start++;
	} else {
		end = final ? n : n - partial_tail(s, n, CLOSE);
		r->c_start = n;
	}
	while (end > i && ws(s[end - 1]))
		end--;
	r->r_end = end;
}
