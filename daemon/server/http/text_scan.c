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
