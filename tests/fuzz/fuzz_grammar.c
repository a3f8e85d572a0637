/* libFuzzer target for the constraint engine: GBNF grammars, JSON schemas
 * and regular expressions, compiled and then run.  The first input byte
 * picks the language, the second how many of the last bytes are text to
 * match instead of constraint; the rest is the constraint.  It checks that
 *   - compiling never crashes and a refusal always has a message;
 *   - a compiled constraint's matcher takes any bytes without crashing,
 *     hanging or growing without bound (its limits are errors);
 *   - every token a mask allows is accepted when fed, and the mask from
 *     the cache equals the one walked afresh.
 * See docs/fuzzing.md. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/grammar/grammar.h"
#include "daemon/core/grammar/grammar_filter.h"
#include "daemon/core/grammar/grammar_internal.h"
#include "daemon/core/grammar/vocab_trie.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const pieces[] = {
	"a", "b", "z", "0", "7", " ", "\n", "\"", "\\", "{", "}", "[", "]", ",", ":", "-", ".",
	"true", "null", "ab", "ba", "00", "\":", "\xc3\xa9", "\xe2\x98\x83", "\xf0\x9f\x98\x80",
	"\xc3", "\xa9", "\xe2", "\x98", "\xff", "(", ")", "#", "@", "x1", "  ", "\"a\"",
};
#define N_TOK (sizeof(pieces) / sizeof(pieces[0]))

static struct exl_vocab_trie *trie;
static size_t lens[N_TOK];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char err[256];

	(void)argc;
	(void)argv;
	for (size_t i = 0; i < N_TOK; i++)
		lens[i] = strlen(pieces[i]);
	trie = exl_vocab_trie_build((int32_t)N_TOK, pieces, lens, err, sizeof(err));
	if (!trie) {
		fprintf(stderr, "fuzz_grammar: %s\n", err);
		abort();
	}
	return 0;
}

static void check_mask(struct exl_gmatch *m)
{
	uint32_t a[(N_TOK + 31) / 32] = { 0 }, b[(N_TOK + 31) / 32] = { 0 };
	char err[256];

	if (exl_gmatch_mask(m, trie, a, err, sizeof(err)) ||
	    exl_gmatch_mask_from(m, trie, EXL_VOCAB_TRIE_ROOT, -1, b, err, sizeof(err)))
		return;
	if (memcmp(a, b, sizeof(a)))
		abort();
	/* Feeding an allowed token succeeds; ids stay put meanwhile. */
	size_t reclaim = m->reclaim_states;
	int32_t saved = m->cur;

	m->reclaim_states = SIZE_MAX;
	for (size_t i = 0; i < N_TOK; i++) {
		int r = exl_gmatch_feed(m, (const uint8_t *)pieces[i], lens[i], err, sizeof(err));

		if (r >= 0 && (r == 1) != (int)(a[i / 32] >> (i % 32) & 1))
			abort();
		m->cur = saved;
	}
	m->reclaim_states = reclaim;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum exl_constraint kinds[] = {
		EXL_CONSTRAINT_GRAMMAR, EXL_CONSTRAINT_JSON_SCHEMA, EXL_CONSTRAINT_REGEX,
	};
	char err[512];

	if (size < 2)
		return 0;
	enum exl_constraint k = kinds[data[0] % 3];
	size_t n = size - 2, in = data[1] % (n + 1);
	const char *text = (const char *)data + 2;
	const uint8_t *input = data + 2 + (n - in);

	err[0] = 0;
	struct exl_grammar *g = exl_constraint_compile(k, text, n - in, err, sizeof(err));

	if (!g) {
		if (!err[0])
			abort();
		return 0;
	}
	struct exl_gmatch *m = exl_gmatch_create(g, err, sizeof(err));

	if (m) {
		m->reclaim_states = 64;
		check_mask(m);
		for (size_t i = 0; i < in; i++) {
			if (exl_gmatch_feed(m, input + i, 1, err, sizeof(err)) < 0)
				break;
			if (i % 4 == 3)
				check_mask(m);
		}
	}
	exl_gmatch_free(m);
	exl_grammar_free(g);
	return 0;
}
