/* The generator's filter over a compiled grammar and the shared
 * vocabulary tree.
 *
 * Before the grammar sees a token's bytes, two things may come off the
 * front of the output: token healing's prefix (bytes of the prompt the
 * first tokens re-spell, which the output does not repeat) and, on an
 * empty SentencePiece prompt, the first token's leading space (which the
 * decoder drops).  Their masks are computed by walking the tree past them
 * by hand; afterwards every mask comes from the matcher's cache or walk.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/grammar/grammar.h"
#include "daemon/core/grammar/grammar_filter.h"
#include "daemon/core/grammar/json_schema.h"
#include "daemon/core/grammar/regex_grammar.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "daemon/core/grammar/vocab_trie.h"

struct gfilter {
	struct exl_filter f;
	struct exl_grammar *g;
	struct exl_gmatch *m;
	struct exl_vocab_trie *t;
	bool prefer_eos;
	char *prefix;
	size_t prefix_len;
	size_t prefix_done;
	bool strip;            /* drop the first token's leading space */
	bool started;          /* a token with bytes was accepted */
};

const char *exl_constraint_name(enum exl_constraint k)
{
	switch (k) {
	case EXL_CONSTRAINT_GRAMMAR: return "grammar";
	case EXL_CONSTRAINT_JSON_SCHEMA: return "json_schema";
	case EXL_CONSTRAINT_REGEX: return "regex";
	}
	return "constraint";
}

char *exl_constraint_gbnf(enum exl_constraint k, const char *text, size_t len, char *err,
			  size_t errlen)
{
	char *s;

	if (!text) {
		snprintf(err, errlen, "no text");
		return NULL;
	}
	switch (k) {
	case EXL_CONSTRAINT_JSON_SCHEMA:
		return exl_json_schema_to_gbnf(text, len, err, errlen);
	case EXL_CONSTRAINT_REGEX:
		return exl_regex_to_gbnf(text, len, err, errlen);
	case EXL_CONSTRAINT_GRAMMAR:
		s = malloc(len + 1);
		if (!s) {
			snprintf(err, errlen, "out of memory");
			return NULL;
		}
		memcpy(s, text, len);
		s[len] = 0;
		return s;
	}
	snprintf(err, errlen, "unknown constraint kind %d", (int)k);
	return NULL;
}

struct exl_grammar *exl_constraint_compile(enum exl_constraint k, const char *text, size_t len,
					   char *err, size_t errlen)
{
	struct exl_grammar *g;
	char *gbnf;

	if (k == EXL_CONSTRAINT_GRAMMAR)
		return exl_grammar_compile(text, len, err, errlen);
	gbnf = exl_constraint_gbnf(k, text, len, err, errlen);
	if (!gbnf)
		return NULL;
	g = exl_grammar_compile(gbnf, strlen(gbnf), err, errlen);
	if (!g) {
		/* A schema's $refs can make rules the compiler refuses: a
		 * recursion no finite value ends ({"items": {"$ref": "#"},
		 * "minItems": 1}), or one that writes nothing before it comes
		 * back ({"anyOf": [..., {"$ref": "#"}]}).  Say so in the
		 * schema's terms.  Anything else is a converter bug, but say
		 * what happened rather than hide it. */
		const char *why = "";
		char tmp[600];

		if (k == EXL_CONSTRAINT_JSON_SCHEMA && strstr(err, "can never finish"))
			why = "the schema allows no finite value (its $refs recurse with no way out); ";
		else if (k == EXL_CONSTRAINT_JSON_SCHEMA && strstr(err, "without consuming input"))
			why = "a $ref comes back to itself before anything is written, which is "
			      "not supported; ";
		snprintf(tmp, sizeof(tmp), "%sthe generated grammar does not compile: %s", why, err);
		snprintf(err, errlen, "%s", tmp);
	}
	free(gbnf);
	return g;
}

/* ---- the filter ---- */

static struct gfilter *gf(const struct exl_filter *f)
{
	return (struct gfilter *)f->priv;
}

static int gf_allowed(struct exl_filter *f, uint32_t *mask, int n_vocab, char *err, size_t errlen)
{
	struct gfilter *s = gf(f);
	const struct exl_vocab_trie *t = s->t;

	/* A model may have more rows than its tokenizer has tokens (padding);
	 * those ids have no text and stay masked. */
	if (n_vocab < t->n_vocab) {
		snprintf(err, errlen, "the mask has %d tokens, the tokenizer %d", n_vocab,
			 t->n_vocab);
		return -1;
	}
	if (s->prefix_done < s->prefix_len) {
		/* Tokens inside the rest of the prefix, or through it and on
		 * into the grammar. */
		uint32_t node = EXL_VOCAB_TRIE_ROOT;

		for (size_t i = s->prefix_done; i < s->prefix_len; i++) {
			node = exl_vocab_trie_child(t, node, (uint8_t)s->prefix[i]);
			if (!node)
				return 0;
			const struct exl_vocab_node *nd = &t->nodes[node];

			for (uint32_t k = 0; k < nd->n_tok; k++) {
				uint32_t id = (uint32_t)t->toks[nd->tok_first + k];

				mask[id >> 5] |= 1u << (id & 31);
			}
		}
		return exl_gmatch_mask_from(s->m, t, node, -1, mask, err, errlen);
	}
	if (s->strip && !s->started) {
		uint32_t sp = exl_vocab_trie_child(t, EXL_VOCAB_TRIE_ROOT, ' ');

		if (!sp)
			return exl_gmatch_mask(s->m, t, mask, err, errlen);
		/* A token starting with a space gives the grammar what follows
		 * the space; a lone space gives it nothing. */
		const struct exl_vocab_node *nd = &t->nodes[sp];

		for (uint32_t k = 0; k < nd->n_tok; k++) {
			uint32_t id = (uint32_t)t->toks[nd->tok_first + k];

			mask[id >> 5] |= 1u << (id & 31);
		}
		if (exl_gmatch_mask_from(s->m, t, EXL_VOCAB_TRIE_ROOT, ' ', mask, err, errlen))
			return -1;
		return exl_gmatch_mask_from(s->m, t, sp, -1, mask, err, errlen);
	}
	return exl_gmatch_mask(s->m, t, mask, err, errlen);
}

static bool gf_complete(const struct exl_filter *f)
{
	const struct gfilter *s = gf(f);

	return s->prefix_done == s->prefix_len && exl_gmatch_complete(s->m);
}

static int gf_accept(struct exl_filter *f, int32_t token, char *err, size_t errlen)
{
	struct gfilter *s = gf(f);
	size_t len;
	const uint8_t *p = exl_vocab_trie_token(s->t, token, &len);

	if (!p) {
		snprintf(err, errlen, "token %d is outside the vocabulary", token);
		return -1;
	}
	if (!len) {
		/* A control token: only an end-of-generation id once complete
		 * reaches here (the generator allows those then). */
		if (gf_complete(f))
			return 0;
		snprintf(err, errlen, "token %d produces no text and the constraint is not complete",
			 token);
		return -1;
	}
	if (s->strip && !s->started && p[0] == ' ') {
		p++;
		len--;
	}
	s->started = true;
	if (s->prefix_done < s->prefix_len) {
		size_t k = s->prefix_len - s->prefix_done;

		if (k > len)
			k = len;
		if (memcmp(p, s->prefix + s->prefix_done, k)) {
			snprintf(err, errlen, "token %d does not spell the healed prompt text", token);
			return -1;
		}
		s->prefix_done += k;
		p += k;
		len -= k;
	}
	if (!len)
		return 0;
	int r = exl_gmatch_feed(s->m, p, len, err, errlen);

	if (r < 0)
		return -1;
	if (!r) {
		snprintf(err, errlen, "token %d is not allowed by the constraint here", token);
		return -1;
	}
	return 0;
}

static bool gf_prefer_eos(const struct exl_filter *f)
{
	return gf(f)->prefer_eos;
}

static int gf_reset(struct exl_filter *f, char *err, size_t errlen)
{
	struct gfilter *s = gf(f);

	s->prefix_done = 0;
	s->started = false;
	return exl_gmatch_reset(s->m, err, errlen);
}

static void gf_free(struct exl_filter *f)
{
	struct gfilter *s = gf(f);

	exl_gmatch_free(s->m);
	exl_grammar_free(s->g);
	exl_vocab_trie_put(s->t);
	free(s->prefix);
	free(s);
}

static const struct exl_filter_ops gf_ops = {
	.allowed = gf_allowed,
	.accept = gf_accept,
	.is_complete = gf_complete,
	.prefer_eos = gf_prefer_eos,
	.reset = gf_reset,
	.free = gf_free,
};

struct exl_filter *exl_grammar_filter_new(struct exl_vocab_trie *t, struct exl_grammar *g,
					  const struct exl_grammar_filter_opts *o,
					  char *err, size_t errlen)
{
	struct gfilter *s = calloc(1, sizeof(*s));

	if (!s) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	s->f.ops = &gf_ops;
	s->f.priv = s;
	s->t = t;
	s->g = g;
	t = NULL;
	g = NULL;
	if (o) {
		s->prefer_eos = o->prefer_eos;
		s->strip = o->strip_leading_space;
		if (o->prefix_len) {
			s->prefix = malloc(o->prefix_len);
			if (!s->prefix) {
				snprintf(err, errlen, "out of memory");
				goto fail;
			}
			memcpy(s->prefix, o->prefix, o->prefix_len);
			s->prefix_len = o->prefix_len;
		}
	}
	s->m = exl_gmatch_create(s->g, err, errlen);
	if (!s->m)
		goto fail;
	return &s->f;
fail:
	if (s)
		gf_free(&s->f);
	exl_vocab_trie_put(t);
	exl_grammar_free(g);
	return NULL;
}

struct exl_filter *exl_grammar_filter_create(const struct exl_tokenizer *tok,
					     enum exl_constraint k, const char *text, size_t len,
					     const struct exl_grammar_filter_opts *o,
					     char *err, size_t errlen)
{
	char msg[512];
	struct exl_grammar *g = exl_constraint_compile(k, text, len, msg, sizeof(msg));
	struct exl_vocab_trie *t;
	struct exl_filter *f;

	if (!g)
		goto fail;
	t = exl_vocab_trie_get(tok, msg, sizeof(msg));
	if (!t) {
		exl_grammar_free(g);
		goto fail;
	}
	f = exl_grammar_filter_new(t, g, o, msg, sizeof(msg));
	if (!f)
		goto fail;
	return f;
fail:
	snprintf(err, errlen, "%s: %s", exl_constraint_name(k), msg);
	return NULL;
}
