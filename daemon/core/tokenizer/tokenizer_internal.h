/* What the tokenizer's files share: the loaded vocabulary, its lookup
 * tables and the per-kind encoders.  Not for use outside daemon/tokenizer*.c
 * and their tests.
 */
#ifndef EXL_TOKENIZER_INTERNAL_H
#define EXL_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/utf8.h"
#include "daemon/core/tokenizer/tokenizer.h"

/* Token attributes (tokenizer.ggml.token_type, plus strip flags). */
enum {
	TOK_ATTR_NORMAL = 1u << 0,
	TOK_ATTR_UNKNOWN = 1u << 1,
	TOK_ATTR_CONTROL = 1u << 2,
	TOK_ATTR_USER_DEFINED = 1u << 3,
	TOK_ATTR_UNUSED = 1u << 4,
	TOK_ATTR_BYTE = 1u << 5,
	TOK_ATTR_UNDEFINED = 1u << 6,
	TOK_ATTR_LSTRIP = 1u << 7, /* eats whitespace before it when parsed out */
	TOK_ATTR_RSTRIP = 1u << 8, /* eats whitespace after it */
};

/* Hidden on decode unless decode_special. */
#define TOK_ATTR_SPECIAL (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL)

/* Longest text we accept to encode, so every position fits an int32 even
 * after SentencePiece's 3-byte space escaping. */
#define TOK_MAX_TEXT ((size_t)1 << 28)

/* ---- string table and hash maps (tokenizer_map.c) ---- */

/* Byte strings by index: spans into one growable arena. */
struct tok_strtab {
	char *arena;
	size_t arena_len, arena_cap;
	uint64_t *span; /* offset << 24 | length: lengths < 16 MiB */
	uint32_t n, cap;
};

#define TOK_STR_MAX_LEN ((1u << 24) - 1)

int exl_tok_strtab_add(struct tok_strtab *t, const char *s, size_t len);
void exl_tok_strtab_free(struct tok_strtab *t);

static inline const char *tok_strtab_get(const struct tok_strtab *t, uint32_t i, size_t *len)
{
	*len = (size_t)(t->span[i] & TOK_STR_MAX_LEN);
	return t->arena + (t->span[i] >> 24);
}

/* String -> index over a tok_strtab (open addressing, index + 1 per slot). */
struct tok_strmap {
	uint32_t *slot;
	uint32_t mask;
	uint32_t used;
};

/* Sizes the map for n entries.  -1 on allocation failure. */
int exl_tok_strmap_init(struct tok_strmap *m, uint32_t n);
void exl_tok_strmap_free(struct tok_strmap *m);
/* Maps t's string i; a string already present now maps to i (last wins). */
void exl_tok_strmap_put(struct tok_strmap *m, const struct tok_strtab *t, uint32_t i);
/* Grows the map when it is getting full.  -1 on allocation failure. */
int exl_tok_strmap_reserve(struct tok_strmap *m, const struct tok_strtab *t, uint32_t extra);
/* The index of s, or -1. */
int64_t exl_tok_strmap_get(const struct tok_strmap *m, const struct tok_strtab *t, const char *s,
			   size_t len);

/* (u32, u32) pair -> (rank, result) for BPE merges. */
struct tok_pair_val {
	int32_t rank;
	int32_t result;
};

struct tok_pairmap {
	uint64_t *key; /* UINT64_MAX when empty */
	struct tok_pair_val *val;
	uint32_t mask;
};

int exl_tok_pairmap_init(struct tok_pairmap *m, uint32_t n);
void exl_tok_pairmap_free(struct tok_pairmap *m);
/* Keeps the first value put for a key (the lower merge rank). */
void exl_tok_pairmap_put(struct tok_pairmap *m, uint32_t a, uint32_t b, struct tok_pair_val v);
const struct tok_pair_val *exl_tok_pairmap_get(const struct tok_pairmap *m, uint32_t a, uint32_t b);

/* ---- special token trie (tokenizer_special.c) ---- */

struct tok_trie {
	/* edges: (node << 8 | byte) -> child, open addressing */
	uint64_t *edge_key; /* UINT64_MAX when empty */
	uint32_t *edge_child;
	uint32_t edge_mask;
	int32_t *node_id; /* token ending at the node, or -1 */
	uint32_t n_nodes;
	uint8_t first_byte[32]; /* bitmap of bytes that start some token */
	uint32_t max_len;
};

/* A piece of the text after special tokens are taken out: either raw text
 * [start, start + len) or a token id (len == 0). */
struct tok_frag {
	uint32_t start, len;
	int32_t id; /* -1 for raw text */
};

/* ---- pre-tokenizer (tokenizer_pre.c) ---- */

struct tok_pre;

/* NULL with a message when name is unknown or a regex does not compile.
 * *ignore_merges and *add_bos receive the family's defaults. */
struct tok_pre *exl_tok_pre_create(const char *name, bool *ignore_merges, bool *add_bos, char *err,
				   size_t errlen);
void exl_tok_pre_free(struct tok_pre *p);

/* A word: [start, start + len) of the text. */
struct tok_span {
	uint32_t start, len;
};

/* Splits valid UTF-8 text into words.  *words is malloc'ed (the caller
 * frees it, also on failure).  Returns the count, or -1 with a message. */
int exl_tok_pre_split(const struct tok_pre *p, const char *text, uint32_t len,
		      struct tok_span **words, char *err, size_t errlen);

/* ---- the tokenizer ---- */

struct exl_tokenizer {
	enum exl_tok_kind kind;
	char pre_name[64];
	int32_t n_vocab;

	/* Vocabulary texts; BPE appends merge intermediates that are not tokens
	 * after the n_vocab real ones. */
	struct tok_strtab texts;
	struct tok_strmap text_map;
	float *scores;
	uint32_t *score_rank; /* SPM: 0 for the best score, equal scores equal */
	uint16_t *attr;

	int32_t bos, eos, unk, eot, eom;
	int32_t sep; /* WordPiece: closes the text when BOS ([CLS]) is added */
	int32_t fim[3];     /* fill-in-the-middle prefix, suffix, middle; -1 none */
	int32_t *eog;
	int n_eog;
	bool add_bos;
	bool add_space_prefix;
	bool ignore_merges;

	/* Raw bytes -> token: SPM <0xNN> byte tokens; BPE the byte-level
	 * character of each byte.  -1 when absent. */
	int32_t byte_token[256];

	/* Decoded bytes of every token (special ones: their text). */
	struct tok_strtab pieces;

	struct tok_trie special;

	/* WordPiece: every token, for longest-prefix matching; the
	 * BertNormalizer options. */
	struct tok_trie vocab;
	bool lowercase, strip_accents;

	/* BPE */
	struct tok_pairmap merges;
	int32_t byte_sym[256]; /* symbol of each byte's byte-level character */
	struct tok_pre *pre;
};

/* The token whose text is s, or -1 (never a merge intermediate). */
int32_t exl_tok_lookup(const struct exl_tokenizer *t, const char *s, size_t len);

/* Special tokens (tokenizer_special.c). */
int exl_tok_trie_build(struct exl_tokenizer *t, char *err, size_t errlen);
void exl_tok_trie_free(struct tok_trie *tr);
/* A trie of every non-empty token (the later id for a text given twice). */
int exl_tok_vocab_trie_build(struct exl_tokenizer *t, struct tok_trie *tr, char *err,
			     size_t errlen);
/* The length of the longest token that s[0..len) starts with (its id in
 * *id), or 0. */
uint32_t exl_tok_trie_longest(const struct tok_trie *tr, const uint8_t *s, uint32_t len,
			      int32_t *id);
/* Splits text at the special tokens it holds (user-defined ones always,
 * control and unknown ones with parse_special).  *frags is malloc'ed (the
 * caller frees it, also on failure).  Returns the count or -1. */
int exl_tok_partition(const struct exl_tokenizer *t, const char *text, uint32_t len,
		      bool parse_special, struct tok_frag **frags, char *err, size_t errlen);

/* Output buffer of token ids (push: tokenizer_map.c). */
struct tok_out {
	int32_t *ids;
	size_t n, cap;
};

int exl_tok_out_push(struct tok_out *o, int32_t id);

/* SentencePiece BPE (tokenizer_spm.c): score ranks at load, then one raw
 * fragment at a time; prefix_space prepends the dummy space. */
int exl_tok_spm_prepare(struct exl_tokenizer *t, char *err, size_t errlen);
int exl_tok_spm_encode(const struct exl_tokenizer *t, const char *text, uint32_t len,
		       bool prefix_space, struct tok_out *out, char *err, size_t errlen);

/* Byte-level BPE (tokenizer_bpe.c). */
int exl_tok_bpe_load(struct exl_tokenizer *t, const struct gguf_file *f, char *err, size_t errlen);
int exl_tok_bpe_encode(const struct exl_tokenizer *t, const char *text, uint32_t len,
		       struct tok_out *out, char *err, size_t errlen);
/* The byte-level character (UTF-8, 2 bytes at most) standing for byte b. */
int exl_tok_bpe_byte_char(uint8_t b, char out[2]);
/* The byte a byte-level character stands for, or -1. */
int exl_tok_bpe_char_byte(uint32_t cp);

/* WordPiece (tokenizer_wpm.c): the vocabulary trie at load, then one raw
 * fragment at a time. */
int exl_tok_wpm_prepare(struct exl_tokenizer *t, char *err, size_t errlen);
int exl_tok_wpm_encode(const struct exl_tokenizer *t, const char *text, uint32_t len,
		       struct tok_out *out, char *err, size_t errlen);

/* Decoding (tokenizer_detok.c): fills t->pieces. */
int exl_tok_pieces_build(struct exl_tokenizer *t, char *err, size_t errlen);

/* Copies text with each byte that is not part of valid UTF-8 replaced by
 * U+FFFD.  *out is malloc'ed.  -1 on allocation failure. */
int exl_tok_utf8_sanitize(const char *text, uint32_t len, char **out, uint32_t *out_len);

#endif
