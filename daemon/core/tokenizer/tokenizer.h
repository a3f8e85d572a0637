/* Tokenizers read from GGUF metadata: SentencePiece-style BPE
 * (tokenizer.ggml.model = "llama"), GPT-2 byte-level BPE ("gpt2", with the
 * pre-tokenizer chosen by tokenizer.ggml.pre) and BERT's WordPiece ("bert").
 *
 * A tokenizer is immutable after load and safe to use from many threads.
 */
#ifndef EXL_TOKENIZER_H
#define EXL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/utf8.h"

struct gguf_file;
struct exl_tokenizer;

enum exl_tok_kind { EXL_TOK_SPM, EXL_TOK_BPE, EXL_TOK_WPM };

/* Loads from f's tokenizer.ggml.* keys; copies what it needs, so f may be
 * closed afterwards.  NULL with a message on failure. */
struct exl_tokenizer *exl_tokenizer_load(const struct gguf_file *f, char *err, size_t errlen);
void exl_tokenizer_free(struct exl_tokenizer *t);

enum exl_tok_kind exl_tokenizer_kind(const struct exl_tokenizer *t);
const char *exl_tokenizer_kind_name(const struct exl_tokenizer *t); /* "llama", "gpt2", "bert" */
const char *exl_tokenizer_pre_name(const struct exl_tokenizer *t);  /* "default", "llama3", ... */
int32_t exl_tokenizer_n_vocab(const struct exl_tokenizer *t);
int32_t exl_tokenizer_bos(const struct exl_tokenizer *t); /* -1 when none */
/* The fill-in-the-middle tokens, prefix, suffix and middle (the
 * tokenizer.ggml.fim_*_token_id keys, else found by their usual texts);
 * false unless the model has all three. */
bool exl_tokenizer_fim(const struct exl_tokenizer *t, int32_t ids[3]);
int32_t exl_tokenizer_eos(const struct exl_tokenizer *t); /* -1 when none */
/* Every id generation should stop at (EOS, EOT, EOM ...); returns the count. */
int exl_tokenizer_eog_ids(const struct exl_tokenizer *t, const int32_t **ids);
bool exl_tokenizer_add_bos(const struct exl_tokenizer *t); /* the model's default */
/* True for control / special tokens (not shown unless decode_special). */
bool exl_tokenizer_is_special(const struct exl_tokenizer *t, int32_t id);

/* Encodes len bytes of UTF-8 text.  With parse_special, special and control
 * tokens written in the text become their ids; otherwise they are plain
 * text.  add_bos puts BOS first; for WordPiece it means [CLS] first and
 * [SEP] last (llama.cpp's add_special).  *out is malloc'ed and owned by the
 * caller.  Returns the count, or -1 with a message. */
int exl_tok_encode(const struct exl_tokenizer *t, const char *text, size_t len,
		 bool add_bos, bool parse_special, int32_t **out, char *err, size_t errlen);


/* The raw vocabulary entry of id (as stored in GGUF), or NULL when out of range. */
const char *exl_token_text(const struct exl_tokenizer *t, int32_t id, size_t *len);

/* The bytes id decodes to (SPM and WordPiece: "▁" becomes a space and <0xNN>
 * one byte; BPE: the byte-level mapping undone).  Special tokens give their text when
 * decode_special is set, and nothing otherwise.  Returns the byte count,
 * which may exceed buflen (then buf holds a truncated copy). */
size_t exl_token_bytes(const struct exl_tokenizer *t, int32_t id, bool decode_special,
		       char *buf, size_t buflen);

/* Streaming decoder: holds back bytes of an incomplete UTF-8 sequence until
 * it completes; invalid bytes come out as U+FFFD.  The first emitted token of
 * an SPM stream loses its leading space when strip_leading_space is set
 * (SentencePiece's dummy prefix). */
struct exl_detok {
	const struct exl_tokenizer *tok;
	bool decode_special;
	bool strip_leading_space;
	bool started;
	uint8_t pend[4];
	int npend;
};

void exl_detok_init(struct exl_detok *d, const struct exl_tokenizer *t,
		    bool decode_special, bool strip_leading_space);
/* Appends the complete UTF-8 text that id adds to *out (grown with realloc;
 * *out_len / *out_cap track it).  Returns 0, or -1 on allocation failure. */
int exl_detok_push(struct exl_detok *d, int32_t id, char **out, size_t *out_len, size_t *out_cap);
/* Flushes held-back bytes at end of stream (as U+FFFD). */
int exl_detok_flush(struct exl_detok *d, char **out, size_t *out_len, size_t *out_cap);

/* Whole-sequence convenience: malloc'ed NUL-terminated text, or NULL. */
char *exl_tok_decode(const struct exl_tokenizer *t, const int32_t *ids, size_t n,
		     bool decode_special, bool strip_leading_space);

#endif
