/* Pre-tokenizers for byte-level BPE: the published split regexes of each
 * model family (tokenizer.ggml.pre), run through PCRE2.
 *
 * A family is a list of regexes applied in turn: each one splits every piece
 * left by the one before into its matches and the text between them, so
 * both become pieces (the Hugging Face "Isolated" split behaviour).
 *
 * \s is spelled out as the Unicode White_Space set, which is what the
 * reference tokenizers use (PCRE2's \s in UCP mode leaves out U+0085).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/tokenizer/tokenizer_internal.h"

/* White_Space, for use inside a character class. */
#define WS "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}" \
	"\\x{205f}\\x{3000}"
#define S "[" WS "]"
#define NS "[^" WS "]"
/* Neither space, letter nor number. */
#define OTHER "[^" WS "\\p{L}\\p{N}]"
/* The whitespace alternatives most families end with: a run ending in line
 * breaks, a run not followed by a word (its last space goes with the
 * word), any run. */
#define WS_RUNS S "*[\\r\\n]+|" S "+(?!" NS ")|" S "+"

/* English contractions, case-insensitive for the ASCII letters only. */
#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?" OTHER "+|" \
	S "+(?!" NS ")|" S "+"

#define RE_LLAMA3 CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|" \
	" ?" OTHER "+[\\r\\n]*|" WS_RUNS

#define RE_QWEN2 CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|" \
	" ?" OTHER "+[\\r\\n]*|" WS_RUNS

#define RE_QWEN35 CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}|" \
	" ?[^" WS "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|" WS_RUNS

#define RE_SEED_CODER CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|" \
	" ?[^" WS "\\p{L}\\p{N}\\r\\n]+|" WS_RUNS

#define RE_BAILING "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
	"\\p{N}| ?" OTHER "+[\\r\\n]*|" S "*[\\r\\n]|" S "+(?!" NS ")|" S "+"

/* Upper-case run then lower-case run, and the reverse (Mistral's tekken,
 * GPT-4o), as llama.cpp runs them: its rewrite of the published regexes
 * takes "upper" as any letter but a-z and "lower" as any letter but A-Z,
 * with no marks, so a non-ASCII letter is both and a combining mark ends a
 * word.  (The published [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] classes differ on
 * marks and on cased non-ASCII letters; GGUF files are made for llama.cpp.) */
#define UPPER "[^\\P{L}a-z]"
#define LOWER "[^\\P{L}A-Z]"
#define RE_TEKKEN "[^\\r\\n\\p{L}\\p{N}]?" UPPER "*" LOWER "+|" \
	"[^\\r\\n\\p{L}\\p{N}]?" UPPER "+" LOWER "*|" \
	"\\p{N}| ?" OTHER "+[\\r\\n/]*|" WS_RUNS
#define RE_GPT4O "[^\\r\\n\\p{L}\\p{N}]?" UPPER "*" LOWER "+" CONTRACTIONS "?|" \
	"[^\\r\\n\\p{L}\\p{N}]?" UPPER "+" LOWER "*" CONTRACTIONS "?|" \
	"\\p{N}{1,3}| ?" OTHER "+[\\r\\n/]*|" WS_RUNS

#define RE_DEEPSEEK3_MAIN "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|" \
	"[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|" \
	" ?[\\p{P}\\p{S}]+[\\r\\n]*|" WS_RUNS

/* CJK ideographs, and Hangul syllables, as DeepSeek's tokenizers group them. */
#define RE_CJK "[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+"

/* DeepSeek LLM's Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee... letters. */
#define RE_DEEPSEEK_LETTERS S "?[A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}" \
	"\\x{1bc}-\\x{1bf}\\x{1c4}-\\x{293}\\x{295}-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}" \
	"\\x{37b}-\\x{37d}\\x{37f}\\x{386}" \
	"\\x{388}-\\x{38a}\\x{38c}\\x{38e}-\\x{3a1}\\x{3a3}-\\x{3f5}\\x{3f7}-\\x{481}\\x{48a}-\\x{52f}" \
	"\\x{531}-\\x{556}\\x{10a0}-\\x{10c5}\\x{13a0}-\\x{13f5}\\x{13f8}-\\x{13fd}\\x{1c90}-\\x{1cba}" \
	"\\x{1cbd}-\\x{1cbf}\\x{1d00}-\\x{1d2b}\\x{1d6b}-\\x{1d77}\\x{1d79}-\\x{1d9a}\\x{1e00}-\\x{1f15}" \
	"\\x{1f18}-\\x{1f1d}\\x{1f20}-\\x{1f45}\\x{1f48}-\\x{1f4d}\\x{1f50}-\\x{1f57}\\x{1f59}\\x{1f5b}" \
	"\\x{1f5d}\\x{1f5f}-\\x{1f7d}\\x{1f80}-\\x{1fb4}\\x{1fb6}-\\x{1fbc}\\x{1fbe}\\x{1fc2}-\\x{1fc4}" \
	"\\x{1fc6}-\\x{1fcc}\\x{1fd0}-\\x{1fd3}\\x{1fd6}-\\x{1fdb}\\x{1fe0}-\\x{1fec}\\x{1ff2}-\\x{1ff4}" \
	"\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}\\x{210a}-\\x{2113}\\x{2115}\\x{2119}-\\x{211d}\\x{2124}" \
	"\\x{2126}\\x{2128}\\x{212a}-\\x{212d}\\x{212f}-\\x{2134}\\x{2139}\\x{213c}-\\x{213f}" \
	"\\x{2145}-\\x{2149}\\x{214e}\\x{2183}\\x{2184}\\x{2c00}-\\x{2c7b}\\x{2c7e}-\\x{2ce4}" \
	"\\x{2ceb}-\\x{2cee}\\x{2cf2}\\x{2cf3}\\x{a640}-\\x{a66d}\\x{a680}-\\x{a69b}\\x{a722}-\\x{a76f}" \
	"\\x{a771}-\\x{a787}\\x{a78b}-\\x{a78e}\\x{ab70}-\\x{abbf}\\x{fb00}-\\x{fb06}\\x{fb13}-\\x{fb17}" \
	"\\x{ff21}-\\x{ff3a}\\x{ff41}-\\x{ff5a}\\x{10400}-\\x{1044f}\\x{104b0}-\\x{104d3}" \
	"\\x{104d8}-\\x{104fb}\\x{10c80}-\\x{10cb2}\\x{10cc0}-\\x{10cf2}\\x{118a0}-\\x{118df}" \
	"\\x{1e900}-\\x{1e943}]+"
#define RE_DEEPSEEK_PUNCT S "?[!-/:-~\\x{ff01}-\\x{ff0f}\\x{ff1a}-\\x{ff5e}\\x{2018}-\\x{201f}" \
	"\\x{3000}-\\x{3002}]+"

#define RE_BLOOM " ?[^(" WS "|.,!?\\x{2026}\\x{3002}\\x{ff0c}\\x{3001}\\x{964}\\x{6d4}\\x{60c})]+"

#define MAX_REGEXES 6

struct family {
	const char *names; /* '|'-separated tokenizer.ggml.pre values */
	const char *regex[MAX_REGEXES];
	bool ignore_merges;
	bool add_bos;
};

static const struct family families[] = {
	{ .names = "default",
	  .regex = { "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]" } },
	{ .names = "llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2",
	  .regex = { RE_LLAMA3 },
	  .ignore_merges = true, .add_bos = true },
	{ .names = "dbrx|smaug-bpe|glm4|chatglm-bpe",
	  .regex = { RE_LLAMA3 } },
	{ .names = "deepseek-llm",
	  .regex = { "[\\r\\n]", RE_DEEPSEEK_LETTERS, RE_DEEPSEEK_PUNCT, S "+$", RE_CJK, "\\p{N}+" } },
	{ .names = "deepseek-coder",
	  .regex = { "[\\r\\n]", S "?\\p{L}+", S "?\\p{P}+", RE_CJK, "\\p{N}" } },
	{ .names = "deepseek-v3|hunyuan-dense|joyai-llm",
	  .regex = { "\\p{N}{1,3}", "[\\x{4e00}-\\x{9fa5}\\x{3040}-\\x{309f}\\x{30a0}-\\x{30ff}]+",
		     RE_DEEPSEEK3_MAIN } },
	{ .names = "falcon",
	  .regex = { "[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]" } },
	{ .names = "starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b",
	  .regex = { "\\p{N}", RE_GPT2 } },
	{ .names = "gpt-2|phi-2|mpt|olmo|jais|trillion|granite-docling|exaone4|jina-es|jina-de|jina-v2-es|"
	  "jina-v2-de|jina-v1-en|jina-v2-code|roberta-bpe|gigachat|a.x-4.0|mellum|modern-bert",
	  .regex = { RE_GPT2 } },
	{ .names = "qwen2|deepseek-r1-qwen|stablelm2|hunyuan|megrez|solar-open|kormo|grok-2",
	  .regex = { RE_QWEN2 } },
	{ .names = "qwen35",
	  .regex = { RE_QWEN35 } },
	{ .names = "seed-coder",
	  .regex = { RE_SEED_CODER } },
	{ .names = "bailingmoe|bailingmoe2|llada-moe",
	  .regex = { RE_BAILING } },
	{ .names = "poro-chat|bloom|gpt3-finnish",
	  .regex = { RE_BLOOM } },
	{ .names = "viking",
	  .regex = { RE_BLOOM, "\\p{N}" } },
	{ .names = "tekken",
	  .regex = { RE_TEKKEN },
	  .ignore_merges = true, .add_bos = true },
	{ .names = "gpt-4o|llama4|kanana2",
	  .regex = { RE_GPT4O } },
};

struct tok_pre {
	const struct family *fam;
	int n;
	pcre2_code *re[MAX_REGEXES];
};

static bool name_in_list(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list;;) {
		const char *bar = strchr(p, '|');
		size_t l = bar ? (size_t)(bar - p) : strlen(p);

		if (l == n && !memcmp(p, name, n))
			return true;
		if (!bar)
			return false;
		p = bar + 1;
	}
}

void exl_tok_pre_free(struct tok_pre *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->n; i++)
		pcre2_code_free(p->re[i]);
	free(p);
}

struct tok_pre *exl_tok_pre_create(const char *name, bool *ignore_merges, bool *add_bos, char *err,
				   size_t errlen)
{
	const struct family *fam = NULL;
	struct tok_pre *p;

	if (!name[0])
		name = "default";
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
		if (name_in_list(families[i].names, name)) {
			fam = &families[i];
			break;
		}
	if (!fam) {
		snprintf(err, errlen, "unknown pre-tokenizer '%s' (tokenizer.ggml.pre)", name);
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	p->fam = fam;
	for (int i = 0; i < MAX_REGEXES && fam->regex[i]; i++) {
		int code;
		PCRE2_SIZE off;

		/* DOLLAR_ENDONLY: '$' means the end of the piece, as in the
		 * reference (ECMAScript) regexes, not "before a final \n". */
		p->re[i] = pcre2_compile((PCRE2_SPTR)fam->regex[i], PCRE2_ZERO_TERMINATED,
					 PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &code, &off,
					 NULL);
		if (!p->re[i]) {
			PCRE2_UCHAR msg[160];

			pcre2_get_error_message(code, msg, sizeof(msg));
			snprintf(err, errlen, "pre-tokenizer '%s': regex %d does not compile at %zu: %s",
				 name, i, (size_t)off, (const char *)msg);
			exl_tok_pre_free(p);
			return NULL;
		}
		p->n = i + 1;
		/* Without JIT the interpreter still works, only slower. */
		(void)pcre2_jit_compile(p->re[i], PCRE2_JIT_COMPLETE);
	}
	*ignore_merges = fam->ignore_merges;
	*add_bos = fam->add_bos;
	return p;
}

struct span_list {
	struct tok_span *v;
	uint32_t n, cap;
};

static int span_push(struct span_list *l, uint32_t start, uint32_t len)
{
	if (!len)
		return 0;
	if (l->n == l->cap) {
		uint32_t cap = l->cap ? l->cap * 2 : 256;
		struct tok_span *v;

		if (cap < l->cap)
			return -1;
		v = realloc(l->v, (size_t)cap * sizeof(*v));
		if (!v)
			return -1;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n].start = start;
	l->v[l->n].len = len;
	l->n++;
	return 0;
}

/* Per-call matching state: match data and, only if a match needs more than
 * the default JIT stack, a bigger one. */
struct matcher {
	pcre2_match_data *md;
	pcre2_match_context *mctx;
	pcre2_jit_stack *jit_stack;
};

static int do_match(struct matcher *m, const pcre2_code *re, const char *subj, uint32_t len,
		    uint32_t start, char *err, size_t errlen)
{
	for (;;) {
		int rc = pcre2_match(re, (PCRE2_SPTR)subj, len, start, PCRE2_NO_UTF_CHECK, m->md,
				     m->mctx);

		if (rc >= 0 || rc == PCRE2_ERROR_NOMATCH)
			return rc;
		if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !m->jit_stack) {
			m->mctx = pcre2_match_context_create(NULL);
			m->jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
			if (!m->mctx || !m->jit_stack) {
				snprintf(err, errlen, "out of memory");
				return -100;
			}
			pcre2_jit_stack_assign(m->mctx, NULL, m->jit_stack);
			continue;
		}
		PCRE2_UCHAR msg[160];

		pcre2_get_error_message(rc, msg, sizeof(msg));
		snprintf(err, errlen, "pre-tokenizer regex failed: %s", (const char *)msg);
		return -100;
	}
}

/* Splits each span of in by re into out. */
static int split_stage(const pcre2_code *re, struct matcher *m, const char *text,
		       const struct span_list *in, struct span_list *out, char *err, size_t errlen)
{
	for (uint32_t s = 0; s < in->n; s++) {
		const char *subj = text + in->v[s].start;
		uint32_t len = in->v[s].len, pos = 0, done = 0;

		while (pos < len) {
			int rc = do_match(m, re, subj, len, pos, err, errlen);
			PCRE2_SIZE *ov;

			if (rc == PCRE2_ERROR_NOMATCH)
				break;
			if (rc < 0)
				return -1;
			ov = pcre2_get_ovector_pointer(m->md);
			if (ov[1] == ov[0]) {
				/* An empty match splits nothing; step one character. */
				pos = (uint32_t)ov[0] + 1;
				while (pos < len && ((uint8_t)subj[pos] & 0xc0) == 0x80)
					pos++;
				continue;
			}
			if (span_push(out, in->v[s].start + done, (uint32_t)ov[0] - done) ||
			    span_push(out, in->v[s].start + (uint32_t)ov[0], (uint32_t)(ov[1] - ov[0])))
				goto oom;
			done = pos = (uint32_t)ov[1];
		}
		if (span_push(out, in->v[s].start + done, len - done))
			goto oom;
	}
	return 0;
oom:
	snprintf(err, errlen, "out of memory");
	return -1;
}

int exl_tok_pre_split(const struct tok_pre *p, const char *text, uint32_t len,
		      struct tok_span **words, char *err, size_t errlen)
{
	struct span_list a = { 0 }, b = { 0 };
	struct matcher m = { 0 };
	int ret = -1;

	*words = NULL;
	if (span_push(&a, 0, len))
		goto oom;
	for (int i = 0; i < p->n; i++) {
		m.md = pcre2_match_data_create_from_pattern(p->re[i], NULL);
		if (!m.md)
			goto oom;
		b.n = 0;
		if (split_stage(p->re[i], &m, text, &a, &b, err, errlen))
			goto out;
		pcre2_match_data_free(m.md);
		m.md = NULL;

		struct span_list t = a;
		a = b;
		b = t;
	}
	if (a.n > INT32_MAX) {
		snprintf(err, errlen, "text splits into too many words");
		goto out;
	}
	*words = a.v;
	a.v = NULL;
	ret = (int)a.n;
	goto out;
oom:
	snprintf(err, errlen, "out of memory");
out:
	pcre2_match_data_free(m.md);
	pcre2_match_context_free(m.mctx);
	pcre2_jit_stack_free(m.jit_stack);
	free(a.v);
	free(b.v);
	return ret;
}
