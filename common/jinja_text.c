/* Text as JavaScript sees it: the reference works on UTF-16 strings with
 * JavaScript's whitespace, case mapping and number parsing, and we keep
 * UTF-8, so lengths, indexes and comparisons are converted here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/jinja.h"
#include "common/jinja_case.h"

size_t exl_jt_decode(const char *str, size_t n, uint32_t *cp)
{
	const uint8_t *s = (const uint8_t *)str;
	size_t k;

	if (!n) {
		*cp = 0;
		return 0;
	}
	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if (s[0] >= 0xF0)
		k = 4;
	else if (s[0] >= 0xE0)
		k = 3;
	else if (s[0] >= 0xC0)
		k = 2;
	else
		k = 1;
	if (k > n)
		k = 1;
	for (size_t i = 1; i < k; i++)
		if ((s[i] & 0xC0) != 0x80)
			k = 1;
	switch (k) {
	case 2:
		*cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
		break;
	case 3:
		*cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
		break;
	case 4:
		*cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
		      (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
		break;
	default:
		*cp = s[0];
	}
	return k;
}

bool exl_jt_is_space(uint32_t cp)
{
	if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D))
		return true;
	if (cp < 0xA0)
		return false;
	return cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
	       cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

/* The start of the character that ends at s[n). */
static size_t char_start(const char *s, size_t n)
{
	size_t i = n - 1;

	while (i > 0 && n - i < 4 && ((uint8_t)s[i] & 0xC0) == 0x80)
		i--;
	return i;
}

void exl_jt_trim(const char *s, size_t n, bool start, bool end, const char **os, size_t *on)
{
	size_t a = 0, b = n;
	uint32_t cp;

	while (start && a < b) {
		size_t k = exl_jt_decode(s + a, b - a, &cp);

		if (!exl_jt_is_space(cp))
			break;
		a += k;
	}
	while (end && b > a) {
		size_t i = char_start(s + a, b - a) + a;

		exl_jt_decode(s + i, b - i, &cp);
		if (!exl_jt_is_space(cp))
			break;
		b = i;
	}
	*os = s + a;
	*on = b - a;
}

size_t exl_jt_utf16_len(const char *s, size_t n)
{
	size_t len = 0;

	for (size_t i = 0; i < n; i++) {
		uint8_t b = (uint8_t)s[i];

		if ((b & 0xC0) != 0x80)
			len += b >= 0xF0 ? 2 : 1;
	}
	return len;
}

int exl_jt_unit_at(struct jctx *c, const char *s, size_t n, size_t idx, struct jv *out)
{
	size_t u = 0, i = 0;
	uint32_t cp;

	*out = jv_str("", 0);
	while (i < n) {
		size_t k = exl_jt_decode(s + i, n - i, &cp);

		if (cp < 0x10000) {
			if (u == idx) {
				*out = jv_str(s + i, k);
				return 0;
			}
			u++;
		} else {
			if (u == idx || u + 1 == idx) {
				uint32_t half = u == idx ? 0xD800 + ((cp - 0x10000) >> 10) :
							   0xDC00 + ((cp - 0x10000) & 0x3FF);
				char *p = exl_jalloc(c, 3);

				if (!p)
					return -1;
				p[0] = (char)(0xE0 | half >> 12);
				p[1] = (char)(0x80 | (half >> 6 & 0x3F));
				p[2] = (char)(0x80 | (half & 0x3F));
				*out = jv_str(p, 3);
				return 0;
			}
			u += 2;
		}
		i += k;
	}
	return 0;
}

/* ---- case mapping ---- */

/* The mapping of cp in the generated tables (jinja_case.c): its length in
 * code points (0: maps to itself). */
static int case_map(uint32_t cp, bool upper, uint32_t out[3])
{
	const struct jcase_run *runs = upper ? exl_jcase_upper_runs : exl_jcase_lower_runs;
	size_t nruns = upper ? exl_jcase_upper_nruns : exl_jcase_lower_nruns;
	const struct jcase_multi *multi = upper ? exl_jcase_upper_multi : exl_jcase_lower_multi;
	size_t nmulti = upper ? exl_jcase_upper_nmulti : exl_jcase_lower_nmulti;
	size_t lo = 0, hi = nmulti;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (multi[mid].cp == cp) {
			int k = 0;

			while (k < 3 && multi[mid].to[k])
				out[k] = multi[mid].to[k], k++;
			return k;
		}
		if (multi[mid].cp < cp)
			lo = mid + 1;
		else
			hi = mid;
	}
	lo = 0;
	hi = nruns;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (cp < runs[mid].first) {
			hi = mid;
		} else if (cp > runs[mid].last) {
			lo = mid + 1;
		} else {
			if ((cp - runs[mid].first) % runs[mid].stride)
				return 0;
			out[0] = (uint32_t)((int32_t)cp + runs[mid].delta);
			return 1;
		}
	}
	return 0;
}

static bool is_cased(uint32_t cp)
{
	uint32_t m[3];

	if (cp < 0x80)
		return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
	return case_map(cp, true, m) || case_map(cp, false, m);
}

/* Combining marks and the like, which the final sigma rule looks through. */
static bool is_case_ignorable(uint32_t cp)
{
	return cp == '\'' || cp == '.' || cp == ':' || cp == 0xAD || cp == 0xB7 || cp == 0x2019 ||
	       (cp >= 0x300 && cp <= 0x36F) || (cp >= 0x483 && cp <= 0x489) ||
	       (cp >= 0x1AB0 && cp <= 0x1AFF) || (cp >= 0x1DC0 && cp <= 0x1DFF) ||
	       (cp >= 0x20D0 && cp <= 0x20FF) || (cp >= 0xFE20 && cp <= 0xFE2F) ||
	       (cp >= 0x200B && cp <= 0x200F);
}

/* Σ at the end of a word lowercases to ς (Unicode's Final_Sigma). */
static bool final_sigma(const char *s, size_t n, size_t at, size_t k)
{
	size_t i = at;
	uint32_t cp;
	bool before = false;

	while (i > 0) {
		size_t j = char_start(s, i);

		exl_jt_decode(s + j, i - j, &cp);
		i = j;
		if (is_case_ignorable(cp))
			continue;
		before = is_cased(cp);
		break;
	}
	if (!before)
		return false;
	for (i = at + k; i < n;) {
		i += exl_jt_decode(s + i, n - i, &cp);
		if (is_case_ignorable(cp))
			continue;
		return !is_cased(cp);
	}
	return true;
}

static int map_case(struct jctx *c, struct jbuf *b, const char *s, size_t n, bool upper)
{
	size_t i = 0;

	if (exl_jstep(c, n / 16))
		return -1;
	while (i < n) {
		uint32_t cp, m[3];
		size_t k = exl_jt_decode(s + i, n - i, &cp);
		int mk;

		if (cp < 0x80) {
			char ch = (char)cp;

			if (upper && ch >= 'a' && ch <= 'z')
				ch = (char)(ch - 32);
			else if (!upper && ch >= 'A' && ch <= 'Z')
				ch = (char)(ch + 32);
			if (exl_jbuf_putc(c, b, ch))
				return -1;
			i += k;
			continue;
		}
		if (!upper && cp == 0x3A3) {
			if (exl_jbuf_put_cp(c, b, final_sigma(s, n, i, k) ? 0x3C2 : 0x3C3))
				return -1;
			i += k;
			continue;
		}
		mk = case_map(cp, upper, m);
		if (!mk) {
			if (exl_jbuf_put(c, b, s + i, k))
				return -1;
		}
		for (int j = 0; j < mk; j++)
			if (exl_jbuf_put_cp(c, b, m[j]))
				return -1;
		i += k;
	}
	return 0;
}

int exl_jt_upper(struct jctx *c, struct jbuf *b, const char *s, size_t n)
{
	return map_case(c, b, s, n, true);
}

int exl_jt_lower(struct jctx *c, struct jbuf *b, const char *s, size_t n)
{
	return map_case(c, b, s, n, false);
}

/* ---- comparison ---- */

/* A code point's UTF-16 sort key: supplementary characters sort as their
 * high surrogate, above U+D7FF and below U+E000. */
static uint32_t u16_key(uint32_t cp)
{
	if (cp >= 0x10000)
		return 0xD800 + ((cp - 0x10000) >> 10);
	return cp;
}

int exl_jt_cmp(const char *a, size_t an, const char *b, size_t bn)
{
	size_t i = 0, j = 0;

	while (i < an && j < bn) {
		uint32_t x, y;
		size_t ki = exl_jt_decode(a + i, an - i, &x);
		size_t kj = exl_jt_decode(b + j, bn - j, &y);

		if (x != y) {
			uint32_t kx = u16_key(x), ky = u16_key(y);

			if (kx != ky)
				return kx < ky ? -1 : 1;
			/* same high surrogate: the low ones decide */
			return x < y ? -1 : 1;
		}
		i += ki;
		j += kj;
	}
	if (i < an)
		return 1;
	if (j < bn)
		return -1;
	return 0;
}

/* ICU's root order of printable ASCII (Node's en-US localeCompare). */
static const char icu_ascii[] = " _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789"
				"aAbBcCdDeEfFgGhHiIjJkKlLmMnNoOpPqQrRsStTuUvVwWxXyYzZ";

static uint32_t primary(uint32_t cp)
{
	if (cp >= 0x20 && cp < 0x7F) {
		const char *p = strchr(icu_ascii, (int)cp);
		uint32_t pos = (uint32_t)(p - icu_ascii);

		/* a letter's two cases share a primary weight */
		if (pos >= 44)
			pos = 44 + (pos - 44) / 2 * 2;
		return pos + 1;
	}
	if (cp < 0x20 || cp == 0x7F)
		return 0;
	return 0x100 + cp;
}

int exl_jt_locale_cmp(const char *a, size_t an, const char *b, size_t bn)
{
	size_t i = 0, j = 0;
	int tertiary = 0;

	for (;;) {
		uint32_t x = 0, y = 0, px = 0, py = 0;

		while (i < an && !px)
			i += exl_jt_decode(a + i, an - i, &x), px = primary(x);
		while (j < bn && !py)
			j += exl_jt_decode(b + j, bn - j, &y), py = primary(y);
		if (!px || !py) {
			if (px || py)
				return px ? 1 : -1;
			break;
		}
		if (px != py)
			return px < py ? -1 : 1;
		/* lowercase first, decided only when all primaries tie */
		if (!tertiary && x != y)
			tertiary = (x >= 'a' && x <= 'z') ? -1 : 1;
	}
	if (tertiary)
		return tertiary;
	return exl_jt_cmp(a, an, b, bn);
}

/* ---- numbers ---- */

size_t exl_jt_skip_space(const char *s, size_t n, size_t i)
{
	uint32_t cp;

	while (i < n) {
		size_t k = exl_jt_decode(s + i, n - i, &cp);

		if (!exl_jt_is_space(cp))
			break;
		i += k;
	}
	return i;
}

static bool is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

/* The length of the StrDecimalLiteral at s (sign, digits, fraction,
 * exponent; "Infinity"), 0 when none. */
static size_t decimal_len(const char *s, size_t n, bool *inf)
{
	size_t i = 0, digits = 0;

	*inf = false;
	if (i < n && (s[i] == '+' || s[i] == '-'))
		i++;
	if (n - i >= 8 && !memcmp(s + i, "Infinity", 8)) {
		*inf = true;
		return i + 8;
	}
	while (i < n && is_digit(s[i]))
		i++, digits++;
	if (i < n && s[i] == '.') {
		size_t f = i + 1;

		while (f < n && is_digit(s[f]))
			f++, digits++;
		if (digits)
			i = f;
	}
	if (!digits)
		return 0;
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		size_t e = i + 1;

		if (e < n && (s[e] == '+' || s[e] == '-'))
			e++;
		if (e < n && is_digit(s[e])) {
			while (e < n && is_digit(s[e]))
				e++;
			i = e;
		}
	}
	return i;
}

static double decimal_value(const char *s, size_t len, bool inf)
{
	char tmp[512];
	char *copy = tmp;
	double d;

	if (inf)
		return s[0] == '-' ? -INFINITY : INFINITY;
	if (len >= sizeof(tmp)) {
		copy = malloc(len + 1);
		if (!copy)
			return NAN;
	}
	memcpy(copy, s, len);
	copy[len] = 0;
	d = strtod(copy, NULL);
	if (copy != tmp)
		free(copy);
	return d;
}

double exl_jt_to_number(const char *s, size_t n)
{
	const char *t;
	size_t tn, len;
	bool inf;

	exl_jt_trim(s, n, true, true, &t, &tn);
	if (!tn)
		return 0;
	if (tn > 2 && t[0] == '0' && strchr("xXoObB", t[1])) {
		int base = (t[1] | 0x20) == 'x' ? 16 : (t[1] | 0x20) == 'o' ? 8 : 2;
		double v = 0;

		for (size_t i = 2; i < tn; i++) {
			int d;

			if (is_digit(t[i]))
				d = t[i] - '0';
			else if ((t[i] | 0x20) >= 'a' && (t[i] | 0x20) <= 'f')
				d = (t[i] | 0x20) - 'a' + 10;
			else
				return NAN;
			if (d >= base)
				return NAN;
			v = v * base + d;
		}
		return v;
	}
	len = decimal_len(t, tn, &inf);
	if (len != tn)
		return NAN;
	return decimal_value(t, len, inf);
}

double exl_jt_parse_int(const char *s, size_t n)
{
	size_t i = exl_jt_skip_space(s, n, 0), start;
	bool neg = false;
	double d;

	if (i < n && (s[i] == '+' || s[i] == '-'))
		neg = s[i++] == '-';
	start = i;
	while (i < n && is_digit(s[i]))
		i++;
	if (i == start)
		return NAN;
	d = decimal_value(s + start, i - start, false);
	return neg ? -d : d;
}

double exl_jt_parse_float(const char *s, size_t n)
{
	size_t i = exl_jt_skip_space(s, n, 0), len;
	bool inf;

	len = decimal_len(s + i, n - i, &inf);
	if (!len)
		return NAN;
	return decimal_value(s + i, len, inf);
}

/* ---- encoding ---- */

int exl_jt_sanitize(struct jctx *c, const char *str, size_t n, char **out, size_t *on)
{
	const uint8_t *s = (const uint8_t *)str;
	struct jbuf b = { 0 };
	uint32_t cp = 0;
	unsigned needed = 0, seen = 0;
	uint8_t lower = 0x80, upper = 0xBF;
	size_t i = 0;

	while (i < n) {
		uint8_t x = s[i];

		if (!needed) {
			i++;
			if (x < 0x80) {
				if (exl_jbuf_putc(c, &b, (char)x))
					return -1;
			} else if (x >= 0xC2 && x <= 0xDF) {
				needed = 1;
				cp = x & 0x1F;
			} else if (x >= 0xE0 && x <= 0xEF) {
				if (x == 0xE0)
					lower = 0xA0;
				if (x == 0xED)
					upper = 0x9F;
				needed = 2;
				cp = x & 0xF;
			} else if (x >= 0xF0 && x <= 0xF4) {
				if (x == 0xF0)
					lower = 0x90;
				if (x == 0xF4)
					upper = 0x8F;
				needed = 3;
				cp = x & 0x7;
			} else if (exl_jbuf_put_cp(c, &b, 0xFFFD)) {
				return -1;
			}
			continue;
		}
		if (x < lower || x > upper) {
			/* the bad byte starts over */
			needed = seen = 0;
			cp = 0;
			lower = 0x80;
			upper = 0xBF;
			if (exl_jbuf_put_cp(c, &b, 0xFFFD))
				return -1;
			continue;
		}
		lower = 0x80;
		upper = 0xBF;
		cp = cp << 6 | (x & 0x3F);
		i++;
		if (++seen == needed) {
			if (exl_jbuf_put_cp(c, &b, cp))
				return -1;
			needed = seen = 0;
			cp = 0;
		}
	}
	if (needed && exl_jbuf_put_cp(c, &b, 0xFFFD))
		return -1;
	if (!b.p && !(b.p = exl_jalloc(c, 1)))
		return -1;
	*out = b.p;
	*on = b.n;
	return 0;
}

size_t exl_jt_fix_surrogates(char *str, size_t n)
{
	uint8_t *s = (uint8_t *)str;
	size_t i = 0, o = 0;

	while (i < n) {
		if (i + 2 < n && s[i] == 0xED && s[i + 1] >= 0xA0 && (s[i + 2] & 0xC0) == 0x80) {
			uint32_t h = (uint32_t)(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);

			h |= 0xD000;
			/* two halves that meet make the character, as in JavaScript */
			if (h < 0xDC00 && i + 5 < n && s[i + 3] == 0xED && s[i + 4] >= 0xB0 &&
			    (s[i + 5] & 0xC0) == 0x80) {
				uint32_t l = 0xD000 | (uint32_t)(s[i + 4] & 0x3F) << 6 | (s[i + 5] & 0x3F);
				uint32_t cp = 0x10000 + ((h - 0xD800) << 10) + (l - 0xDC00);

				s[o++] = (uint8_t)(0xF0 | cp >> 18);
				s[o++] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
				s[o++] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
				s[o++] = (uint8_t)(0x80 | (cp & 0x3F));
				i += 6;
				continue;
			}
			s[o++] = 0xEF;
			s[o++] = 0xBF;
			s[o++] = 0xBD;
			i += 3;
			continue;
		}
		s[o++] = s[i++];
	}
	return o;
}
