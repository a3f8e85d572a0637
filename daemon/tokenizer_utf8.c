/* UTF-8 validation, decoding and repair for the tokenizer. */
#include <stdlib.h>
#include <string.h>

#include "daemon/tokenizer_internal.h"

int tok_utf8_valid_len(const uint8_t *s, size_t n)
{
	uint8_t c = s[0], lo = 0x80, hi = 0xbf;
	int len;

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
	if (n < (size_t)len)
		return 0;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (int i = 2; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return len;
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
		int l = tok_utf8_valid_len(u + i, n - i);

		if (!l)
			return i;
		i += (size_t)l;
	}
	return n;
}

uint32_t tok_utf8_decode(const uint8_t *s, int l)
{
	switch (l) {
	case 1:
		return s[0];
	case 2:
		return (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
	case 3:
		return (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
	default:
		return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 |
		       (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
	}
}

int tok_utf8_encode(uint32_t cp, char *out)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | cp >> 12);
		out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | cp >> 18);
	out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

int tok_utf8_sanitize(const char *text, uint32_t len, char **out, uint32_t *out_len)
{
	const uint8_t *s = (const uint8_t *)text;
	uint32_t bad = 0, i = 0, o = 0;
	char *buf;

	while (i < len) {
		int l = tok_utf8_valid_len(s + i, len - i);

		if (!l) {
			bad++;
			l = 1;
		}
		i += (uint32_t)l;
	}
	/* Each bad byte grows by 2; len is bounded by TOK_MAX_TEXT. */
	buf = malloc((size_t)len + 2 * (size_t)bad + 1);
	if (!buf)
		return -1;
	if (!bad) {
		memcpy(buf, text, len);
		o = len;
	} else {
		for (i = 0; i < len;) {
			int l = tok_utf8_valid_len(s + i, len - i);

			if (!l) {
				memcpy(buf + o, "\xef\xbf\xbd", 3);
				o += 3;
				i++;
				continue;
			}
			memcpy(buf + o, s + i, (size_t)l);
			o += (uint32_t)l;
			i += (uint32_t)l;
		}
	}
	buf[o] = '\0';
	*out = buf;
	*out_len = o;
	return 0;
}
