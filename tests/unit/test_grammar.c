/* The GBNF engine: parser errors (line and column), what grammars match,
 * the UTF-8 range splitter, bounds (ambiguity, depth, expansion), token
 * masks from the vocabulary tree against feeding every token by hand
 * (with the mask cache, the repetition-level cut and forced reclaims), and
 * a deterministic fuzz of mutated grammars.
 *
 *   test_grammar [utf8|errors|match|limits|mask|trie|fuzz] [iterations]
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/grammar/grammar.h"
#include "daemon/core/grammar/grammar_internal.h"
#include "daemon/core/grammar/vocab_trie.h"
#include "tests/common/check.h"

/* Under UBSan (the sanitizer build) undefined behaviour fails the test
 * rather than printing a line nobody reads. */
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void)
{
	return "halt_on_error=1:print_stacktrace=1";
}

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static uint64_t rng = 0x243F6A8885A308D3ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static unsigned below(unsigned n)
{
	return n ? (unsigned)(next() % n) : 0;
}

static struct exl_grammar *compile(const char *text)
{
	char err[512];
	struct exl_grammar *g = exl_grammar_compile(text, strlen(text), err, sizeof(err));

	if (!g)
		DIE("grammar does not compile: %s\n%s", err, text);
	return g;
}

/* 1 when g matches all n bytes of s, 0 when not, -1 on an error. */
static int matches_n(const struct exl_grammar *g, const char *s, size_t n)
{
	char err[256];
	struct exl_gmatch *m = exl_gmatch_create(g, err, sizeof(err));
	int r;

	if (!m)
		DIE("matcher: %s", err);
	r = exl_gmatch_feed(m, (const uint8_t *)s, n, err, sizeof(err));
	if (r == 1)
		r = exl_gmatch_complete(m);
	exl_gmatch_free(m);
	return r;
}

static int matches(const struct exl_grammar *g, const char *s)
{
	return matches_n(g, s, strlen(s));
}

/* ---- UTF-8 ranges ---- */

struct seqs {
	struct utf8_seq s[64];
	int n;
};

static int collect(const struct utf8_seq *s, void *u)
{
	struct seqs *q = u;

	if (q->n == 64)
		return -1;
	q->s[q->n++] = *s;
	return 0;
}

static bool seq_matches(const struct utf8_seq *s, const uint8_t *b, int n)
{
	if (s->n != n)
		return false;
	for (int i = 0; i < n; i++)
		if (b[i] < s->lo[i] || b[i] > s->hi[i])
			return false;
	return true;
}

static void check_range(uint32_t lo, uint32_t hi)
{
	struct seqs q = { .n = 0 };

	CHECK(!exl_grammar_utf8_split_range(lo, hi, collect, &q), "split %X-%X: too many patterns",
	      lo, hi);
	/* Every code point: its encoding matches exactly one pattern iff it
	 * is in range (surrogates never). */
	for (uint32_t c = 0; c <= 0x10FFFF; c += (c < 0x3000 ? 1 : 97)) {
		uint8_t b[4];
		int n = exl_utf8_encode(c, b), hits = 0;

		for (int i = 0; i < q.n; i++)
			hits += seq_matches(&q.s[i], b, n);
		bool in = c >= lo && c <= hi && !(c >= 0xD800 && c <= 0xDFFF);

		if (hits != (in ? 1 : 0)) {
			CHECK(0, "split %X-%X: U+%X matched by %d patterns", lo, hi, c, hits);
			return;
		}
	}
	/* Patterns only match valid encodings. */
	for (int i = 0; i < q.n; i++) {
		uint8_t b[4];
		uint32_t c;

		for (int k = 0; k < q.s[i].n; k++)
			b[k] = q.s[i].lo[k];
		CHECK(exl_utf8_decode(b, (size_t)q.s[i].n, &c) == q.s[i].n, "split %X-%X: pattern %d's "
		      "low end is not valid UTF-8", lo, hi, i);
		for (int k = 0; k < q.s[i].n; k++)
			b[k] = q.s[i].hi[k];
		CHECK(exl_utf8_decode(b, (size_t)q.s[i].n, &c) == q.s[i].n, "split %X-%X: pattern %d's "
		      "high end is not valid UTF-8", lo, hi, i);
	}
}

static void case_utf8(void)
{
	static const uint32_t fixed[][2] = {
		{ 0, 0x10FFFF }, { 0x80, 0x7FF }, { 0x7F, 0x80 }, { 0x800, 0xFFFF },
		{ 0xD7FF, 0xE000 }, { 0xD800, 0xDFFF }, { 0x10000, 0x10FFFF }, { 0x41, 0x41 },
		{ 0x3B1, 0x3C9 }, { 0xFFFF, 0x10000 }, { 0x1F600, 0x1F64F }, { 0x100, 0x2FFF },
	};

	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		check_range(fixed[i][0], fixed[i][1]);
	for (int i = 0; i < 40; i++) {
		uint32_t a = (uint32_t)(next() % 0x110000), b = (uint32_t)(next() % 0x110000);

		if (i % 3 == 0)
			b = a + (uint32_t)(next() % 300);
		if (b > 0x10FFFF)
			b = 0x10FFFF;
		check_range(a < b ? a : b, a < b ? b : a);
	}
	/* The decoder refuses what is not UTF-8. */
	static const char *const bad[] = { "\xC0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80",
					   "\xE2\x82", "\xF8\x88\x80\x80\x80" };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint32_t c;

		CHECK(!exl_utf8_decode((const uint8_t *)bad[i], strlen(bad[i]), &c), "decoded bad %zu", i);
	}
}

/* ---- parser errors ---- */

static const struct {
	const char *grammar;
	const char *error;
} bad_grammars[] = {
	{ "root ::= \"abc", "line 1, column 10: unterminated string literal" },
	{ "root ::= [a-z", "line 1, column 10: unterminated character class" },
	{ "root ::= foo", "line 1, column 10: undefined rule 'foo'" },
	{ "root ::= \"a\"\nroot ::= \"b\"",
	  "line 2, column 1: rule 'root' is defined twice (first at line 1, column 1)" },
	{ "root \"a\"", "line 1, column 6: expected '::=' after the rule name 'root'" },
	{ "::= \"a\"", "line 1, column 1: '::=' without a rule name before it" },
	{ "root ::= ( \"a\" ", "line 1, column 10: '(' without a matching ')'" },
	{ "root ::= \"a\" )", "line 1, column 14: ')' without a matching '('" },
	{ "root ::= * \"a\"", "line 1, column 10: '*' has nothing before it to repeat" },
	{ "root ::= \"a\"{3,2}", "line 1, column 13: repetition {3,2} has its maximum below its minimum" },
	{ "root ::= \"a\"{10001}", "line 1, column 14: repetition count is over the limit of 10000" },
	{ "root ::= \"a\"{2", "line 1, column 15: expected ',' or '}' in a repetition" },
	{ "root ::= \"a\"{2,x}", "line 1, column 16: expected a number in { }" },
	{ "root ::= \"a\"{2,3", "line 1, column 17: expected '}' to end a repetition" },
	{ "root ::= \"\\q\"", "line 1, column 11: unknown escape '\\q'" },
	{ "root ::= \"\\x4\"", "line 1, column 11: '\\x' wants 2 hex digits" },
	{ "root ::= \"\\uD800\"", "line 1, column 11: U+D800 is a surrogate, not a character" },
	{ "root ::= \"\\U00110000\"", "line 1, column 11: U+110000 is beyond U+10FFFF" },
	{ "root ::= [z-a]", "line 1, column 11: range U+007A-U+0061 is backwards" },
	{ "root ::= []", "line 1, column 10: empty character class" },
	{ "root ::= [^\\x00-\\U0010FFFF]", "line 1, column 10: character class matches no character" },
	{ "root ::= <[1]>", "line 1, column 10: token references (<...>) are not supported" },
	{ "a ::= \"x\"", "the grammar has no 'root' rule (the start rule)" },
	{ "", "the grammar has no 'root' rule (the start rule)" },
	{ "  # only a comment\n", "the grammar has no 'root' rule (the start rule)" },
	{ "root ::= \"a\" @", "line 1, column 14: unexpected '@'" },
	{ "root ::= \"\xff\"", "line 1, column 11: invalid UTF-8 in the grammar text" },
	{ "root ::= \"a\nb\"", "line 1, column 12: newline inside a string literal (write \\n)" },
	{ "root ::= [a\n]", "line 1, column 12: newline inside a character class (write \\n)" },
	{ "root ::= x\n# comment\nx ::= \"a\" |\n  [b-", "line 4, column 3: unterminated character class" },
	{ "root ::= x\nx ::= \"a\" ::= \"b\"", "line 2, column 11: '::=' without a rule name before it" },
	{ "root ::= \"a\" \\", "line 1, column 14: unexpected '\\'" },
	{ "root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"",
	  "rule 'expr' can reach itself without consuming input (left recursion, or a repetition "
	  "of something that can be empty): expr -> expr" },
	{ "root ::= a\na ::= b \"x\"\nb ::= \"\" | a", "a -> b -> a" },
	{ "root ::= (\"a\"*)*", "rule 'root' can reach itself without consuming input" },
	{ "root ::= \"x\" root",
	  "rule 'root' (defined at line 1, column 1) can never finish: every way through it leads "
	  "back into it (root -> root)" },
	{ "root ::= \"a\" | b\nb ::= \"(\" c\nc ::= b \")\"", "can never finish: every way through it "
	  "leads back into it (b -> c -> b)" },
};

static void case_errors(void)
{
	for (size_t i = 0; i < sizeof(bad_grammars) / sizeof(bad_grammars[0]); i++) {
		char err[512] = "";
		const char *t = bad_grammars[i].grammar;
		struct exl_grammar *g = exl_grammar_compile(t, strlen(t), err, sizeof(err));

		CHECK(!g, "bad grammar %zu compiled: %s", i, t);
		CHECK(strstr(err, bad_grammars[i].error), "bad grammar %zu: got \"%s\", want \"%s\"", i,
		      err, bad_grammars[i].error);
		exl_grammar_free(g);
	}
}

/* ---- what matches ---- */

static const char json_gbnf[] =
	"# JSON, written for these tests\n"
	"root   ::= value\n"
	"value  ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
	"object ::= \"{\" ws ( member ( ws \",\" ws member )* ws )? \"}\"\n"
	"member ::= string ws \":\" ws value\n"
	"array  ::= \"[\" ws ( value ( ws \",\" ws value )* ws )? \"]\"\n"
	"string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" hex{4} ) )* \"\\\"\"\n"
	"hex    ::= [0-9a-fA-F]\n"
	"number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
	"ws     ::= [ \\t\\n]*\n";

static const char arith_gbnf[] =
	"root ::= expr\n"
	"expr ::= term ( ( \"+\" | \"-\" ) term )*\n"
	"term ::= factor ( ( \"*\" | \"/\" ) factor )*\n"
	"factor ::= [0-9]+ | \"(\" expr \")\" | \"-\" factor\n";

static const struct {
	const char *grammar;
	const char *text;
	int want;
} match_table[] = {
	{ "root ::= \"abc\"", "abc", 1 },
	{ "root ::= \"abc\"", "ab", 0 },
	{ "root ::= \"abc\"", "abcd", 0 },
	{ "root ::= \"\"", "", 1 },
	{ "root ::=", "", 1 },
	{ "root ::= \"a\" |", "", 1 },
	{ "root ::= \"\\n\\t\\r\\\\\\\"\\x41\\u00e9\\U0001F600\"", "\n\t\r\\\"A\xc3\xa9\xf0\x9f\x98\x80", 1 },
	{ "root ::= [a-z0-9_]+", "abc_09", 1 },
	{ "root ::= [a-z0-9_]+", "abc-09", 0 },
	{ "root ::= [^abc]", "d", 1 },
	{ "root ::= [^abc]", "b", 0 },
	{ "root ::= [^abc]", "\xe2\x98\x83", 1 },
	{ "root ::= [α-ω]+", "λόγος", 0 },
	{ "root ::= [α-ω]+", "λογος", 1 },
	{ "root ::= [\\]\\-\\\\]+", "]-\\", 1 },
	{ "root ::= [-a]+", "-a-", 1 },
	{ "root ::= [a-]+", "-a-", 1 },
	{ "root ::= .", "\xf0\x9f\x98\x80", 1 },
	{ "root ::= .", "\xf0\x9f\x98", 0 },
	{ "root ::= .", "\xff", 0 },
	{ "root ::= .", "\xed\xa0\x80", 0 },
	{ "root ::= .{3}", "a\xe2\x98\x83" "b", 1 },
	{ "root ::= \"a\"{3}", "aaa", 1 },
	{ "root ::= \"a\"{3}", "aa", 0 },
	{ "root ::= \"a\"{2,}", "aaaaaaa", 1 },
	{ "root ::= \"a\"{2,}", "a", 0 },
	{ "root ::= \"a\"{2,4}", "aaaa", 1 },
	{ "root ::= \"a\"{2,4}", "aaaaa", 0 },
	{ "root ::= \"a\"{,2}", "", 1 },
	{ "root ::= \"a\"{,2}", "aaa", 0 },
	{ "root ::= \"ab\"{2}", "abab", 1 },
	{ "root ::= \"ab\"*", "ababa", 0 },
	{ "root ::= \"ab\"+", "", 0 },
	{ "root ::= \"ab\"?", "ab", 1 },
	{ "root ::= (\"a\" | \"bc\")* \"d\"", "abcbcad", 1 },
	{ "root ::= (\"a\" | \"bc\")* \"d\"", "abd", 0 },
	{ "root ::= x-1 y_2\nx-1 ::= \"x\"\ny_2 ::= \"y\" # comment\n", "xy", 1 },
	{ "root ::= \"a\"\n  | \"b\"\n  | \"c\"", "c", 1 },
	{ "root ::= ( \"a\"\n  \"b\" )", "ab", 1 },
	{ "root ::= \"a\" b\nb ::= \"b\" | \"\"", "a", 1 },
	{ json_gbnf, "{\"a\": [1, 2.5e-3, true, null, \"x\\u00e9\\n\"], \"b\": {}}", 1 },
	{ json_gbnf, "{\"a\": [1, 2.5e-3, true, null, \"x\\u00e9\\n\"], \"b\": {}", 0 },
	{ json_gbnf, "[01]", 0 },
	{ json_gbnf, "\"caf\xc3\xa9 \xe2\x98\x83\"", 1 },
	{ json_gbnf, "\"tab\there\"", 0 },
	{ arith_gbnf, "1+2*(3-4)/-5", 1 },
	{ arith_gbnf, "1+2*(3-4", 0 },
	{ arith_gbnf, "((((((((((7))))))))))", 1 },
	{ "root ::= [^x]*", "a\xc3", 0 },
	{ "root ::= [^x]*", "a\xc3\xa9", 1 },
	{ "root ::= [^x]*", "a\xc3" "b", 0 },
};

static void case_match(void)
{
	for (size_t i = 0; i < sizeof(match_table) / sizeof(match_table[0]); i++) {
		struct exl_grammar *g = compile(match_table[i].grammar);
		int r = matches(g, match_table[i].text);

		CHECK(r == match_table[i].want, "match %zu: '%s' gives %d, want %d", i,
		      match_table[i].text, r, match_table[i].want);
		exl_grammar_free(g);
	}
	/* A rejected byte leaves the state as it was; a prefix is accepted
	 * but not complete. */
	struct exl_grammar *g = compile("root ::= \"abc\" | \"abd\"");
	char err[256];
	struct exl_gmatch *m = exl_gmatch_create(g, err, sizeof(err));

	CHECK(exl_gmatch_feed(m, (const uint8_t *)"ab", 2, err, sizeof(err)) == 1, "prefix");
	CHECK(!exl_gmatch_complete(m) && exl_gmatch_can_continue(m), "prefix is not complete");
	CHECK(exl_gmatch_feed(m, (const uint8_t *)"x", 1, err, sizeof(err)) == 0, "rejected");
	CHECK(exl_gmatch_feed(m, (const uint8_t *)"d", 1, err, sizeof(err)) == 1, "after reject");
	CHECK(exl_gmatch_complete(m) && !exl_gmatch_can_continue(m), "complete, nothing more");
	CHECK(!exl_gmatch_reset(m, err, sizeof(err)) && !exl_gmatch_complete(m), "reset");
	CHECK(exl_gmatch_feed(m, (const uint8_t *)"abc", 3, err, sizeof(err)) == 1 &&
	      exl_gmatch_complete(m), "after reset");
	exl_gmatch_free(m);
	exl_grammar_free(g);

	/* Every llama.cpp-style construct in one grammar, byte by byte. */
	g = compile(json_gbnf);
	const char *doc = "{ \"k\" : [ -0.5 , \"\xe6\x97\xa5\xe6\x9c\xac\" ] }";

	m = exl_gmatch_create(g, err, sizeof(err));
	for (const char *p = doc; *p; p++)
		CHECK(exl_gmatch_feed(m, (const uint8_t *)p, 1, err, sizeof(err)) == 1,
		      "byte %d of the document", (int)(p - doc));
	CHECK(exl_gmatch_complete(m), "document complete");
	exl_gmatch_free(m);
	exl_grammar_free(g);
}

/* ---- bounds ---- */

static void case_limits(void)
{
	char err[512];
	struct exl_gmatch *m;
	struct exl_grammar *g;
	int r = 0;

	/* Two ways to close each bracket: the stacks double with every '('
	 * and never merge. */
	g = compile("root ::= e\ne ::= \"(\" e \")\" | \"(\" e \")\" \"x\" | \"\"");
	m = exl_gmatch_create(g, err, sizeof(err));
	for (int i = 0; i < 40 && r >= 0; i++)
		r = exl_gmatch_feed(m, (const uint8_t *)"(", 1, err, sizeof(err));
	CHECK(r < 0 && strstr(err, "grammar too ambiguous") && strstr(err, "parse stacks"),
	      "ambiguity: %d %s", r, err);
	exl_gmatch_free(m);
	exl_grammar_free(g);

	/* Nesting */
	g = compile("root ::= \"(\" root \")\" | \"\"");
	m = exl_gmatch_create(g, err, sizeof(err));
	r = 0;
	for (int i = 0; i < EXL_GMATCH_MAX_DEPTH + 10 && r >= 0; i++)
		r = exl_gmatch_feed(m, (const uint8_t *)"(", 1, err, sizeof(err));
	CHECK(r < 0 && strstr(err, "nesting deeper than"), "depth: %d %s", r, err);
	exl_gmatch_free(m);
	exl_grammar_free(g);

	/* Expansion: 2^24 ways through nested empties for one byte. */
	struct exl_gbnf_text { char s[4096]; } t;
	size_t at = 0;

	at += (size_t)snprintf(t.s + at, sizeof(t.s) - at, "root ::= r0 \"x\"\n");
	for (int i = 0; i < 24; i++)
		at += (size_t)snprintf(t.s + at, sizeof(t.s) - at, "r%d ::= r%d r%d | \"\"\n", i,
				       i + 1, i + 1);
	snprintf(t.s + at, sizeof(t.s) - at, "r24 ::= \"y\" | \"\"\n");
	g = exl_grammar_compile(t.s, strlen(t.s), err, sizeof(err));
	m = g ? exl_gmatch_create(g, err, sizeof(err)) : NULL;
	CHECK(!m && strstr(err, "grammar too ambiguous: more than") &&
	      strstr(err, "expansion steps"), "expansion: %s", err);
	exl_gmatch_free(m);
	exl_grammar_free(g);

	/* Long input through a repetition does not grow the stacks. */
	g = compile("root ::= ( [a-z] | \" \" )* \".\"");
	m = exl_gmatch_create(g, err, sizeof(err));
	for (int i = 0; i < 20000; i++)
		CHECK(exl_gmatch_feed(m, (const uint8_t *)"ab ", 3, err, sizeof(err)) == 1, "long");
	struct exl_gmatch_stats st;

	exl_gmatch_stats(m, &st);
	CHECK(st.stacks <= 4 && st.states < 10, "flat repetition: %zu stacks %zu states", st.stacks,
	      st.states);
	exl_gmatch_free(m);
	exl_grammar_free(g);

	/* Grammar size: 500 x 10000 elements after expansion. */
	char *big = malloc(500 * 16 + 16);

	if (!big)
		DIE("out of memory");
	strcpy(big, "root ::=");
	for (int i = 0; i < 500; i++)
		strcat(big, " \"a\"{10000}");
	err[0] = 0;
	g = exl_grammar_compile(big, strlen(big), err, sizeof(err));
	CHECK(!g && strstr(err, "grammar too large"), "size: %s", err);
	exl_grammar_free(g);
	free(big);
}

/* ---- masks ---- */

struct vocab {
	int n;
	char **s;
	size_t *len;
	struct exl_vocab_trie *t;
};

static const char *const pieces[] = {
	"a", "b", "c", "x", "y", "z", "0", "1", "9", " ", "\n", "\"", "\\", "{", "}", "[", "]",
	",", ":", "-", ".", "e", "true", "null", "\xc3\xa9", "\xe2\x98\x83", "\xf0\x9f\x98\x80",
	"\xc3", "\xa9", "\xe2", "\x98", "\x83", "\xf0", "\x9f", "\x80", "(", ")", "+", "*",
};

static void vocab_make(struct vocab *v, int n, int max_pieces)
{
	char err[256];
	const size_t np = sizeof(pieces) / sizeof(pieces[0]);

	v->n = n;
	v->s = calloc((size_t)n, sizeof(*v->s));
	v->len = calloc((size_t)n, sizeof(*v->len));
	if (!v->s || !v->len)
		DIE("out of memory");
	for (int i = 0; i < n; i++) {
		char buf[64] = "";
		int k = i < (int)np ? 1 : 1 + (int)below((unsigned)max_pieces);

		if (i < (int)np) {
			snprintf(buf, sizeof(buf), "%s", pieces[i]);
		} else {
			for (int j = 0; j < k; j++)
				strncat(buf, pieces[below((unsigned)np)], sizeof(buf) - strlen(buf) - 1);
		}
		/* A few empty tokens (control tokens have no bytes). */
		if (i % 97 == 96)
			buf[0] = 0;
		v->s[i] = strdup(buf);
		v->len[i] = strlen(buf);
	}
	v->t = exl_vocab_trie_build(n, (const char *const *)v->s, v->len, err, sizeof(err));
	if (!v->t)
		DIE("trie: %s", err);
}

static void vocab_free(struct vocab *v)
{
	for (int i = 0; i < v->n; i++)
		free(v->s[i]);
	free(v->s);
	free(v->len);
	exl_vocab_trie_put(v->t);
}

/* The mask by feeding every token from the current state. */
static void brute_mask(struct exl_gmatch *m, const struct vocab *v, uint32_t *mask)
{
	char err[256];
	int32_t saved = m->cur;
	size_t reclaim = m->reclaim_states;

	/* State ids must stay put while we go back to saved. */
	m->reclaim_states = SIZE_MAX;
	for (int i = 0; i < v->n; i++) {
		if (!v->len[i])
			continue;
		int r = exl_gmatch_feed(m, (const uint8_t *)v->s[i], v->len[i], err, sizeof(err));

		if (r < 0)
			DIE("brute force feed: %s", err);
		if (r == 1)
			mask[i >> 5] |= 1u << (i & 31);
		m->cur = saved;
	}
	m->reclaim_states = reclaim;
}

static int mask_walk(const char *grammar, const struct vocab *v, int steps, size_t reclaim)
{
	char err[256];
	struct exl_grammar *g = compile(grammar);
	struct exl_gmatch *m = exl_gmatch_create(g, err, sizeof(err));
	size_t words = ((size_t)v->n + 31) / 32;
	uint32_t *a = malloc(words * 4), *b = malloc(words * 4), *c = malloc(words * 4);
	int taken = 0;

	if (!m || !a || !b || !c)
		DIE("mask walk setup: %s", err);
	if (reclaim)
		m->reclaim_states = reclaim;
	for (int step = 0; step < steps; step++) {
		memset(a, 0, words * 4);
		memset(b, 0, words * 4);
		memset(c, 0, words * 4);
		if (exl_gmatch_mask(m, v->t, a, err, sizeof(err)) ||
		    exl_gmatch_mask_from(m, v->t, EXL_VOCAB_TRIE_ROOT, -1, c, err, sizeof(err)))
			DIE("mask: %s", err);
		brute_mask(m, v, b);
		if (memcmp(a, b, words * 4) || memcmp(c, b, words * 4)) {
			for (int i = 0; i < v->n; i++) {
				bool x = a[i >> 5] >> (i & 31) & 1, y = b[i >> 5] >> (i & 31) & 1;
				bool z = c[i >> 5] >> (i & 31) & 1;

				if (x != y || z != y) {
					CHECK(0, "grammar %.40s... step %d: token %d '%s' cached %d walk %d "
					      "brute %d", grammar, step, i, v->s[i], x, z, y);
					break;
				}
			}
			break;
		}
		/* Go on with a random allowed token. */
		int n_allowed = 0, pick = -1;

		for (int i = 0; i < v->n; i++)
			n_allowed += b[i >> 5] >> (i & 31) & 1;
		if (!n_allowed) {
			/* Finished (or stuck): start again. */
			if (exl_gmatch_reset(m, err, sizeof(err)))
				DIE("reset: %s", err);
			continue;
		}
		int k = (int)below((unsigned)n_allowed);

		for (int i = 0; i < v->n && pick < 0; i++)
			if (b[i >> 5] >> (i & 31) & 1 && k-- == 0)
				pick = i;
		CHECK(exl_gmatch_feed(m, (const uint8_t *)v->s[pick], v->len[pick], err,
				      sizeof(err)) == 1, "allowed token refused: %s", err);
		taken++;
	}
	free(a);
	free(b);
	free(c);
	exl_gmatch_free(m);
	exl_grammar_free(g);
	return taken;
}

static void case_mask(void)
{
	static const char *const grammars[] = {
		json_gbnf,
		arith_gbnf,
		"root ::= [a-z ]{0,40} \".\"",
		"root ::= \"\\\"\" ( [^\"\\\\] | \"\\\\\" . ){2,30} \"\\\"\" \"\\n\"?",
		"root ::= ( [a-c] [0-9]{1,5} \",\" ){0,12} ( \"x\" | \"\xe2\x98\x83\" )+",
		"root ::= ( \"(\" ( [a-z] | \" \" ){0,9} )* \")\"{1,3}",
		"root ::= [^\\x00-\\x7f]* \"z\"",
		"root ::= ( \"true\" | \"null\" | [0-9]+ ) ( \",\" ws ( \"true\" | [0-9] ) ){,20}\n"
		"ws ::= \" \"?",
	};
	struct vocab v;

	/* Tokens of up to 8 pieces (32 bytes): deep repetition levels are cut at
	 * the longest token and at EXL_VOCAB_SHORT bytes (the long ones fed). */
	vocab_make(&v, 1000, 8);
	for (size_t i = 0; i < sizeof(grammars) / sizeof(grammars[0]); i++) {
		int taken = mask_walk(grammars[i], &v, 200, 0);

		if (getenv("GRAMMAR_VERBOSE"))
			printf("grammar %zu: %d tokens\n", i, taken);
		CHECK(taken > 5, "grammar %zu: only %d tokens were allowed in a row", i, taken);
		/* again with the tables rebuilt every few states */
		mask_walk(grammars[i], &v, 100, 24);
	}
	vocab_free(&v);
}

/* The tree itself: every token found at its bytes' node, children sorted. */
static void case_trie(void)
{
	struct vocab v;

	vocab_make(&v, 2000, 8);
	const struct exl_vocab_trie *t = v.t;
	int found = 0, expected = 0;

	for (int i = 0; i < v.n; i++) {
		size_t len;
		const uint8_t *p = exl_vocab_trie_token(t, i, &len);
		uint32_t node = EXL_VOCAB_TRIE_ROOT;

		CHECK(len == v.len[i] && (!len || !memcmp(p, v.s[i], len)), "token %d bytes", i);
		if (!len)
			continue;
		expected++;
		for (size_t k = 0; k < len && node != UINT32_MAX; k++) {
			node = exl_vocab_trie_child(t, node, p[k]);
			if (!node)
				node = UINT32_MAX;
		}
		CHECK(node != UINT32_MAX, "token %d: no node for its bytes", i);
		if (node == UINT32_MAX)
			continue;
		const struct exl_vocab_node *nd = &t->nodes[node];

		for (uint32_t k = 0; k < nd->n_tok; k++)
			found += t->toks[nd->tok_first + k] == i;
	}
	CHECK(found == expected, "tokens at their nodes: %d of %d", found, expected);
	for (uint32_t n = 0; n < t->n_nodes; n++) {
		const struct exl_vocab_node *nd = &t->nodes[n];

		for (uint32_t c = 1; c < nd->n_child; c++)
			CHECK(t->nodes[nd->first_child + c - 1].byte < t->nodes[nd->first_child + c].byte,
			      "node %u: children out of order", n);
	}
	vocab_free(&v);
}

/* ---- fuzz ---- */

static const char *const seeds[] = {
	json_gbnf,
	arith_gbnf,
	"root ::= [a-z]+ (\" \" [a-z]+){0,5} \".\"",
	"root ::= item{2,4}\nitem ::= \"<\" [^>]* \">\" | \"\\u00e9\"",
	"root ::= (\"a\" | \"b\" root \"c\")? \"d\"",
	"root ::= x | y\nx ::= \"x\"{3,} # c\ny ::= [\\x00-\\xff]{,3}",
};

static const char fuzz_chars[] = "\"[]()|*+?{},:=\\-^.#\n ax0123456789uUn";

static char *mutate(const char *src, size_t *out_len)
{
	size_t n = strlen(src), cap = n * 2 + 64;
	char *s = malloc(cap);
	int edits = 1 + (int)below(3);

	if (!s)
		DIE("out of memory");
	memcpy(s, src, n);
	for (int e = 0; e < edits; e++) {
		size_t at = n ? below((unsigned)n) : 0;

		switch (below(5)) {
		case 0: /* flip to a meaningful character */
			if (n)
				s[at] = fuzz_chars[below(sizeof(fuzz_chars) - 1)];
			break;
		case 1: /* insert one */
			if (n + 1 < cap) {
				memmove(s + at + 1, s + at, n - at);
				s[at] = fuzz_chars[below(sizeof(fuzz_chars) - 1)];
				n++;
			}
			break;
		case 2: { /* delete a run */
			size_t k = below(8);

			if (at + k > n)
				k = n - at;
			memmove(s + at, s + at + k, n - at - k);
			n -= k;
			break;
		}
		case 3: { /* duplicate a run */
			size_t k = below(12);

			if (at + k > n)
				k = n - at;
			if (n + k < cap) {
				memmove(s + at + k, s + at, n - at);
				n += k;
			}
			break;
		}
		default: /* any byte */
			if (n)
				s[at] = (char)below(256);
			break;
		}
	}
	*out_len = n;
	return s;
}

static void case_fuzz(int iterations)
{
	struct vocab v;
	int compiled = 0;
	size_t words;
	uint32_t *mask;

	vocab_make(&v, 300, 4);
	words = ((size_t)v.n + 31) / 32;
	mask = malloc(words * 4);
	if (!mask)
		DIE("out of memory");
	for (int it = 0; it < iterations; it++) {
		size_t n;
		char *text = mutate(seeds[below(sizeof(seeds) / sizeof(seeds[0]))], &n);
		char err[512];
		struct exl_grammar *g = exl_grammar_compile(text, n, err, sizeof(err));

		if (!g) {
			CHECK(err[0], "iteration %d: refused without a message", it);
			free(text);
			continue;
		}
		compiled++;
		struct exl_gmatch *m = exl_gmatch_create(g, err, sizeof(err));

		if (m) {
			for (int step = 0; step < 24; step++) {
				if (step % 3 == 0) {
					memset(mask, 0, words * 4);
					if (exl_gmatch_mask(m, v.t, mask, err, sizeof(err)))
						break;
				}
				uint8_t b = below(3) ? (uint8_t)fuzz_chars[below(sizeof(fuzz_chars) - 1)] :
					    (uint8_t)below(256);

				if (exl_gmatch_feed(m, &b, 1, err, sizeof(err)) < 0)
					break;
			}
		}
		exl_gmatch_free(m);
		exl_grammar_free(g);
		free(text);
	}
	printf("fuzz: %d mutated grammars, %d compiled\n", iterations, compiled);
	CHECK(compiled > iterations / 20, "too few mutated grammars compiled (%d)", compiled);
	free(mask);
	vocab_free(&v);
}

int main(int argc, char **argv)
{
	const char *which = argc > 1 ? argv[1] : "all";
	int iterations = argc > 2 ? atoi(argv[2]) : 10000;
	bool all = !strcmp(which, "all"), found = false;

	static const struct {
		const char *name;
		void (*fn)(void);
	} cases[] = {
		{ "utf8", case_utf8 }, { "errors", case_errors }, { "match", case_match },
		{ "limits", case_limits }, { "mask", case_mask }, { "trie", case_trie },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (!all && strcmp(which, cases[i].name))
			continue;
		found = true;
		int before = check_failures;

		cases[i].fn();
		printf("%-8s %s\n", cases[i].name, check_failures == before ? "ok" : "FAILED");
	}
	if (all || !strcmp(which, "fuzz")) {
		int before = check_failures;

		found = true;
		case_fuzz(iterations);
		printf("%-8s %s\n", "fuzz", check_failures == before ? "ok" : "FAILED");
	}
	if (!found)
		DIE("unknown case '%s'", which);
	return check_failures ? 1 : 0;
}
