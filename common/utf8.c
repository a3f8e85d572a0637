/* UTF-8 (common/utf8.h). */
#include <string.h>

#include "common/utf8.h"

int exl_utf8_len(const uint8_t *s, size_t n)
{
	uint8_t c, lo = 0x80, hi = 0xbf;
	int len;

	if (!n)
		return 0;
	c = s[0];
	if (c < 0x80)
		return 1;
	if (c < 0xc2)
		return 0; /* continuation byte or overlong 2-byte lead */
	if (c < 0xe0) {
		len = 2;
	} else if (c < 0xf0) {
		len = 3;
		if (c == 0xe0)
			lo = 0xa0; /* overlong */
		else if (c == 0xed)
			hi = 0x9f; /* surrogates */
	} else if (c < 0xf5) {
		len = 4;
		if (c == 0xf0)
			lo = 0x90; /* overlong */
		else if (c == 0xf4)
			hi = 0x8f; /* above U+10FFFF */
	} else {
		return 0;
	}
	if (n < (size_t)len || s[1] < lo || s[1] > hi)
		return 0;
	for (int i = 2; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return len;
}

int exl_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
	int len = exl_utf8_len(s, n);

	switch (len) {
	case 1:
		*cp = s[0];
		break;
	case 2:
		*cp = (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
		break;
	case 3:
		*cp = (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
		break;
	case 4:
		*cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 |
		      (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
		break;
	}
	return len;
}

int exl_utf8_encode(uint32_t cp, uint8_t *out)
{
	if (cp < 0x80) {
		out[0] = (uint8_t)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (uint8_t)(0xc0 | cp >> 6);
		out[1] = (uint8_t)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (uint8_t)(0xe0 | cp >> 12);
		out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
		out[2] = (uint8_t)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (uint8_t)(0xf0 | cp >> 18);
	out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
	out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
	out[3] = (uint8_t)(0x80 | (cp & 0x3f));
	return 4;
}

size_t exl_utf8_bad_at(const char *s, size_t n)
{
	const uint8_t *u = (const uint8_t *)s;
	size_t i = 0;

	while (i < n) {
		/* ASCII, most text, 8 bytes at a time: the daemon checks every
		 * request's strings on its event loop, 16 MiB prompts too. */
		if (n - i >= 8) {
			uint64_t w;

			memcpy(&w, u + i, 8);
			if (!(w & 0x8080808080808080ull)) {
				i += 8;
				continue;
			}
		}
		int l = exl_utf8_len(u + i, n - i);

		if (!l)
			return i;
		i += (size_t)l;
	}
	return n;
}

void exl_utf8_scrub(char *s)
{
	size_t n = strlen(s), i = 0;

	while (i < n) {
		i += exl_utf8_bad_at(s + i, n - i);
		if (i < n)
			s[i++] = '?';
	}
}
