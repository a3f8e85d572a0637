/* Constrained decoding filters (daemon/core/grammar/filter.h) from a GBNF grammar, a
 * JSON schema or a regular expression.
 *
 * The filter judges the bytes each token adds to the output text: a token
 * is allowed when its bytes continue a valid parse, found by walking the
 * vocabulary prefix tree (daemon/core/grammar/vocab_trie.h) with the parse state
 * (daemon/core/grammar/grammar.h).  Tokens that produce no text (control tokens) are
 * never allowed; the generator adds the end-of-generation ids once the
 * filter is complete.
 */
#ifndef EXL_GRAMMAR_FILTER_H
#define EXL_GRAMMAR_FILTER_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/core/grammar/filter.h"

struct exl_tokenizer;
struct exl_grammar;
struct exl_vocab_trie;

enum exl_constraint {
	EXL_CONSTRAINT_GRAMMAR,      /* GBNF text */
	EXL_CONSTRAINT_JSON_SCHEMA,  /* a JSON schema, as JSON text */
	EXL_CONSTRAINT_REGEX,        /* a regular expression the whole output matches */
};

/* "grammar", "json_schema", "regex". */
const char *exl_constraint_name(enum exl_constraint k);

/* The GBNF text a constraint compiles to (malloc'ed, NUL-terminated; a
 * copy for a grammar).  NULL with a message. */
char *exl_constraint_gbnf(enum exl_constraint k, const char *text, size_t len, char *err,
			  size_t errlen);

/* The compiled grammar of a constraint.  NULL with a message. */
struct exl_grammar *exl_constraint_compile(enum exl_constraint k, const char *text, size_t len,
					   char *err, size_t errlen);

struct exl_grammar_filter_opts {
	/* End the job as soon as the constraint is complete. */
	bool prefer_eos;
	/* Bytes the generated tokens spell first that are not part of the
	 * constrained output (token healing's re-generated prompt tail). */
	const char *prefix;
	size_t prefix_len;
	/* The first token's leading space is dropped from the output
	 * (SentencePiece's dummy prefix when the prompt is empty). */
	bool strip_leading_space;
};

/* A filter over tok's vocabulary.  NULL with a message that starts with
 * the constraint's name ("json_schema: at /properties/age: ..."). */
struct exl_filter *exl_grammar_filter_create(const struct exl_tokenizer *tok,
					     enum exl_constraint k, const char *text, size_t len,
					     const struct exl_grammar_filter_opts *o,
					     char *err, size_t errlen);

/* The same over a given tree and grammar: takes over g and a reference to
 * t (both released when the filter is freed, also on failure). */
struct exl_filter *exl_grammar_filter_new(struct exl_vocab_trie *t, struct exl_grammar *g,
					  const struct exl_grammar_filter_opts *o,
					  char *err, size_t errlen);

#endif
