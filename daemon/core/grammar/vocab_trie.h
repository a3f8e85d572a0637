/* A prefix tree of a vocabulary's token bytes, for computing constrained
 * decoding masks by walking the tree and a parse state together (a whole
 * subtree is skipped as soon as the grammar rejects its prefix).
 *
 * Built once per tokenizer and shared read-only by every job on it:
 * exl_vocab_trie_get() returns a reference from a process-wide cache keyed
 * by the vocabulary's content, so a model loaded twice, or unloaded and
 * loaded again, reuses one tree.  Safe to use from many threads.
 *
 * Tokens with no bytes (control tokens, which produce no text) are not in
 * the tree: a grammar never allows them.
 */
#ifndef EXL_VOCAB_TRIE_H
#define EXL_VOCAB_TRIE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct exl_tokenizer;

/* Node 0 is the root.  A node's children are contiguous, sorted by byte;
 * the tokens whose bytes end exactly at it are toks[tok_first ..
 * tok_first + n_tok). */
struct exl_vocab_node {
	uint32_t first_child;
	uint32_t tok_first;
	uint32_t n_tok;
	uint16_t n_child;
	uint8_t byte;          /* the edge into this node */
	uint8_t depth;         /* bytes from the root, at most 255 */
};

struct exl_vocab_trie {
	int32_t n_vocab;
	uint32_t n_nodes;
	struct exl_vocab_node *nodes;
	int32_t *toks;
	uint32_t *tok_off;     /* [n_vocab + 1]: token t's bytes are bytes[tok_off[t] .. tok_off[t + 1]) */
	uint8_t *bytes;
	uint32_t max_len;      /* bytes of the longest token */
	int32_t *long_ids;     /* the tokens longer than EXL_VOCAB_SHORT bytes */
	uint32_t n_long;
	/* the cache's */
	uint64_t fingerprint;
	int refs;
	bool cached;
	uint64_t released_at;
	struct exl_vocab_trie *next;
};

#define EXL_VOCAB_TRIE_ROOT 0u
/* Masks treat the (few) tokens longer than this apart: see grammar_mask.c. */
#define EXL_VOCAB_SHORT 16u
#define EXL_VOCAB_MAX_TOKEN_BYTES 65536u

/* The shared tree of tok's vocabulary (token bytes as exl_token_bytes
 * gives them without special tokens).  Release with exl_vocab_trie_put.
 * NULL with a message on failure. */
struct exl_vocab_trie *exl_vocab_trie_get(const struct exl_tokenizer *tok, char *err,
					  size_t errlen);

/* A private tree of n_vocab tokens, token i being len[i] bytes at
 * bytes[i] (tests, tools).  Released with exl_vocab_trie_put too. */
struct exl_vocab_trie *exl_vocab_trie_build(int32_t n_vocab, const char *const *bytes,
					    const size_t *len, char *err, size_t errlen);

void exl_vocab_trie_put(struct exl_vocab_trie *t);

static inline const uint8_t *exl_vocab_trie_token(const struct exl_vocab_trie *t, int32_t id,
						   size_t *len)
{
	if (id < 0 || id >= t->n_vocab) {
		*len = 0;
		return NULL;
	}
	*len = t->tok_off[id + 1] - t->tok_off[id];
	return t->bytes + t->tok_off[id];
}

/* The child of node by byte b, or 0 (the root is nobody's child). */
uint32_t exl_vocab_trie_child(const struct exl_vocab_trie *t, uint32_t node, uint8_t b);

#endif
