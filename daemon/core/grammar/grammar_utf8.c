/* Code point ranges as UTF-8 byte patterns, so the matcher can work on
 * bytes (a token may end in the middle of a character). */
#include "common/utf8.h"
#include "daemon/core/grammar/grammar_internal.h"

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

	s.n = exl_utf8_encode(lo, a);
	exl_utf8_encode(hi, b);
	for (int i = 0; i < s.n; i++) {
		s.lo[i] = a[i];
		s.hi[i] = b[i];
	}
	return emit(&s, u);
}

int exl_grammar_utf8_split_range(uint32_t lo, uint32_t hi,
				 int (*emit)(const struct utf8_seq *s, void *u), void *u)
{
	static const uint32_t len_max[] = { 0x7F, 0x7FF, 0xFFFF, 0x10FFFF };
	int r;

	if (hi > 0x10FFFF)
		hi = 0x10FFFF;
	if (lo > hi)
		return 0;
	/* Surrogates have no encoding. */
	if (lo <= 0xDFFF && hi >= 0xD800) {
		if (lo < 0xD800 && (r = exl_grammar_utf8_split_range(lo, 0xD7FF, emit, u)))
			return r;
		return hi > 0xDFFF ? exl_grammar_utf8_split_range(0xE000, hi, emit, u) : 0;
	}
	for (int i = 0; i < 3; i++) {
		if (lo <= len_max[i] && hi > len_max[i]) {
			r = exl_grammar_utf8_split_range(lo, len_max[i], emit, u);
			return r ? r : exl_grammar_utf8_split_range(len_max[i] + 1, hi, emit, u);
		}
	}
	return split_same(lo, hi, emit, u);
}
