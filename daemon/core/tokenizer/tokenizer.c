/* Tokenizer loading from GGUF metadata, accessors, and exl_tok_encode: special
 * tokens out first, then each stretch of text through its model's encoder. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/tokenizer/tokenizer_internal.h"

#define MAX_VOCAB (1 << 24)

#define FW_BAR "\xef\xbd\x9c" /* U+FF5C, in DeepSeek's marker names */
#define LOWER_BLOCK "\xe2\x96\x81" /* U+2581 */

/* Tokens that end generation wherever they appear, by text (GGUF files
 * rarely list them all in metadata). */
static const char *const eog_names[] = {
	"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
	"<|end_of_text|>", "<EOT>", "</s>",
	("<" FW_BAR "end" LOWER_BLOCK "of" LOWER_BLOCK "sentence" FW_BAR ">"),
	"<|return|>", "<|call|>",
};

/* Fill-in-the-middle markers.  Found by name when metadata does not give
 * them, they are control tokens; pad, repo and file separators also end
 * generation. */
static const struct fim_kind {
	const char *key, *old_key;
	bool eog;
	const char *names[9];
} fim_kinds[] = {
	{ "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id", false,
	  { "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
	    ("<" FW_BAR "fim" LOWER_BLOCK "begin" FW_BAR ">"), "<PRE>", (LOWER_BLOCK "<PRE>"),
	    "<|code_prefix|>", "<|prefix|>" } },
	{ "tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id", false,
	  { "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
	    ("<" FW_BAR "fim" LOWER_BLOCK "hole" FW_BAR ">"), "<SUF>", (LOWER_BLOCK "<SUF>"),
	    "<|code_suffix|>", "<|suffix|>" } },
	{ "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id", false,
	  { "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
	    ("<" FW_BAR "fim" LOWER_BLOCK "end" FW_BAR ">"), "<MID>", (LOWER_BLOCK "<MID>"),
	    "<|code_middle|>", "<|middle|>" } },
	{ "tokenizer.ggml.fim_pad_token_id", NULL, true,
	  { "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]" } },
	{ "tokenizer.ggml.fim_rep_token_id", NULL, true,
	  { "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>" } },
	{ "tokenizer.ggml.fim_sep_token_id", NULL, true, { "<|file_sep|>" } },
};

int32_t exl_tok_lookup(const struct exl_tokenizer *t, const char *s, size_t len)
{
	int64_t id;

	/* Empty tokens (padding in some vocabularies) load but never match:
	 * no text is made of them. */
	if (!len)
		return -1;
	id = exl_tok_strmap_get(&t->text_map, &t->texts, s, len);

	return id >= 0 && id < t->n_vocab ? (int32_t)id : -1;
}

void exl_tokenizer_free(struct exl_tokenizer *t)
{
	if (!t)
		return;
	exl_tok_strtab_free(&t->texts);
	exl_tok_strmap_free(&t->text_map);
	exl_tok_strtab_free(&t->pieces);
	exl_tok_trie_free(&t->special);
	exl_tok_trie_free(&t->vocab);
	exl_tok_pairmap_free(&t->merges);
	exl_tok_pre_free(t->pre);
	free(t->scores);
	free(t->score_rank);
	free(t->attr);
	free(t->eog);
	free(t);
}

static uint16_t attr_of_type(int64_t type)
{
	switch (type) {
	case 1:
		return TOK_ATTR_NORMAL;
	case 2:
		return TOK_ATTR_UNKNOWN;
	case 3:
		return TOK_ATTR_CONTROL;
	case 4:
		return TOK_ATTR_USER_DEFINED;
	case 5:
		return TOK_ATTR_UNUSED;
	case 6:
		return TOK_ATTR_BYTE;
	default:
		return TOK_ATTR_UNDEFINED;
	}
}

static int load_vocab(struct exl_tokenizer *t, const struct gguf_file *f, char *err, size_t errlen)
{
	const struct gguf_array *toks = exl_gguf_get_arr(f, "tokenizer.ggml.tokens");
	const struct gguf_array *scores = exl_gguf_get_arr(f, "tokenizer.ggml.scores");
	const struct gguf_array *types = exl_gguf_get_arr(f, "tokenizer.ggml.token_type");

	if (!toks || toks->elem_type != GGUF_VT_STRING) {
		snprintf(err, errlen, "tokenizer.ggml.tokens is missing or not a string array");
		return -1;
	}
	if (toks->count == 0 || toks->count > MAX_VOCAB) {
		snprintf(err, errlen, "tokenizer.ggml.tokens: %llu tokens (1 to %d allowed)",
			 (unsigned long long)toks->count, MAX_VOCAB);
		return -1;
	}
	t->n_vocab = (int32_t)toks->count;
	if (scores && scores->count < toks->count) {
		snprintf(err, errlen, "tokenizer.ggml.scores has %llu entries for %d tokens",
			 (unsigned long long)scores->count, t->n_vocab);
		return -1;
	}
	if (types && types->count < toks->count) {
		snprintf(err, errlen, "tokenizer.ggml.token_type has %llu entries for %d tokens",
			 (unsigned long long)types->count, t->n_vocab);
		return -1;
	}
	t->scores = malloc((size_t)t->n_vocab * sizeof(*t->scores));
	t->attr = malloc((size_t)t->n_vocab * sizeof(*t->attr));
	if (!t->scores || !t->attr || exl_tok_strmap_init(&t->text_map, (uint32_t)t->n_vocab))
		goto oom;
	for (int32_t i = 0; i < t->n_vocab; i++) {
		double score = 0;
		int64_t type = 1;

		if (toks->strs[i].len > TOK_STR_MAX_LEN) {
			snprintf(err, errlen, "tokenizer.ggml.tokens[%d] is %llu bytes long", i,
				 (unsigned long long)toks->strs[i].len);
			return -1;
		}
		if (scores && !exl_gguf_arr_get_f64(scores, (uint64_t)i, &score)) {
			snprintf(err, errlen, "tokenizer.ggml.scores is an array of %s, not numbers",
				 exl_gguf_vtype_name(scores->elem_type));
			return -1;
		}
		if (types && !exl_gguf_arr_get_i64(types, (uint64_t)i, &type)) {
			snprintf(err, errlen, "tokenizer.ggml.token_type[%d] is not an integer", i);
			return -1;
		}
		t->scores[i] = (float)score;
		t->attr[i] = attr_of_type(type);
		if (exl_tok_strtab_add(&t->texts, toks->strs[i].ptr, (size_t)toks->strs[i].len))
			goto oom;
		exl_tok_strmap_put(&t->text_map, &t->texts, (uint32_t)i);
	}
	return 0;
oom:
	snprintf(err, errlen, "out of memory loading %llu tokens", (unsigned long long)toks->count);
	return -1;
}

/* A token id from metadata; out-of-range ids (such as 0xffffffff for
 * "none") leave *id alone. */
static void read_id(const struct exl_tokenizer *t, const struct gguf_file *f, const char *key,
		    int32_t *id)
{
	uint32_t v;

	if (exl_gguf_get_u32(f, key, &v) && v < (uint32_t)t->n_vocab)
		*id = (int32_t)v;
}

static int add_eog(struct exl_tokenizer *t, int32_t id)
{
	int32_t *v;

	if (id < 0)
		return 0;
	for (int i = 0; i < t->n_eog; i++)
		if (t->eog[i] == id)
			return 0;
	v = realloc(t->eog, (size_t)(t->n_eog + 1) * sizeof(*v));
	if (!v)
		return -1;
	t->eog = v;
	t->eog[t->n_eog++] = id;
	return 0;
}

static int32_t lookup_name(const struct exl_tokenizer *t, const char *name)
{
	return exl_tok_lookup(t, name, strlen(name));
}

/* gpt-oss's harmony format (o200k_harmony, known by its <|return|> and
 * <|call|>): a reply is messages on channels, "<|channel|>analysis
 * <|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...
 * <|return|>", so <|end|> closes a message, not the turn, and the markers
 * between are part of the reply's text, as llama.cpp renders them. */
static int harmony_tokens(struct exl_tokenizer *t)
{
	static const char *const shown[] = { "<|channel|>", "<|message|>", "<|start|>",
					     "<|constrain|>", "<|end|>" };
	int32_t end = lookup_name(t, "<|end|>");

	if (lookup_name(t, "<|return|>") < 0 || lookup_name(t, "<|call|>") < 0 || end < 0)
		return 0;
	for (int i = 0; i < t->n_eog; i++) {
		if (t->eog[i] == end) {
			t->eog[i] = t->eog[--t->n_eog];
			break;
		}
	}
	for (size_t i = 0; i < sizeof(shown) / sizeof(shown[0]); i++) {
		int32_t id = lookup_name(t, shown[i]);

		if (id >= 0)
			t->attr[id] = (uint16_t)((t->attr[id] & ~TOK_ATTR_CONTROL) |
						 TOK_ATTR_USER_DEFINED);
	}
	return 0;
}

static int load_special_ids(struct exl_tokenizer *t, const struct gguf_file *f)
{
	bool b;

	t->sep = -1;
	if (t->kind == EXL_TOK_SPM) {
		t->bos = 1;
		t->eos = 2;
		t->unk = 0;
	} else if (t->kind == EXL_TOK_WPM) {
		/* BERT's [CLS], [UNK], [SEP] */
		t->bos = 101;
		t->eos = -1;
		t->unk = 100;
		t->sep = 102;
	} else {
		t->bos = t->eos = t->unk = -1;
	}
	t->eot = t->eom = -1;
	t->fim[0] = t->fim[1] = t->fim[2] = -1;
	if (t->bos >= t->n_vocab)
		t->bos = -1;
	if (t->eos >= t->n_vocab)
		t->eos = -1;
	if (t->unk >= t->n_vocab)
		t->unk = -1;
	if (t->sep >= t->n_vocab)
		t->sep = -1;
	if (t->kind == EXL_TOK_WPM) {
		/* Older BERT conversions name [CLS] only as cls_token_id;
		 * bos_token_id, when there, says the same. */
		read_id(t, f, "tokenizer.ggml.cls_token_id", &t->bos);
		read_id(t, f, "tokenizer.ggml.seperator_token_id", &t->sep);
	}
	read_id(t, f, "tokenizer.ggml.bos_token_id", &t->bos);
	read_id(t, f, "tokenizer.ggml.eos_token_id", &t->eos);
	read_id(t, f, "tokenizer.ggml.unknown_token_id", &t->unk);
	read_id(t, f, "tokenizer.ggml.eot_token_id", &t->eot);
	read_id(t, f, "tokenizer.ggml.eom_token_id", &t->eom);

	if (exl_gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b))
		t->add_bos = b;
	if (exl_gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &b))
		t->add_space_prefix = b;
	/* BertNormalizer: strip_accents follows lowercase unless given */
	if (exl_gguf_get_bool(f, "tokenizer.ggml.normalizer.lowercase", &b))
		t->lowercase = b;
	t->strip_accents = t->lowercase;
	if (exl_gguf_get_bool(f, "tokenizer.ggml.normalizer.strip_accents", &b))
		t->strip_accents = b;

	if (add_eog(t, t->eos) || add_eog(t, t->eot) || add_eog(t, t->eom))
		return -1;
	for (size_t k = 0; k < sizeof(fim_kinds) / sizeof(fim_kinds[0]); k++) {
		const struct fim_kind *fk = &fim_kinds[k];
		int32_t id = -1;

		read_id(t, f, fk->key, &id);
		if (fk->old_key)
			read_id(t, f, fk->old_key, &id);
		if (id >= 0) {
			if (k < 3)
				t->fim[k] = id;
			if (fk->eog && add_eog(t, id))
				return -1;
			continue;
		}
		for (int i = 0; i < 9 && fk->names[i]; i++) {
			id = exl_tok_lookup(t, fk->names[i], strlen(fk->names[i]));
			if (id < 0)
				continue;
			if (k < 3 && t->fim[k] < 0)
				t->fim[k] = id;
			t->attr[id] |= TOK_ATTR_CONTROL;
			if (fk->eog && add_eog(t, id))
				return -1;
		}
	}
	for (size_t i = 0; i < sizeof(eog_names) / sizeof(eog_names[0]); i++) {
		int32_t id = exl_tok_lookup(t, eog_names[i], strlen(eog_names[i]));

		if (id < 0)
			continue;
		if (add_eog(t, id))
			return -1;
		/* An end-of-turn marker is a control token even when the
		 * converter did not say so. */
		t->attr[id] |= TOK_ATTR_CONTROL;
	}
	return harmony_tokens(t);
}

static void set_strip(struct exl_tokenizer *t, const char *text, uint16_t flag, bool on)
{
	int32_t id = exl_tok_lookup(t, text, strlen(text));

	if (id < 0)
		return;
	if (on)
		t->attr[id] |= flag;
	else
		t->attr[id] &= (uint16_t)~flag;
}

/* Phi-3's added tokens eat the whitespace after them (its tokenizer.json
 * says rstrip, which GGUF has no field for), except these three. */
static void model_strip_rules(struct exl_tokenizer *t, const struct gguf_file *f)
{
	char name[256];

	if (!exl_gguf_get_str(f, "general.name", name, sizeof(name)))
		return;
	for (char *p = name; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	if (!strstr(name, "phi-3") && !strstr(name, "phi3"))
		return;
	for (int32_t id = 0; id < t->n_vocab; id++)
		if (t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN))
			t->attr[id] |= TOK_ATTR_RSTRIP;
	set_strip(t, "</s>", TOK_ATTR_RSTRIP, true);
	set_strip(t, "<unk>", TOK_ATTR_RSTRIP, false);
	set_strip(t, "<s>", TOK_ATTR_RSTRIP, false);
	set_strip(t, "<|endoftext|>", TOK_ATTR_RSTRIP, false);
}

static void spm_byte_tokens(struct exl_tokenizer *t)
{
	for (int c = 0; c < 256; c++) {
		char hex[7], raw = (char)c;
		int32_t id;

		snprintf(hex, sizeof(hex), "<0x%02X>", c);
		id = exl_tok_lookup(t, hex, 6);
		if (id < 0)
			id = exl_tok_lookup(t, &raw, 1);
		t->byte_token[c] = id;
		t->byte_sym[c] = -1;
	}
}

struct exl_tokenizer *exl_tokenizer_load(const struct gguf_file *f, char *err, size_t errlen)
{
	struct exl_tokenizer *t = calloc(1, sizeof(*t));
	char model[32];

	if (!t) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (!exl_gguf_get_str(f, "tokenizer.ggml.model", model, sizeof(model))) {
		snprintf(err, errlen, "tokenizer.ggml.model is missing or not a short string");
		goto fail;
	}
	if (!strcmp(model, "llama")) {
		t->kind = EXL_TOK_SPM;
		t->add_bos = true;
		t->add_space_prefix = true;
		snprintf(t->pre_name, sizeof(t->pre_name), "default");
	} else if (!strcmp(model, "gpt2")) {
		t->kind = EXL_TOK_BPE;
		if (!exl_gguf_get_str(f, "tokenizer.ggml.pre", t->pre_name, sizeof(t->pre_name))) {
			if (exl_gguf_find_kv(f, "tokenizer.ggml.pre")) {
				snprintf(err, errlen, "tokenizer.ggml.pre is not a short string");
				goto fail;
			}
			snprintf(t->pre_name, sizeof(t->pre_name), "default");
		}
		t->pre = exl_tok_pre_create(t->pre_name, &t->ignore_merges, &t->add_bos, err,
					    errlen);
		if (!t->pre)
			goto fail;
	} else if (!strcmp(model, "bert")) {
		t->kind = EXL_TOK_WPM;
		t->add_bos = true;
		/* tokenizer.ggml.pre (bert-bge, jina-v2-en ...) changes nothing
		 * for WordPiece; it is kept to be shown. */
		if (!exl_gguf_get_str(f, "tokenizer.ggml.pre", t->pre_name, sizeof(t->pre_name)))
			snprintf(t->pre_name, sizeof(t->pre_name), "default");
	} else {
		snprintf(err, errlen, "unsupported tokenizer model '%s' (only llama, gpt2 and bert)",
			 model);
		goto fail;
	}
	t->lowercase = true;

	if (load_vocab(t, f, err, errlen))
		goto fail;
	if (t->kind == EXL_TOK_BPE) {
		if (exl_tok_bpe_load(t, f, err, errlen))
			goto fail;
	} else if (t->kind == EXL_TOK_WPM) {
		memset(t->byte_token, 0xff, sizeof(t->byte_token));
		memset(t->byte_sym, 0xff, sizeof(t->byte_sym));
		if (exl_tok_wpm_prepare(t, err, errlen))
			goto fail;
	} else {
		spm_byte_tokens(t);
		if (exl_tok_spm_prepare(t, err, errlen))
			goto fail;
	}
	if (load_special_ids(t, f)) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	model_strip_rules(t, f);
	if (exl_tok_trie_build(t, err, errlen) || exl_tok_pieces_build(t, err, errlen))
		goto fail;
	return t;
fail:
	exl_tokenizer_free(t);
	return NULL;
}

enum exl_tok_kind exl_tokenizer_kind(const struct exl_tokenizer *t)
{
	return t->kind;
}

const char *exl_tokenizer_kind_name(const struct exl_tokenizer *t)
{
	return t->kind == EXL_TOK_SPM ? "llama" : t->kind == EXL_TOK_BPE ? "gpt2" : "bert";
}

const char *exl_tokenizer_pre_name(const struct exl_tokenizer *t)
{
	return t->pre_name;
}

int32_t exl_tokenizer_n_vocab(const struct exl_tokenizer *t)
{
	return t->n_vocab;
}

int32_t exl_tokenizer_bos(const struct exl_tokenizer *t)
{
	return t->bos;
}

bool exl_tokenizer_fim(const struct exl_tokenizer *t, int32_t ids[3])
{
	for (int k = 0; k < 3; k++)
		ids[k] = t->fim[k];
	return t->fim[0] >= 0 && t->fim[1] >= 0 && t->fim[2] >= 0;
}

int32_t exl_tokenizer_eos(const struct exl_tokenizer *t)
{
	return t->eos;
}

int exl_tokenizer_eog_ids(const struct exl_tokenizer *t, const int32_t **ids)
{
	*ids = t->eog;
	return t->n_eog;
}

bool exl_tokenizer_add_bos(const struct exl_tokenizer *t)
{
	return t->add_bos && t->bos >= 0;
}

bool exl_tokenizer_is_special(const struct exl_tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->n_vocab && (t->attr[id] & TOK_ATTR_SPECIAL);
}

const char *exl_token_text(const struct exl_tokenizer *t, int32_t id, size_t *len)
{
	if (id < 0 || id >= t->n_vocab) {
		*len = 0;
		return NULL;
	}
	return tok_strtab_get(&t->texts, (uint32_t)id, len);
}

int exl_tok_encode(const struct exl_tokenizer *t, const char *text, size_t len, bool add_bos,
		 bool parse_special, int32_t **out, char *err, size_t errlen)
{
	struct tok_out o = { 0 };
	struct tok_frag *frags = NULL;
	int n_frags;
	bool prev_special = true; /* the text start counts as after a special token */

	*out = NULL;
	if (!text && len) {
		snprintf(err, errlen, "no text");
		return -1;
	}
	if (len > TOK_MAX_TEXT) {
		snprintf(err, errlen, "text of %zu bytes is too long to tokenize (at most %zu)", len,
			 TOK_MAX_TEXT);
		return -1;
	}
	if (add_bos) {
		if (t->bos < 0) {
			snprintf(err, errlen, "the model has no BOS token");
			return -1;
		}
		if (t->kind == EXL_TOK_WPM && t->sep < 0) {
			snprintf(err, errlen, "the model has no SEP token");
			return -1;
		}
		if (exl_tok_out_push(&o, t->bos))
			goto oom;
	}
	n_frags = exl_tok_partition(t, text ? text : "", (uint32_t)len, parse_special, &frags, err,
				    errlen);
	if (n_frags < 0)
		goto fail;
	for (int i = 0; i < n_frags; i++) {
		const struct tok_frag *fr = &frags[i];
		int rc;

		if (fr->id >= 0) {
			if (exl_tok_out_push(&o, fr->id))
				goto oom;
			prev_special = true;
			continue;
		}
		if (t->kind == EXL_TOK_SPM)
			rc = exl_tok_spm_encode(t, text + fr->start, fr->len,
						t->add_space_prefix && prev_special, &o, err,
						errlen);
		else if (t->kind == EXL_TOK_WPM)
			rc = exl_tok_wpm_encode(t, text + fr->start, fr->len, &o, err, errlen);
		else
			rc = exl_tok_bpe_encode(t, text + fr->start, fr->len, &o, err, errlen);
		if (rc)
			goto fail;
		prev_special = false;
	}
	free(frags);
	frags = NULL;
	/* llama.cpp's add_special for WordPiece: [CLS] text [SEP] */
	if (add_bos && t->kind == EXL_TOK_WPM && exl_tok_out_push(&o, t->sep))
		goto oom;
	if (!o.ids && !(o.ids = malloc(sizeof(*o.ids))))
		goto oom;
	*out = o.ids;
	return (int)o.n;
oom:
	snprintf(err, errlen, "out of memory");
fail:
	free(frags);
	free(o.ids);
	return -1;
}
