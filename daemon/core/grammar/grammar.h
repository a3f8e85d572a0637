/* GBNF grammars (the format llama.cpp users know) compiled to a byte-level
 * form, and an incremental matcher over it.
 *
 * Text: rules `name ::= alternatives`; alternatives separated by `|`;
 * sequences of "literals" (escapes \n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH),
 * [character classes] with ranges and [^negation], `.` (any character),
 * rule names, ( groups ), and the postfix repetitions * + ? {m} {m,} {m,n}
 * {,n}; `#` starts a comment.  The start rule is `root`.  Characters are
 * Unicode code points, matched as their UTF-8 bytes, so a token may end in
 * the middle of a character.  docs/grammar.md is the reference.
 *
 * A compiled grammar is immutable and may be shared by threads.  A matcher
 * (one job's parse state) is used by one thread at a time.
 */
#ifndef EXL_GRAMMAR_H
#define EXL_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct exl_grammar;
struct exl_gmatch;
struct exl_vocab_trie;

/* Bounds on what a grammar may ask for. */
#define EXL_GRAMMAR_MAX_TEXT (4u << 20)     /* bytes of grammar text */
#define EXL_GRAMMAR_MAX_REPEAT 10000        /* m and n of {m,n} */
#define EXL_GRAMMAR_MAX_ELEMS (1u << 22)    /* elements after expanding repetitions */
#define EXL_GRAMMAR_MAX_NESTING 256         /* nested ( groups ) */

/* Bounds on a matcher: exceeding one is an error, never a hang. */
#define EXL_GMATCH_MAX_STACKS 8192          /* parse stacks alive at once (ambiguity) */
#define EXL_GMATCH_MAX_DEPTH 8192           /* rule nesting of one stack */
#define EXL_GMATCH_MAX_STEPS (1u << 20)     /* expansion steps for one byte */

/* Parses and compiles len bytes of GBNF.  NULL with a message naming the
 * line and column on a syntax error, the rule on an undefined, left-
 * recursive or never-ending rule. */
struct exl_grammar *exl_grammar_compile(const char *text, size_t len, char *err, size_t errlen);
void exl_grammar_free(struct exl_grammar *g);

/* Sizes, for tests and logs. */
size_t exl_grammar_n_rules(const struct exl_grammar *g);
size_t exl_grammar_n_elems(const struct exl_grammar *g);

/* A parse state over g (borrowed: g must outlive the matcher). */
struct exl_gmatch *exl_gmatch_create(const struct exl_grammar *g, char *err, size_t errlen);
void exl_gmatch_free(struct exl_gmatch *m);

/* Back to the start state. */
int exl_gmatch_reset(struct exl_gmatch *m, char *err, size_t errlen);

/* Feeds n bytes.  1: accepted, the state moved past them; 0: the grammar
 * rejects them, the state is unchanged; -1: a bound was exceeded
 * (message in err), the state is unchanged. */
int exl_gmatch_feed(struct exl_gmatch *m, const uint8_t *p, size_t n, char *err, size_t errlen);

/* True when the bytes so far form a complete match of root. */
bool exl_gmatch_complete(const struct exl_gmatch *m);
/* True when some byte can continue the bytes so far. */
bool exl_gmatch_can_continue(const struct exl_gmatch *m);

/* Sets bit t of mask (mask[t / 32] >> (t % 32) & 1) for every token t of
 * the vocabulary tree whose bytes continue the current state.  mask is not
 * cleared first.  Masks are cached per state.  0, or -1 with a message. */
int exl_gmatch_mask(struct exl_gmatch *m, const struct exl_vocab_trie *t, uint32_t *mask,
		    char *err, size_t errlen);

/* The same for the tokens below tree node `node` only, judging the bytes
 * after node's prefix; with skip_byte >= 0, node's child by that byte is
 * left out.  Not cached. */
int exl_gmatch_mask_from(struct exl_gmatch *m, const struct exl_vocab_trie *t, uint32_t node,
			 int skip_byte, uint32_t *mask, char *err, size_t errlen);

/* Counters, for tests and the benchmark. */
struct exl_gmatch_stats {
	size_t stacks;        /* parse stacks of the current state */
	size_t states;        /* distinct states (stack sets) seen since the last reclaim */
	size_t transitions;   /* memoised byte transitions */
	size_t mask_hits;     /* masks served from the cache */
	size_t mask_walks;    /* masks computed by walking the trie */
	size_t edges_walked;  /* trie edges visited by those walks */
	size_t reclaims;      /* times the memo tables were rebuilt to bound memory */
};
void exl_gmatch_stats(const struct exl_gmatch *m, struct exl_gmatch_stats *s);

#endif
