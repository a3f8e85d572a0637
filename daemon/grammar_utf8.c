/* Code point ranges as UTF-8 byte patterns, so the matcher can work on
 * bytes (a token may end in the middle of a character). */
#include "daemon/grammar_internal.h"

int utf8_encode(uint32_t c, uint8_t out[4])
{
	if (c < 0x80) {
		out[0] = (uint8_t)c;
		return 1;
	}
	if (c < 0x800) {
		out[0] = (uint8_t)(0xC0 | c >> 6);
		out[1] = (uint8_t)(0x80 | (c & 0x3F));
		return 2;
	}
	if (c < 0x10000) {
		out[0] = (uint8_t)(0xE0 | c >> 12);
		out[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
		out[2] = (uint8_t)(0x80 | (c & 0x3F));
		return 3;
	}
	out[0] = (uint8_t)(0xF0 | c >> 18);
	out[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
	out[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
	out[3] = (uint8_t)(0x80 | (c & 0x3F));
	return 4;
}

int utf8_decode(const uint8_t *p, size_t n, uint32_t *c)
{
	static const uint32_t min_of_len[5] = { 0, 0, 0x80, 0x800, 0x10000 };
	int len;
	uint32_t v;

	if (!n)
		return 0;
	if (p[0] < 0x80) {
		*c = p[0];
		return 1;
	} else if ((p[0] & 0xE0) == 0xC0) {
		len = 2;
		v = p[0] & 0x1F;
	} else if ((p[0] & 0xF0) == 0xE0) {
		len = 3;
		v = p[0] & 0x0F;
	} else if ((p[0] & 0xF8) == 0xF0) {
		len = 4;
		v = p[0] & 0x07;
	} else {
		return 0;
	}
	if (n < (size_t)len)
		return 0;
	for (int i = 1; i < len; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		v = v << 6 | (p[i] & 0x3F);
	}
	if (v < min_of_len[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
		return 0;
	*c = v;
	return len;
}

static int enc_len(uint32_t c)
{
	return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

/* lo and hi encode to the same length.  Split until every continuation
 * byte position spans either one value or its whole 0x80..0xBF range,
 * then one pattern covers the range exactly. */
static int split_same(uint32_t lo, uint32_t hi, int (*emit)(const struct utf8_seq *, void *),
		      void *u)
{
	int n = enc_len(lo);
	int r;

	for (int i = 1; i < n; i++) {
		uint32_t m = (1u << (6 * i)) - 1;

		if ((lo & ~m) == (hi & ~m))
			continue;
		if (lo & m) {
			r = split_same(lo, lo | m, emit, u);
			return r ? r : split_same((lo | m) + 1, hi, emit, u);
		}
		if ((hi & m) != m) {
			r = split_same(lo, (hi & ~m) - 1, emit, u);
			return r ? r : split_same(hi & ~m, hi, emit, u);
		}
	}
	struct utf8_seq s;
	uint8_t a[4], b[4];

	s.n = utf8_encode(lo, a);
	utf8_encode(hi, b);
	for (int i = 0; i < s.n; i++) {
		s.lo[i] = a[i];
		s.hi[i] = b[i];
	}
	return emit(&s, u);
}

int utf8_split_range(uint32_t lo, uint32_t hi, int (*emit)(const struct utf8_seq *s, void *u),
		     void *u)
{
	static const uint32_t len_max[] = { 0x7F, 0x7FF, 0xFFFF, 0x10FFFF };
	int r;

	if (hi > 0x10FFFF)
		hi = 0x10FFFF;
	if (lo > hi)
		return 0;
	/* Surrogates have no encoding. */
	if (lo <= 0xDFFF && hi >= 0xD800) {
		if (lo < 0xD800 && (r = utf8_split_range(lo, 0xD7FF, emit, u)))
			return r;
		return hi > 0xDFFF ? utf8_split_range(0xE000, hi, emit, u) : 0;
	}
	for (int i = 0; i < 3; i++) {
		if (lo <= len_max[i] && hi > len_max[i]) {
			r = utf8_split_range(lo, len_max[i], emit, u);
			return r ? r : utf8_split_range(len_max[i] + 1, hi, emit, u);
		}
	}
	return split_same(lo, hi, emit, u);
}
