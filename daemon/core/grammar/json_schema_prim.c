/* The fixed rules of schema grammars and the digit grammars of numeric
 * bounds.
 *
 * Numbers have at most 16 integer digits, 16 fraction digits and a
 * two-digit exponent, so a model cannot run on forever inside one; with
 * bounds they have at most 15 integer digits and no exponent, and the
 * bounds are exact for integral values (a non-integral bound of a number
 * is rounded inward).  An integer range is
 * split into runs of equal digit count, each spelled digit by digit:
 * 17..234 is 1[7-9] | [2-9][0-9] | 1[0-9][0-9] | 2([0-2][0-9] | 3[0-4]).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "daemon/core/grammar/json_schema_internal.h"

static const char fixed_rules[] =
	"js-ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n"
	"js-pchar ::= [^\"\\\\\\x00-\\x1F]\n"
	"js-hex4 ::= [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}\n"
	"js-char ::= js-pchar | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" js-hex4 )\n"
	"js-string ::= \"\\\"\" js-char* \"\\\"\"\n"
	"js-integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
	"js-number ::= js-integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n"
	"js-boolean ::= \"true\" | \"false\"\n"
	"js-null ::= \"null\"\n"
	"js-value ::= js-object | js-array | js-string | js-number | js-boolean | js-null\n"
	"js-member ::= js-string js-ws \":\" js-ws js-value\n"
	"js-object ::= \"{\" js-ws ( js-member ( js-ws \",\" js-ws js-member )* js-ws )? \"}\"\n"
	"js-array ::= \"[\" js-ws ( js-value ( js-ws \",\" js-ws js-value )* js-ws )? \"]\"\n"
	/* RFC 3339 full-date: day ranges per month, 29 February in leap
	 * years only, no year 0000. */
	"js-year ::= [0-9]{3} [1-9] | [0-9]{2} [1-9] \"0\" | [0-9] [1-9] \"00\" | [1-9] \"000\"\n"
	"js-leap-year ::= [0-9] [0-9] ( \"0\" [48] | [2468] [048] | [13579] [26] )"
	" | ( \"0\" [48] | [2468] [048] | [13579] [26] ) \"00\"\n"
	"js-day28 ::= \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]\n"
	"js-day30 ::= js-day28 | \"29\" | \"30\"\n"
	"js-day31 ::= js-day30 | \"31\"\n"
	"js-date-body ::= js-year \"-\" ( ( \"01\" | \"03\" | \"05\" | \"07\" | \"08\" | \"10\" | \"12\" )"
	" \"-\" js-day31 | ( \"04\" | \"06\" | \"09\" | \"11\" ) \"-\" js-day30 | \"02-\" js-day28 )"
	" | js-leap-year \"-02-29\"\n"
	/* RFC 3339 full-time (no leap second). */
	"js-time-body ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9]"
	" ( \".\" [0-9]{1,9} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
	"js-date ::= \"\\\"\" js-date-body \"\\\"\"\n"
	"js-time ::= \"\\\"\" js-time-body \"\\\"\"\n"
	"js-date-time ::= \"\\\"\" js-date-body \"T\" js-time-body \"\\\"\"\n"
	"js-uuid ::= \"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\""
	" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12} \"\\\"\"\n";

void exl_js_emit_fixed_rules(struct exl_gbnf_out *o)
{
	exl_gbnf_puts(o, fixed_rules);
}

const char *exl_js_format_rule(const char *format)
{
	if (!strcmp(format, "date"))
		return "js-date";
	if (!strcmp(format, "time"))
		return "js-time";
	if (!strcmp(format, "date-time"))
		return "js-date-time";
	if (!strcmp(format, "uuid"))
		return "js-uuid";
	return NULL;
}

/* ---- integer digit ranges ---- */

/* Bounded integer parts have at most 15 digits: exact as doubles. */
#define MAXV 999999999999999ull

static bool all_digit(const char *s, int n, char d)
{
	for (int i = 0; i < n; i++)
		if (s[i] != d)
			return false;
	return true;
}

/* The n-digit strings from a to b (leading zeros allowed: these are
 * suffixes). */
static void digits_expr(struct exl_gbnf_out *o, const char *a, const char *b, int n)
{
	static const char nines[] = "9999999999999999", zeros[] = "0000000000000000";

	if (!memcmp(a, b, (size_t)n)) {
		exl_gbnf_literal(o, a, (size_t)n);
		return;
	}
	if (n == 1) {
		exl_gbnf_printf(o, "[%c-%c]", a[0], b[0]);
		return;
	}
	if (a[0] == b[0]) {
		exl_gbnf_printf(o, "\"%c\" ", a[0]);
		digits_expr(o, a + 1, b + 1, n - 1);
		return;
	}
	bool low_full = all_digit(a + 1, n - 1, '0'), high_full = all_digit(b + 1, n - 1, '9');
	char first = (char)(a[0] + !low_full), last = (char)(b[0] - !high_full);
	bool any = false;

	exl_gbnf_puts(o, "( ");
	if (!low_full) {
		exl_gbnf_printf(o, "\"%c\" ", a[0]);
		digits_expr(o, a + 1, nines, n - 1);
		any = true;
	}
	if (first <= last) {
		if (any)
			exl_gbnf_puts(o, " | ");
		if (first == last)
			exl_gbnf_printf(o, "\"%c\"", first);
		else
			exl_gbnf_printf(o, "[%c-%c]", first, last);
		exl_gbnf_printf(o, " [0-9]{%d}", n - 1);
		any = true;
	}
	if (!high_full) {
		if (any)
			exl_gbnf_puts(o, " | ");
		exl_gbnf_printf(o, "\"%c\" ", b[0]);
		digits_expr(o, zeros, b + 1, n - 1);
	}
	exl_gbnf_puts(o, " )");
}

static int n_digits(uint64_t v)
{
	int n = 1;

	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

static uint64_t pow10u(int n)
{
	uint64_t p = 1;

	while (n-- > 0)
		p *= 10;
	return p;
}

/* Integers lo..hi (lo <= hi <= MAXV) without leading zeros. */
static void uint_range(struct exl_gbnf_out *o, uint64_t lo, uint64_t hi)
{
	bool any = false;

	exl_gbnf_puts(o, "( ");
	for (int len = n_digits(lo); len <= n_digits(hi); len++) {
		uint64_t a = len == 1 ? 0 : pow10u(len - 1), b = pow10u(len) - 1;
		char sa[24], sb[24];

		if (a < lo)
			a = lo;
		if (b > hi)
			b = hi;
		if (a > b)
			continue;
		snprintf(sa, sizeof(sa), "%llu", (unsigned long long)a);
		snprintf(sb, sizeof(sb), "%llu", (unsigned long long)b);
		if (any)
			exl_gbnf_puts(o, " | ");
		digits_expr(o, sa, sb, len);
		any = true;
	}
	exl_gbnf_puts(o, " )");
}

/* ---- bounds ---- */

static int int_range(struct exl_gbnf_out *o, struct js_bound lo, struct js_bound hi,
		     char *err, size_t errlen)
{
	double l = -(double)MAXV, h = (double)MAXV;

	if (lo.set) {
		l = lo.excl ? floor(lo.v) + 1 : ceil(lo.v);
		if (l > (double)MAXV) {
			snprintf(err, errlen, "a minimum beyond 15 digits is not supported");
			return -1;
		}
		if (l < -(double)MAXV)
			l = -(double)MAXV;
	}
	if (hi.set) {
		h = hi.excl ? ceil(hi.v) - 1 : floor(hi.v);
		if (h < -(double)MAXV) {
			snprintf(err, errlen, "a maximum beyond 15 digits is not supported");
			return -1;
		}
		if (h > (double)MAXV)
			h = (double)MAXV;
	}
	if (l > h) {
		snprintf(err, errlen, "no integer lies within the minimum and maximum");
		return -1;
	}
	bool neg = l < 0, pos = h >= 0;

	exl_gbnf_puts(o, "( ");
	if (neg) {
		exl_gbnf_puts(o, "\"-\" ");
		uint_range(o, h < 0 ? (uint64_t)-h : 1, (uint64_t)-l);
	}
	if (pos) {
		if (neg)
			exl_gbnf_puts(o, " | ");
		uint_range(o, l > 0 ? (uint64_t)l : 0, (uint64_t)h);
	}
	exl_gbnf_puts(o, " )");
	return 0;
}

/* Magnitudes I.F from m (exclusive: above it) to M (unset: no limit;
 * exclusive: below it), m, M integral. */
static void magnitude(struct exl_gbnf_out *o, uint64_t m, bool m_excl, bool M_set, uint64_t M,
		      bool M_excl)
{
	uint64_t a = m + (m_excl ? 1 : 0);
	bool any = false;

	exl_gbnf_puts(o, "( ");
	if (!M_set || M > 0) {
		uint64_t b = M_set ? M - 1 : MAXV;

		if (a <= b) {
			uint_range(o, a, b);
			exl_gbnf_puts(o, " ( \".\" [0-9]{1,16} )?");
			any = true;
		}
	}
	if (m_excl && (!M_set || m < M)) {
		if (any)
			exl_gbnf_puts(o, " | ");
		exl_gbnf_printf(o, "\"%llu.\" \"0\"{0,15} [1-9] [0-9]{0,15}",
				(unsigned long long)m);
		any = true;
	}
	if (M_set && !M_excl && (M > m || !m_excl)) {
		if (any)
			exl_gbnf_puts(o, " | ");
		exl_gbnf_printf(o, "\"%llu\" ( \".\" \"0\"{1,16} )?", (unsigned long long)M);
	}
	exl_gbnf_puts(o, " )");
}

int exl_js_emit_range(struct exl_gbnf_out *o, bool integer, struct js_bound lo, struct js_bound hi,
		      char *err, size_t errlen)
{
	if (integer)
		return int_range(o, lo, hi, err, errlen);
	/* Round non-integral bounds inward: every value produced still
	 * satisfies them. */
	if (lo.set && lo.v != floor(lo.v)) {
		lo.v = ceil(lo.v);
		lo.excl = false;
	}
	if (hi.set && hi.v != floor(hi.v)) {
		hi.v = floor(hi.v);
		hi.excl = false;
	}
	if (lo.set && lo.v < -(double)MAXV)
		lo.set = false;
	if (hi.set && hi.v > (double)MAXV)
		hi.set = false;
	if ((lo.set && lo.v > (double)MAXV) || (hi.set && hi.v < -(double)MAXV)) {
		snprintf(err, errlen, "a bound beyond 15 digits is not supported");
		return -1;
	}
	if (lo.set && hi.set && (lo.v > hi.v || (lo.v == hi.v && (lo.excl || hi.excl)))) {
		snprintf(err, errlen, "no number lies within the minimum and maximum");
		return -1;
	}
	if (lo.set && lo.v >= 0) {
		magnitude(o, (uint64_t)lo.v, lo.excl, hi.set, hi.set ? (uint64_t)hi.v : 0, hi.excl);
	} else if (hi.set && (hi.v < 0 || (hi.v == 0 && hi.excl))) {
		exl_gbnf_puts(o, "\"-\" ");
		magnitude(o, (uint64_t)-hi.v, hi.excl, lo.set, lo.set ? (uint64_t)-lo.v : 0, lo.excl);
	} else {
		exl_gbnf_puts(o, "( \"-\" ");
		magnitude(o, 0, false, lo.set, lo.set ? (uint64_t)-lo.v : 0, lo.excl);
		exl_gbnf_puts(o, " | ");
		magnitude(o, 0, false, hi.set, hi.set ? (uint64_t)hi.v : 0, hi.excl);
		exl_gbnf_puts(o, " )");
	}
	return 0;
}
