/* exld-mkmodel: writes a random-weight GGUF of any shape, for benchmarks
 * and tests: llama (with llama 3.1's rope_freqs, or Mixtral's experts),
 * qwen2, qwen3, qwen3moe, phi3 (fused q/k/v and gate/up, longrope factors),
 * gemma2 and gemma3 (post norms, soft-capping, sliding windows), mistral3
 * granite and smollm3 (llama's tensors under their own names, granite's
 * scales);
 * head size,
 * rope dimensions, base, epsilon and scaling included, and any other
 * metadata key through --kv.  Tensor names, shapes and metadata are those
 * llama.cpp's loader reads for each architecture, so the same file runs in
 * both engines.  The weights come from a seeded PRNG per row, so a file
 * depends only on its options, never on the thread count.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/gguf/gguf_write.h"
#include "kernels/formats/dtype.h"
#include "kernels/formats/quant.h"
#include "tests/tools/mkmodel_lora.h"

#define MAX_THREADS 64
#define MAX_KV_OVERRIDES 32

/* A metadata key set on the command line (--kv, --pre): it replaces the
 * value the tool would write for that key, or is added at the end. */
struct kv_override {
	const char *key;
	struct gguf_value val;
	bool used;
};

struct opts {
	int64_t dim, layers, heads, kv_heads, ff, vocab, ctx;
	int64_t head_dim, rope_dim; /* 0: dim / heads, head_dim */
	double rope_base, eps;      /* 0: the architecture's default */
	double rope_scale;          /* 0: no rope.scaling.* keys */
	const char *rope_scaling;   /* rope.scaling.type; NULL: linear when scaled */
	const char *family;         /* --arch, or the text architecture of a VL one */
	struct kv_override kv[MAX_KV_OVERRIDES];
	int n_kv;
	uint32_t type;
	uint32_t ftype;     /* general.file_type */
	bool mix_m;         /* a _M mix: some tensors Q6_K (type_of) */
	uint64_t seed;
	const char *arch;
	bool qkv_bias;
	bool qk_norm;      /* qwen3, qwen3moe, gemma3 */
	bool gemma;        /* post norms; gemma2 has no output.weight */
	bool phi3;         /* fused attn_qkv and gate/up */
	bool glm4;         /* post norms, fused gate/up, q/k/v biases, half rope */
	bool olmo2;        /* post norms only, q/k norms over all heads */
	bool oss;          /* gpt-oss: sinks, biases everywhere, experts only */
	bool bert;         /* bert, nomic-bert: encoders, LayerNorms after blocks */
	bool rope_freqs;   /* llama: rope_freqs.weight */
	int64_t longrope;  /* phi3: original context of the rope factors; 0 none */
	int64_t experts, experts_used, expert_ff;
	int64_t swa;       /* gemma: attention.sliding_window; 0: the default */
	const char *swa_pattern;
	bool phi3_vocab;   /* the vocabulary has Phi-3's <|endoftext|> */
	bool type_count;   /* --vocab-from gave tokenizer.ggml.token_type_count */
	bool tied;
	const char *vocab_from;
	const char *chat_template;  /* a file, for tokenizer.chat_template */
	const char *out;
	int threads;
	bool exact;
};

/* What one tensor's fill produces. */
enum fill_kind { FILL_MATRIX, FILL_NORM, FILL_BIAS, FILL_BIAS_WIDE, FILL_SINK, FILL_ROPE_FREQS,
		 FILL_ROPE_LONG, FILL_ROPE_SHORT };

struct tensor_spec {
	char name[64];
	enum fill_kind kind;
	uint32_t type;
	int64_t cols; /* ne[0] */
	int64_t rows; /* ne[1]; 1 for vectors */
	uint64_t seed;
	uint64_t pool_seed;
	bool exact; /* quantize every row, never from a block pool */
	int threads;
	double rope_base; /* FILL_ROPE_FREQS: the frequencies the factors divide */
};

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* xoshiro256+: fast, and its high bits (all a float uses) are good. */
struct rng {
	uint64_t s[4];
};

static void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static inline uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = s[0] + s[3];
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

/* Uniform in [-1, 1). */
static inline float rng_sym(struct rng *r)
{
	return (float)(rng_next(r) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static uint64_t hash_str(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

/* The floats of one row: matrices uniform in +-1/sqrt(cols), so a matmul
 * keeps the scale of its input; norms near 1; biases small. */
static void gen_row(const struct tensor_spec *t, int64_t row, float *x)
{
	struct rng r;
	float scale;

	rng_seed(&r, t->seed ^ ((uint64_t)row * 0xd1342543de82ef95ull));
	switch (t->kind) {
	case FILL_MATRIX:
		scale = 1.0f / sqrtf((float)t->cols);
		for (int64_t i = 0; i < t->cols; i++)
			x[i] = rng_sym(&r) * scale;
		break;
	case FILL_NORM:
		for (int64_t i = 0; i < t->cols; i++)
			x[i] = 1.0f + 0.1f * rng_sym(&r);
		break;
	case FILL_BIAS:
		for (int64_t i = 0; i < t->cols; i++)
			x[i] = 0.05f * rng_sym(&r);
		break;
	case FILL_BIAS_WIDE:
		for (int64_t i = 0; i < t->cols; i++)
			x[i] = 9.0f * rng_sym(&r);
		break;
	case FILL_SINK:
		/* logits about as large as a few scores: the sink takes a
		 * share that shows */
		for (int64_t i = 0; i < t->cols; i++)
			x[i] = 1.0f + 1.5f * rng_sym(&r);
		break;
	case FILL_ROPE_FREQS:
		/* llama 3.1's factors (as its converter computes them: factor
		 * 8, low and high frequency factors 1 and 4) for an original
		 * context of 32 positions instead of 8192, so that every kind
		 * of factor (1, 8 and the smooth ones between) turns pairs the
		 * positions of a short test reach */
		for (int64_t i = 0; i < t->cols; i++) {
			const double old_ctx = 32, lo = 1, hi = 4, factor = 8;
			double freq = pow(t->rope_base, -2.0 * (double)i / (double)(2 * t->cols));
			double wavelen = 2 * 3.14159265358979323846 / freq;

			if (wavelen < old_ctx / hi) {
				x[i] = 1.0f;
			} else if (wavelen > old_ctx / lo) {
				x[i] = (float)factor;
			} else {
				double smooth = (old_ctx / wavelen - lo) / (hi - lo);

				x[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
			}
		}
		break;
	case FILL_ROPE_LONG:
	case FILL_ROPE_SHORT:
		/* phi3's factors grow along the head, short ones near 1 and
		 * long ones to tens */
		for (int64_t i = 0; i < t->cols; i++) {
			double up = (double)i / (double)t->cols;

			x[i] = (float)(1.0 + (t->kind == FILL_ROPE_LONG ? 30.0 : 1.5) * up * up *
				       (0.8 + 0.2 * (rng_sym(&r) + 1.0) / 2.0));
		}
		break;
	}
}

/* Runs fn(ctx, i0, i1) over [0, n) split across up to `threads` threads;
 * returns nonzero when any part failed. */
typedef int (*range_fn)(void *ctx, int64_t i0, int64_t i1);

struct range_job {
	range_fn fn;
	void *ctx;
	int64_t i0, i1;
	int failed;
};

static void *range_run(void *arg)
{
	struct range_job *j = arg;

	j->failed = j->fn(j->ctx, j->i0, j->i1);
	return NULL;
}

static int parallel_for(int64_t n, int threads, range_fn fn, void *ctx)
{
	struct range_job jobs[MAX_THREADS];
	pthread_t tid[MAX_THREADS];
	bool started[MAX_THREADS] = { false };
	int failed = 0;

	if (threads > n)
		threads = n > 0 ? (int)n : 1;
	for (int i = 0; i < threads; i++)
		jobs[i] = (struct range_job){ fn, ctx, n * i / threads, n * (i + 1) / threads, 0 };
	for (int i = 1; i < threads; i++)
		started[i] = !pthread_create(&tid[i], NULL, range_run, &jobs[i]);
	range_run(&jobs[0]);
	for (int i = 1; i < threads; i++) {
		if (started[i])
			pthread_join(tid[i], NULL);
		else
			range_run(&jobs[i]); /* no thread: do its share here */
	}
	for (int i = 0; i < threads; i++)
		failed |= jobs[i].failed;
	return failed;
}

/* Quantizing every row of a billion-weight model with the K-quants' or the
 * IQ4 types' scale search takes minutes, so their tensors of over a million
 * weights are assembled from a pool of POOL_BLOCKS random blocks quantized by exl_quantize_row: each block of
 * each row is a pool block picked by the row's PRNG.  The rows all differ
 * and every block is a real quantization of random floats of the right
 * scale.  --exact quantizes every row instead. */
#define POOL_BLOCKS 16384

struct pool {
	uint32_t type;
	int64_t cols; /* the scale of the floats is 1/sqrt(cols) */
	size_t block_bytes;
	uint8_t *blocks;
};

static struct pool pools[8];
static int n_pools;

struct row_ctx {
	const struct tensor_spec *t;
	uint8_t *dst;
	size_t row_bytes;
	const struct pool *pool;
};

static int quantize_rows(void *arg, int64_t r0, int64_t r1)
{
	struct row_ctx *c = arg;
	const struct tensor_spec *t = c->t;
	float *x = malloc((size_t)t->cols * sizeof(float));
	int rc = 0;

	if (!x)
		return -1;
	for (int64_t r = r0; r < r1; r++) {
		gen_row(t, r, x);
		if (exl_quantize_row(t->type, x, c->dst + (size_t)r * c->row_bytes, t->cols) != c->row_bytes) {
			rc = -1;
			break;
		}
	}
	free(x);
	return rc;
}

static int pool_rows(void *arg, int64_t r0, int64_t r1)
{
	struct row_ctx *c = arg;
	const struct pool *p = c->pool;
	int64_t per_row = (int64_t)(c->row_bytes / p->block_bytes);

	for (int64_t r = r0; r < r1; r++) {
		uint8_t *d = c->dst + (size_t)r * c->row_bytes;
		struct rng g;

		rng_seed(&g, c->t->seed ^ ((uint64_t)r * 0xd1342543de82ef95ull));
		for (int64_t b = 0; b < per_row; b++)
			memcpy(d + (size_t)b * p->block_bytes,
			       p->blocks + (size_t)(rng_next(&g) % POOL_BLOCKS) * p->block_bytes,
			       p->block_bytes);
	}
	return 0;
}

struct pool_ctx {
	struct pool *p;
	uint32_t block_elems;
	uint64_t seed;
};

static int pool_fill(void *arg, int64_t i0, int64_t i1)
{
	struct pool_ctx *c = arg;
	float x[QK_K], scale = 1.0f / sqrtf((float)c->p->cols);

	for (int64_t i = i0; i < i1; i++) {
		struct rng g;

		rng_seed(&g, c->seed ^ ((uint64_t)i * 0xd1342543de82ef95ull));
		for (uint32_t k = 0; k < c->block_elems; k++)
			x[k] = rng_sym(&g) * scale;
		if (exl_quantize_row(c->p->type, x, c->p->blocks + (size_t)i * c->p->block_bytes,
				     c->block_elems) != c->p->block_bytes)
			return -1;
	}
	return 0;
}

static const struct pool *get_pool(const struct tensor_spec *t, char *err, size_t errlen)
{
	const struct exl_dtype_info *info = exl_dtype_info(t->type);
	struct pool_ctx c;
	struct pool *p;

	for (int i = 0; i < n_pools; i++)
		if (pools[i].type == t->type && pools[i].cols == t->cols)
			return &pools[i];
	if (n_pools == (int)(sizeof(pools) / sizeof(pools[0])) || info->block_elems > QK_K) {
		snprintf(err, errlen, "%s: cannot make a block pool", t->name);
		return NULL;
	}
	p = &pools[n_pools];
	p->type = t->type;
	p->cols = t->cols;
	p->block_bytes = info->block_bytes;
	p->blocks = malloc((size_t)POOL_BLOCKS * p->block_bytes);
	if (!p->blocks) {
		snprintf(err, errlen, "%s: out of memory for a block pool", t->name);
		return NULL;
	}
	c = (struct pool_ctx){ p, info->block_elems,
			       t->pool_seed ^ ((uint64_t)t->cols << 20) ^ t->type };
	if (parallel_for(POOL_BLOCKS, t->threads, pool_fill, &c)) {
		snprintf(err, errlen, "%s: cannot quantize the block pool", t->name);
		free(p->blocks);
		return NULL;
	}
	n_pools++;
	return p;
}

static void free_pools(void)
{
	for (int i = 0; i < n_pools; i++)
		free(pools[i].blocks);
	n_pools = 0;
}

/* The types whose quantizers search scales (K-quants, IQ4). */
static bool slow_quantizer(uint32_t type)
{
	switch (type) {
	case EXL_Q2_K:
	case EXL_Q3_K:
	case EXL_Q4_K:
	case EXL_Q5_K:
	case EXL_Q6_K:
	case EXL_IQ4_NL:
	case EXL_IQ4_XS:
		return true;
	default:
		return false;
	}
}

static int fill_tensor(void *ctx, void *dst, size_t nbytes, char *err, size_t errlen)
{
	const struct tensor_spec *t = ctx;
	size_t row_bytes = exl_dtype_row_bytes(t->type, (uint64_t)t->cols);
	struct row_ctx c = { .t = t, .dst = dst, .row_bytes = row_bytes };
	uint64_t weights;

	if (row_bytes == 0 || row_bytes * (size_t)t->rows != nbytes) {
		snprintf(err, errlen, "%s: %zu bytes for %" PRId64 " rows of %zu", t->name, nbytes,
			 t->rows, row_bytes);
		return -1;
	}
	weights = (uint64_t)t->rows * (uint64_t)t->cols;
	if (!t->exact && slow_quantizer(t->type) && t->kind == FILL_MATRIX &&
	    weights > (uint64_t)POOL_BLOCKS / 4 * QK_K) {
		c.pool = get_pool(t, err, errlen);
		if (!c.pool)
			return -1;
		parallel_for(t->rows, t->threads, pool_rows, &c);
		return 0;
	}
	if (parallel_for(t->rows, t->threads, quantize_rows, &c)) {
		snprintf(err, errlen, "%s: cannot quantize a row of %" PRId64 " to %s (or out of memory)",
			 t->name, t->cols, exl_dtype_info(t->type)->name);
		return -1;
	}
	return 0;
}

static const struct {
	const char *name;
	uint32_t type;
	uint32_t ftype; /* llama.cpp's general.file_type for an all-this-type model */
	bool mix_m;     /* llama.cpp's _M mix of it and Q6_K (type_of) */
} type_names[] = {
	{ "f32", EXL_F32, 0, false },
	{ "f16", EXL_F16, 1, false },
	{ "bf16", EXL_BF16, 32, false },
	{ "q8_0", EXL_Q8_0, 7, false },
	{ "q4_0", EXL_Q4_0, 2, false },
	{ "q4_1", EXL_Q4_1, 3, false },
	{ "q5_0", EXL_Q5_0, 8, false },
	{ "q5_1", EXL_Q5_1, 9, false },
	{ "q2_k", EXL_Q2_K, 10, false },
	{ "q3_k", EXL_Q3_K, 11, false },  /* Q3_K_S: every matrix Q3_K */
	{ "q4_k", EXL_Q4_K, 14, false },  /* Q4_K_S */
	{ "q5_k", EXL_Q5_K, 16, false },  /* Q5_K_S */
	{ "q4_k_m", EXL_Q4_K, 15, true },
	{ "q5_k_m", EXL_Q5_K, 17, true },
	{ "q6_k", EXL_Q6_K, 18, false },
	{ "iq4_nl", EXL_IQ4_NL, 25, false },
	{ "iq4_xs", EXL_IQ4_XS, 30, false },
	{ "mxfp4", EXL_MXFP4, 38, false }, /* llama.cpp's MXFP4_MOE */
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: exld-mkmodel [options] -o FILE\n"
		"Writes a random-weight GGUF of one of llama.cpp's architectures.\n"
		"   or: exld-mkmodel --lora-for BASE.gguf [--rank R] [--alpha A] [--seed N]\n"
		"                    [--lora-targets attn_q,attn_k,...] -o FILE\n"
		"       writes a random LoRA adapter (llama.cpp's GGUF adapter format) for\n"
		"       BASE: rank R (8), adapter.lora.alpha A (16), for every block's\n"
		"       attn_q/k/v/output and ffn_gate/up/down (or those listed)\n"
		"  --dim N          embedding length (default 64)\n"
		"  --layers N       blocks (default 2)\n"
		"  --heads N        attention heads (default 4)\n"
		"  --kv-heads N     key/value heads, dividing --heads (default: --heads)\n"
		"  --ff N           feed-forward length (default 4*dim*2/3 rounded up to 32)\n"
		"  --vocab N        vocabulary size (default 512, or that of --vocab-from)\n"
		"  --ctx N          context length (default 2048)\n"
		"  --type T         weight type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k\n"
		"                   q3_k q4_k q5_k q6_k iq4_nl iq4_xs mxfp4 (default f32);\n"
		"                   norms and biases are always f32.  q4_k_m, q5_k_m:\n"
		"                   llama.cpp's _M mix, Q4_K or Q5_K with Q6_K for output,\n"
		"                   and for attn_v and ffn_down in the first and last\n"
		"                   eighth of the layers and every third between\n"
		"  --seed N         PRNG seed (default 1)\n"
		"  --arch A         llama, qwen2 (q/k/v biases), qwen3 (per-head q/k norms),\n"
		"                   qwen3moe (q/k norms, experts: give --experts), phi3\n"
		"                   (fused attn_qkv, ffn_up holding gate and up), gemma2\n"
		"                   (post norms, GELU, soft-capping, sliding window, tied),\n"
		"                   gemma3 (gemma2's block with q/k norms, no attention\n"
		"                   soft-capping, 5 local layers in 6), mistral3 (llama's\n"
		"                   tensors; its YaRN and temperature keys through --kv),\n"
		"                   granite (llama's tensors; Granite 3.3 2B's logit,\n"
		"                   residual, embedding and attention scales; granitemoe:\n"
		"                   with --experts), smollm3\n"
		"                   (llama's tensors; every 4th layer without rope)\n"
		"                   qwen2vl, qwen3vl, qwen3vlmoe (the language models of\n"
		"                   Qwen2-VL / Qwen3-VL: qwen2's, qwen3's, qwen3moe's\n"
		"                   tensors with rope.dimension_sections), glm4 (post\n"
		"                   norms, gate and up in one ffn_up, q/k/v biases, the\n"
		"                   rope on half the head by default), gemma (Gemma 1:\n"
		"                   llama's tensors, tied), olmo2 (norms after attention\n"
		"                   and FFN only, q/k norms over all heads; --swa: OLMo 3)\n"
		"                   (default llama)\n"
		"  --rope-freqs     llama: a rope_freqs.weight tensor (llama 3.1's frequency\n"
		"                   factors, for an original context of 32 positions)\n"
		"  --longrope N     phi3: rope_factors_long/short tensors, original context N\n"
		"                   (rope.scaling.original_context_length) and the\n"
		"                   rope.scaling.attn_factor phi3's converter derives from\n"
		"                   --ctx / N\n"
		"  --experts N      llama (Mixtral) or qwen3moe: N experts per layer\n"
		"  --experts-used K experts each token goes through (default 2)\n"
		"  --expert-ff N    qwen3moe: expert_feed_forward_length (default --ff / K)\n"
		"  --swa N          gemma2/gemma3: attention.sliding_window N (gemma2's\n"
		"                   default 4096; gemma3 has none unless given)\n"
		"  --swa-pattern P  attention.sliding_window_pattern: a number n (the last\n"
		"                   layer of every n is global) or one 0/1 a layer (1: local)\n"
		"  --head-dim N     size of one attention head (default dim/heads); when given,\n"
		"                   attention.key_length and value_length are written and\n"
		"                   q/k/v/output are shaped heads*N / kv-heads*N\n"
		"  --rope-dim N     rope.dimension_count: dimensions rotated per head (even,\n"
		"                   at most the head size; default the head size)\n"
		"  --rope-base F    rope.freq_base (default 10000 llama, 1000000 qwen2)\n"
		"  --eps F          attention.layer_norm_rms_epsilon (default 1e-5 llama,\n"
		"                   1e-6 qwen2)\n"
		"  --rope-scale F   rope.scaling.factor F with rope.scaling.type linear\n"
		"                   (positions divided by F); no scaling keys by default\n"
		"  --rope-scaling T rope.scaling.type T (none, linear, yarn, ...), with the\n"
		"                   factor of --rope-scale when given\n"
		"  --kv KEY=T:V     set metadata KEY (a full key such as llama.expert_count)\n"
		"                   to V of type T: u32, i32, f32, bool or str; it replaces\n"
		"                   the value the tool writes for KEY (repeatable)\n"
		"  --pre NAME       tokenizer.ggml.pre NAME (replacing that of --vocab-from)\n"
		"  --tied           no output.weight: the output reuses token_embd\n"
		"  --chat-template F  tokenizer.chat_template: the Jinja template in file F\n"
		"  --vocab-from F   copy every tokenizer.* key from the GGUF F (its vocabulary\n"
		"                   size wins); without it a synthetic byte-level SentencePiece\n"
		"                   vocabulary (<unk> <s> </s>, 256 byte tokens, filler pieces)\n"
		"  --threads N      threads for generating and quantizing (default: all CPUs)\n"
		"  --exact          K-quants and IQ4 types: quantize every row (slow on big\n"
		"                   models); by default tensors over %d weights draw each\n"
		"                   block from a pool of %d quantized random blocks\n"
		"  -o FILE          output file\n", POOL_BLOCKS / 4 * QK_K, POOL_BLOCKS);
}

static int parse_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "exld-mkmodel: %s wants an integer in %" PRId64 "..%" PRId64 ", not '%s'\n",
			opt, lo, hi, s);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_float(const char *opt, const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
		fprintf(stderr, "exld-mkmodel: %s wants a number in %g..%g, not '%s'\n", opt, lo, hi,
			s);
		return -1;
	}
	*out = v;
	return 0;
}

static int add_override(struct opts *o, const char *key, struct gguf_value val)
{
	for (int i = 0; i < o->n_kv; i++) {
		if (!strcmp(o->kv[i].key, key)) {
			fprintf(stderr, "exld-mkmodel: metadata key '%s' set twice\n", key);
			return -1;
		}
	}
	if (o->n_kv == MAX_KV_OVERRIDES) {
		fprintf(stderr, "exld-mkmodel: more than %d --kv keys\n", MAX_KV_OVERRIDES);
		return -1;
	}
	o->kv[o->n_kv++] = (struct kv_override){ .key = key, .val = val };
	return 0;
}

/* KEY=T:V; KEY points into arg, which outlives the options (argv). */
static int parse_kv(struct opts *o, char *arg)
{
	char *eq = strchr(arg, '='), *colon;
	struct gguf_value v = { 0 };
	int64_t i;
	double f;

	colon = eq ? strchr(eq + 1, ':') : NULL;
	if (!eq || eq == arg || !colon) {
		fprintf(stderr, "exld-mkmodel: --kv wants KEY=TYPE:VALUE, not '%s'\n", arg);
		return -1;
	}
	*eq = *colon = '\0';
	const char *type = eq + 1, *val = colon + 1;

	if (!strcmp(type, "u32")) {
		if (parse_int("--kv u32", val, 0, UINT32_MAX, &i))
			return -1;
		v.type = GGUF_VT_UINT32;
		v.u64 = (uint64_t)i;
	} else if (!strcmp(type, "i32")) {
		if (parse_int("--kv i32", val, INT32_MIN, INT32_MAX, &i))
			return -1;
		v.type = GGUF_VT_INT32;
		v.i64 = i;
	} else if (!strcmp(type, "f32")) {
		if (parse_float("--kv f32", val, -3.4e38, 3.4e38, &f))
			return -1;
		v.type = GGUF_VT_FLOAT32;
		v.f64 = f;
	} else if (!strcmp(type, "bool")) {
		if (strcmp(val, "true") && strcmp(val, "false")) {
			fprintf(stderr, "exld-mkmodel: --kv bool wants true or false, not '%s'\n", val);
			return -1;
		}
		v.type = GGUF_VT_BOOL;
		v.u64 = !strcmp(val, "true");
	} else if (!strcmp(type, "str")) {
		v.type = GGUF_VT_STRING;
		v.str = (struct gguf_str){ strlen(val), val };
	} else {
		fprintf(stderr, "exld-mkmodel: --kv type '%s' is not u32, i32, f32, bool or str\n",
			type);
		return -1;
	}
	return add_override(o, arg, v);
}

/* 0 when the options are good, 1 for --help, -1 after a message.  --kv
 * values are cut in place in argv. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	int64_t v;

	*o = (struct opts){
		.dim = 64, .layers = 2, .heads = 4, .kv_heads = 0, .ff = 0, .vocab = 0,
		.ctx = 2048, .type = EXL_F32, .seed = 1, .arch = "llama", .threads = 0,
	};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;
		int64_t *target = NULL;
		int64_t lo = 1, hi = 1 << 20;

		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return 1;
		if (!strcmp(a, "--tied")) {
			o->tied = true;
			continue;
		}
		if (!strcmp(a, "--exact")) {
			o->exact = true;
			continue;
		}
		if (!strcmp(a, "--rope-freqs")) {
			o->rope_freqs = true;
			continue;
		}
		if (!val) {
			fprintf(stderr, "exld-mkmodel: %s needs a value (or is unknown)\n", a);
			return -1;
		}
		if (!strcmp(a, "--dim"))
			target = &o->dim;
		else if (!strcmp(a, "--layers"))
			target = &o->layers, hi = 4096;
		else if (!strcmp(a, "--heads"))
			target = &o->heads, hi = 4096;
		else if (!strcmp(a, "--kv-heads"))
			target = &o->kv_heads, hi = 4096;
		else if (!strcmp(a, "--ff"))
			target = &o->ff;
		else if (!strcmp(a, "--vocab"))
			target = &o->vocab, hi = 1 << 24;
		else if (!strcmp(a, "--ctx"))
			target = &o->ctx, hi = 1 << 24;
		else if (!strcmp(a, "--head-dim"))
			target = &o->head_dim, hi = 4096;
		else if (!strcmp(a, "--rope-dim"))
			target = &o->rope_dim, hi = 4096;
		else if (!strcmp(a, "--longrope"))
			target = &o->longrope, hi = 1 << 24;
		else if (!strcmp(a, "--experts"))
			target = &o->experts, hi = 256;
		else if (!strcmp(a, "--experts-used"))
			target = &o->experts_used, hi = 256;
		else if (!strcmp(a, "--expert-ff"))
			target = &o->expert_ff;
		else if (!strcmp(a, "--swa"))
			target = &o->swa, hi = 1 << 24;
		if (target) {
			if (parse_int(a, val, lo, hi, target))
				return -1;
		} else if (!strcmp(a, "--rope-base")) {
			if (parse_float(a, val, 1.0001, 1e12, &o->rope_base))
				return -1;
		} else if (!strcmp(a, "--eps")) {
			if (parse_float(a, val, 1e-12, 1.0, &o->eps))
				return -1;
		} else if (!strcmp(a, "--rope-scale")) {
			if (parse_float(a, val, 1e-3, 1e3, &o->rope_scale))
				return -1;
		} else if (!strcmp(a, "--rope-scaling")) {
			o->rope_scaling = val;
		} else if (!strcmp(a, "--kv")) {
			if (parse_kv(o, argv[i + 1]))
				return -1;
		} else if (!strcmp(a, "--pre")) {
			struct gguf_value v = { .type = GGUF_VT_STRING };

			v.str = (struct gguf_str){ strlen(val), val };
			if (add_override(o, "tokenizer.ggml.pre", v))
				return -1;
		} else if (!strcmp(a, "--seed")) {
			if (parse_int(a, val, 0, INT64_MAX, &v))
				return -1;
			o->seed = (uint64_t)v;
		} else if (!strcmp(a, "--threads")) {
			if (parse_int(a, val, 1, MAX_THREADS, &v))
				return -1;
			o->threads = (int)v;
		} else if (!strcmp(a, "--type")) {
			size_t k, n = sizeof(type_names) / sizeof(type_names[0]);

			for (k = 0; k < n && strcmp(val, type_names[k].name); k++)
				;
			if (k == n) {
				fprintf(stderr, "exld-mkmodel: unknown --type '%s' (f32 f16 bf16 q8_0 q4_0 q4_1"
					" q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs mxfp4 q4_k_m q5_k_m)\n", val);
				return -1;
			}
			o->type = type_names[k].type;
			o->ftype = type_names[k].ftype;
			o->mix_m = type_names[k].mix_m;
		} else if (!strcmp(a, "--arch")) {
			static const char *const archs[] = { "llama", "qwen2", "qwen3", "qwen3moe",
							     "phi3", "gemma2", "gemma3", "mistral3",
							     "granite", "smollm3", "qwen2vl", "qwen3vl",
							     "qwen3vlmoe", "glm4", "gemma", "olmo2",
							     "granitemoe", "gpt-oss", "bert",
							     "nomic-bert" };
			size_t k, n = sizeof(archs) / sizeof(archs[0]);

			for (k = 0; k < n && strcmp(val, archs[k]); k++)
				;
			if (k == n) {
				fprintf(stderr, "exld-mkmodel: unknown --arch '%s' (llama qwen2 qwen3 "
					"qwen3moe phi3 gemma2 gemma3 mistral3 granite smollm3 "
					"qwen2vl qwen3vl qwen3vlmoe glm4 gemma olmo2 granitemoe "
					"gpt-oss bert nomic-bert)\n",
					val);
				return -1;
			}
			o->arch = val;
		} else if (!strcmp(a, "--swa-pattern")) {
			o->swa_pattern = val;
		} else if (!strcmp(a, "--chat-template")) {
			o->chat_template = val;
		} else if (!strcmp(a, "--vocab-from")) {
			o->vocab_from = val;
		} else if (!strcmp(a, "-o")) {
			o->out = val;
		} else {
			fprintf(stderr, "exld-mkmodel: unknown option %s\n", a);
			return -1;
		}
		i++;
	}
	/* the VL models' language halves are their text architectures' */
	o->family = !strcmp(o->arch, "qwen2vl") ? "qwen2" : !strcmp(o->arch, "qwen3vl") ? "qwen3" :
		    !strcmp(o->arch, "qwen3vlmoe") ? "qwen3moe" :
		    !strcmp(o->arch, "granitemoe") ? "granite" : o->arch;
	o->glm4 = !strcmp(o->family, "glm4");
	o->olmo2 = !strcmp(o->family, "olmo2");
	o->oss = !strcmp(o->family, "gpt-oss");
	o->bert = !strcmp(o->family, "bert") || !strcmp(o->family, "nomic-bert");
	o->qkv_bias = !strcmp(o->family, "qwen2") || o->glm4 || o->oss;
	o->qk_norm = !strcmp(o->family, "qwen3") || !strcmp(o->family, "qwen3moe") ||
		     !strcmp(o->family, "gemma3");
	/* gemma2 / gemma3's post norms; Gemma 1 has llama's tensors */
	o->gemma = !strcmp(o->family, "gemma2") || !strcmp(o->family, "gemma3");
	o->phi3 = !strcmp(o->family, "phi3");
	/* llama.cpp's gemma2 reads no output.weight: a file with one has a
	 * tensor it does not load, which it refuses */
	if (!strcmp(o->family, "gemma2") || !strcmp(o->family, "gemma"))
		o->tied = true;
	if (o->rope_freqs && strcmp(o->family, "llama") && strcmp(o->family, "mistral3")) {
		fprintf(stderr, "exld-mkmodel: --rope-freqs is for --arch llama\n");
		return -1;
	}
	if (o->longrope && !o->phi3) {
		fprintf(stderr, "exld-mkmodel: --longrope is for --arch phi3\n");
		return -1;
	}
	if ((o->swa || o->swa_pattern) && !o->gemma && !o->olmo2 && !o->oss) {
		fprintf(stderr, "exld-mkmodel: --swa and --swa-pattern are for gemma2, gemma3, "
			"olmo2 and gpt-oss\n");
		return -1;
	}
	if (o->experts && strcmp(o->family, "llama") && strcmp(o->family, "mistral3") &&
	    strcmp(o->family, "qwen3moe") && strcmp(o->family, "granite") && !o->oss) {
		fprintf(stderr, "exld-mkmodel: --experts is for --arch llama or qwen3moe\n");
		return -1;
	}
	if ((!strcmp(o->family, "qwen3moe") || !strcmp(o->arch, "granitemoe") || o->oss) &&
	    !o->experts) {
		fprintf(stderr, "exld-mkmodel: --arch %s needs --experts\n", o->arch);
		return -1;
	}
	if (o->experts) {
		if (!o->experts_used)
			o->experts_used = o->experts < 2 ? o->experts : 2;
		if (o->experts_used > o->experts) {
			fprintf(stderr, "exld-mkmodel: --experts-used %" PRId64 " is more than "
				"--experts %" PRId64 "\n", o->experts_used, o->experts);
			return -1;
		}
	} else if (o->experts_used || o->expert_ff) {
		fprintf(stderr, "exld-mkmodel: --experts-used and --expert-ff need --experts\n");
		return -1;
	}
	if (o->expert_ff && strcmp(o->family, "qwen3moe") && !o->oss) {
		fprintf(stderr, "exld-mkmodel: --expert-ff is for --arch qwen3moe (Mixtral's "
			"experts are --ff wide)\n");
		return -1;
	}
	if (!o->out) {
		fprintf(stderr, "exld-mkmodel: -o FILE is required\n");
		return -1;
	}
	if (!o->kv_heads)
		o->kv_heads = o->heads;
	if (!o->ff)
		o->ff = ((o->dim * 8 / 3) + 31) / 32 * 32;
	/* each architecture's usual epsilon and rope base */
	bool small_base = !strcmp(o->family, "llama") || o->phi3 || !strcmp(o->family, "gemma2") ||
			  !strcmp(o->family, "gemma");
	if (!o->eps)
		o->eps = !strcmp(o->family, "llama") || o->phi3 ? 1e-5 : 1e-6;
	if (!o->rope_base)
		o->rope_base = small_base ? 10000.0 : 1000000.0;
	if (o->experts && !strcmp(o->family, "qwen3moe") && !o->expert_ff)
		o->expert_ff = o->ff / o->experts_used;
	/* llama.cpp requires gpt-oss's expert width and window */
	if (o->oss && !o->expert_ff)
		o->expert_ff = o->ff;
	if (o->oss && !o->swa)
		o->swa = 128;
	if (!o->head_dim && (o->dim % o->heads || (o->dim / o->heads) % 2)) {
		fprintf(stderr, "exld-mkmodel: --dim %" PRId64 " must be --heads %" PRId64
			" times an even head size (or give --head-dim)\n", o->dim, o->heads);
		return -1;
	}
	int64_t head_dim = o->head_dim ? o->head_dim : o->dim / o->heads;

	/* GLM-4 rotates half of each head (partial_rotary_factor 0.5) */
	if (o->glm4 && !o->rope_dim && head_dim % 4 == 0)
		o->rope_dim = head_dim / 2;
	int64_t rope_dim = o->rope_dim ? o->rope_dim : head_dim;

	if (rope_dim % 2 || rope_dim > head_dim) {
		fprintf(stderr, "exld-mkmodel: the rope dimension count %" PRId64 " must be even"
			" and at most the head size %" PRId64 "\n", rope_dim, head_dim);
		return -1;
	}
	if (o->heads % o->kv_heads) {
		fprintf(stderr, "exld-mkmodel: --kv-heads %" PRId64 " must divide --heads %" PRId64 "\n",
			o->kv_heads, o->heads);
		return -1;
	}
	/* Every weight row is dim, ff or heads * head_dim long. */
	const struct exl_dtype_info *info = exl_dtype_info(o->type);

	if (o->dim % info->block_elems || o->ff % info->block_elems ||
	    o->expert_ff % info->block_elems) {
		fprintf(stderr, "exld-mkmodel: --type %s needs --dim and --ff to be multiples of %u"
			" (have %" PRId64 " and %" PRId64 ")\n", info->name, info->block_elems, o->dim, o->ff);
		return -1;
	}
	if ((o->heads * head_dim) % info->block_elems) { /* attn_output's rows */
		fprintf(stderr, "exld-mkmodel: --type %s needs --heads times the head size to be a"
			" multiple of %u (have %" PRId64 ")\n", info->name, info->block_elems,
			o->heads * head_dim);
		return -1;
	}
	if (o->swa_pattern && strspn(o->swa_pattern, "0123456789") != strlen(o->swa_pattern)) {
		fprintf(stderr, "exld-mkmodel: --swa-pattern wants a number or digits\n");
		return -1;
	}
	if (o->swa_pattern && strlen(o->swa_pattern) > 1 &&
	    (strspn(o->swa_pattern, "01") != strlen(o->swa_pattern) ||
	     (int64_t)strlen(o->swa_pattern) != o->layers)) {
		fprintf(stderr, "exld-mkmodel: --swa-pattern '%s' is neither a number nor one 0/1 "
			"for each of the %" PRId64 " layers\n", o->swa_pattern, o->layers);
		return -1;
	}
	if (!o->threads) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		o->threads = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
	}
	return 0;
}

/* Writes the --kv / --pre value given for key, if any; true when it did. */
static bool put_override(struct gguf_writer *w, struct opts *o, const char *key)
{
	for (int i = 0; i < o->n_kv; i++) {
		if (!strcmp(o->kv[i].key, key)) {
			o->kv[i].used = true;
			exl_gguf_writer_set(w, key, &o->kv[i].val);
			return true;
		}
	}
	return false;
}

/* The keys the tool writes, each replaced by its override when there is one. */
static void meta_u32(struct gguf_writer *w, struct opts *o, const char *key, uint32_t v)
{
	if (!put_override(w, o, key))
		exl_gguf_writer_set_u32(w, key, v);
}

static void meta_f32(struct gguf_writer *w, struct opts *o, const char *key, float v)
{
	if (!put_override(w, o, key))
		exl_gguf_writer_set_f32(w, key, v);
}

static void meta_str(struct gguf_writer *w, struct opts *o, const char *key, const char *v)
{
	if (!put_override(w, o, key))
		exl_gguf_writer_set_str(w, key, v);
}

static void meta_bool(struct gguf_writer *w, struct opts *o, const char *key, bool v)
{
	if (!put_override(w, o, key))
		exl_gguf_writer_set_bool(w, key, v);
}

/* The overrides of keys the tool does not write, after all the others. */
static void put_new_overrides(struct gguf_writer *w, const struct opts *o)
{
	for (int i = 0; i < o->n_kv; i++)
		if (!o->kv[i].used)
			exl_gguf_writer_set(w, o->kv[i].key, &o->kv[i].val);
}

/* The synthetic vocabulary: <unk> <s> </s>, the 256 byte tokens, then
 * SentencePiece-style pieces ("▁" alone, then "▁" + word and word for words
 * over a-z in order of length) until the size is reached. */
static int synthetic_vocab(struct gguf_writer *w, struct opts *o, int64_t n)
{
	static const char letters[] = "abcdefghijklmnopqrstuvwxyz";
	char **toks = calloc((size_t)n, sizeof(*toks));
	float *scores = calloc((size_t)n, sizeof(*scores));
	int32_t *types = calloc((size_t)n, sizeof(*types));
	int64_t k = 0;
	int rc = -1;
	char word[16];

	if (!toks || !scores || !types)
		goto out;
	toks[k] = strdup("<unk>"), types[k++] = 2;
	toks[k] = strdup("<s>"), types[k++] = 3;
	toks[k] = strdup("</s>"), types[k++] = 3;
	for (int b = 0; b < 256; b++) {
		char s[8];

		snprintf(s, sizeof(s), "<0x%02X>", b);
		toks[k] = strdup(s), types[k++] = 6;
	}
	if (k < n)
		toks[k] = strdup("\xe2\x96\x81"), types[k] = 1, scores[k] = -1, k++;
	/* words of length len, enumerated as base-26 numbers */
	for (int len = 1; k < n && len < 8; len++) {
		uint64_t total = 1;

		for (int i = 0; i < len; i++)
			total *= 26;
		for (uint64_t idx = 0; idx < total && k < n; idx++) {
			uint64_t x = idx;

			for (int i = len - 1; i >= 0; i--, x /= 26)
				word[i] = letters[x % 26];
			word[len] = '\0';
			for (int spaced = 1; spaced >= 0 && k < n; spaced--) {
				char piece[24];

				snprintf(piece, sizeof(piece), "%s%s", spaced ? "\xe2\x96\x81" : "", word);
				toks[k] = strdup(piece);
				types[k] = 1;
				scores[k] = -(float)k;
				k++;
			}
		}
	}
	/* gpt-oss: its harmony format's markers (o200k_harmony's names, as
	 * control tokens) in place of the last words, so that its chat
	 * template's text tokenizes as the real one's does */
	if (o->oss) {
		static const char *const harmony[] = { "<|endoftext|>", "<|start|>", "<|message|>",
						       "<|channel|>", "<|end|>", "<|return|>",
						       "<|call|>", "<|constrain|>" };
		const int64_t nh = (int64_t)(sizeof(harmony) / sizeof(harmony[0]));

		for (int64_t i = 0; i < nh && n - nh + i >= 3; i++) {
			free(toks[n - nh + i]);
			toks[n - nh + i] = strdup(harmony[i]);
			types[n - nh + i] = 3;
			scores[n - nh + i] = 0;
		}
	}
	for (int64_t i = 0; i < n; i++)
		if (!toks[i])
			goto out;
	meta_str(w, o, "tokenizer.ggml.model", "llama");
	meta_str(w, o, "tokenizer.ggml.pre", "default");
	if (!put_override(w, o, "tokenizer.ggml.tokens"))
		exl_gguf_writer_set_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)toks,
					    (uint64_t)n);
	if (!put_override(w, o, "tokenizer.ggml.scores"))
		exl_gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, scores, (uint64_t)n);
	if (!put_override(w, o, "tokenizer.ggml.token_type"))
		exl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, types,
					(uint64_t)n);
	meta_u32(w, o, "tokenizer.ggml.unknown_token_id", 0);
	meta_u32(w, o, "tokenizer.ggml.bos_token_id", 1);
	meta_u32(w, o, "tokenizer.ggml.eos_token_id", 2);
	meta_bool(w, o, "tokenizer.ggml.add_bos_token", true);
	meta_bool(w, o, "tokenizer.ggml.add_eos_token", false);
	rc = exl_gguf_writer_error(w) ? -1 : 0;
out:
	if (toks)
		for (int64_t i = 0; i < n; i++)
			free(toks[i]);
	free(toks);
	free(scores);
	free(types);
	if (rc && !exl_gguf_writer_error(w))
		fprintf(stderr, "exld-mkmodel: out of memory for the vocabulary\n");
	return rc;
}

/* Copies every tokenizer.* key of the GGUF at path (but those overridden);
 * sets *n_vocab. */
static int copy_vocab(struct gguf_writer *w, struct opts *o, const char *path, int64_t *n_vocab)
{
	char err[512], key[512];
	struct gguf_file *f = exl_gguf_open(path, err, sizeof(err));
	const struct gguf_array *toks;

	if (!f) {
		fprintf(stderr, "exld-mkmodel: %s: %s\n", path, err);
		return -1;
	}
	toks = exl_gguf_get_arr(f, "tokenizer.ggml.tokens");
	if (!toks || toks->elem_type != GGUF_VT_STRING || toks->count == 0) {
		fprintf(stderr, "exld-mkmodel: %s has no tokenizer.ggml.tokens string array\n", path);
		exl_gguf_close(f);
		return -1;
	}
	*n_vocab = (int64_t)toks->count;
	for (uint64_t i = 0; i < toks->count && !o->phi3_vocab; i++)
		o->phi3_vocab = exl_gguf_str_eq(toks->strs[i], "<|endoftext|>");
	for (uint64_t i = 0; i < f->n_kv; i++) {
		const struct gguf_kv *kv = &f->kv[i];

		if (kv->key.len < 10 || kv->key.len >= sizeof(key) || memcmp(kv->key.ptr, "tokenizer.", 10))
			continue;
		memcpy(key, kv->key.ptr, (size_t)kv->key.len);
		key[kv->key.len] = '\0';
		o->type_count |= !strcmp(key, "tokenizer.ggml.token_type_count");
		if (!put_override(w, o, key))
			exl_gguf_writer_set(w, key, &kv->val);
	}
	exl_gguf_close(f);
	return 0;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers and
 * every third in between. */
static bool more_bits(int64_t i, int64_t n)
{
	return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The type of matrix name: o->type, or in a _M mix (llama.cpp's Q4_K_M and
 * Q5_K_M recipe for these tensors) Q6_K for the output, and for attn_v and
 * ffn_down (experts too) in more_bits layers; phi3's fused attn_qkv one
 * step up (Q5_K, or Q6_K from Q5_K). */
static uint32_t type_of(const struct opts *o, const char *name)
{
	long long layer;
	int at = 0;

	if (!o->mix_m)
		return o->type;
	if (!strcmp(name, "output.weight"))
		return EXL_Q6_K;
	if (sscanf(name, "blk.%lld.%n", &layer, &at) != 1 || !at)
		return o->type;
	if (!strcmp(name + at, "attn_qkv.weight"))
		return o->type == EXL_Q4_K ? EXL_Q5_K : EXL_Q6_K;
	if ((!strcmp(name + at, "attn_v.weight") || !strncmp(name + at, "ffn_down", 8)) &&
	    more_bits(layer, o->layers))
		return EXL_Q6_K;
	return o->type;
}

/* A tensor of n_mat matrices of rows x cols (n_mat 1: a matrix or, with one
 * row, a vector; more: a 3-D expert tensor [cols, rows, n_mat]). */
static int add3(struct gguf_writer *w, struct tensor_spec *specs, int *n, const struct opts *o,
		const char *name, enum fill_kind kind, int64_t cols, int64_t rows, int64_t n_mat)
{
	struct tensor_spec *t = &specs[(*n)++];
	uint64_t ne[3] = { (uint64_t)cols, (uint64_t)rows, (uint64_t)n_mat };
	uint32_t dims = n_mat > 1 ? 3 : rows > 1 ? 2 : 1;

	snprintf(t->name, sizeof(t->name), "%s", name);
	t->kind = kind;
	t->type = kind == FILL_MATRIX ? type_of(o, name) : EXL_F32;
	t->cols = cols;
	t->rows = rows * n_mat;
	t->seed = o->seed * 0x9e3779b97f4a7c15ull ^ hash_str(name);
	t->threads = o->threads;
	t->exact = o->exact;
	t->pool_seed = o->seed * 0x9e3779b97f4a7c15ull ^ 0x706f6f6cull;
	t->rope_base = o->rope_base;
	return exl_gguf_writer_add_tensor_fill(w, name, t->type, dims, ne, fill_tensor, t);
}

static int add(struct gguf_writer *w, struct tensor_spec *specs, int *n, const struct opts *o,
	       const char *name, enum fill_kind kind, int64_t cols, int64_t rows)
{
	return add3(w, specs, n, o, name, kind, cols, rows, 1);
}

/* An encoder's (bert, nomic-bert): embeddings with token types (bert:
 * and positions) and their LayerNorm; blocks of q/k/v (nomic-bert: one
 * attn_qkv), attention output, LayerNorm, FFN (bert: up and down with
 * biases, nomic-bert: gate, up and down) and LayerNorm; no output. */
static int add_encoder_tensors(struct gguf_writer *w, struct tensor_spec *specs, int *n,
			       const struct opts *o)
{
	bool nomic = !strcmp(o->family, "nomic-bert");
	char name[64];

	add(w, specs, n, o, "token_embd.weight", FILL_MATRIX, o->dim, o->vocab);
	add(w, specs, n, o, "token_types.weight", FILL_MATRIX, o->dim, 2);
	if (!nomic)
		add(w, specs, n, o, "position_embd.weight", FILL_MATRIX, o->dim, o->ctx);
	add(w, specs, n, o, "token_embd_norm.weight", FILL_NORM, o->dim, 1);
	add(w, specs, n, o, "token_embd_norm.bias", FILL_BIAS, o->dim, 1);
	for (int64_t l = 0; l < o->layers; l++) {
#define BLK(suffix) (snprintf(name, sizeof(name), "blk.%" PRId64 ".%s", l, suffix), name)
		if (nomic) {
			add(w, specs, n, o, BLK("attn_qkv.weight"), FILL_MATRIX, o->dim, 3 * o->dim);
		} else {
			add(w, specs, n, o, BLK("attn_q.weight"), FILL_MATRIX, o->dim, o->dim);
			add(w, specs, n, o, BLK("attn_q.bias"), FILL_BIAS, o->dim, 1);
			add(w, specs, n, o, BLK("attn_k.weight"), FILL_MATRIX, o->dim, o->dim);
			add(w, specs, n, o, BLK("attn_k.bias"), FILL_BIAS, o->dim, 1);
			add(w, specs, n, o, BLK("attn_v.weight"), FILL_MATRIX, o->dim, o->dim);
			add(w, specs, n, o, BLK("attn_v.bias"), FILL_BIAS, o->dim, 1);
		}
		add(w, specs, n, o, BLK("attn_output.weight"), FILL_MATRIX, o->dim, o->dim);
		if (!nomic)
			add(w, specs, n, o, BLK("attn_output.bias"), FILL_BIAS, o->dim, 1);
		add(w, specs, n, o, BLK("attn_output_norm.weight"), FILL_NORM, o->dim, 1);
		add(w, specs, n, o, BLK("attn_output_norm.bias"), FILL_BIAS, o->dim, 1);
		add(w, specs, n, o, BLK("ffn_up.weight"), FILL_MATRIX, o->dim, o->ff);
		if (nomic)
			add(w, specs, n, o, BLK("ffn_gate.weight"), FILL_MATRIX, o->dim, o->ff);
		else
			add(w, specs, n, o, BLK("ffn_up.bias"), FILL_BIAS, o->ff, 1);
		add(w, specs, n, o, BLK("ffn_down.weight"), FILL_MATRIX, o->ff, o->dim);
		if (!nomic)
			add(w, specs, n, o, BLK("ffn_down.bias"), FILL_BIAS, o->dim, 1);
		add(w, specs, n, o, BLK("layer_output_norm.weight"), FILL_NORM, o->dim, 1);
		add(w, specs, n, o, BLK("layer_output_norm.bias"), FILL_BIAS, o->dim, 1);
#undef BLK
	}
	return exl_gguf_writer_error(w) ? -1 : 0;
}

/* Tensors in the order llama.cpp's converters write them, per block. */
static int add_tensors(struct gguf_writer *w, struct tensor_spec *specs, int *n, const struct opts *o)
{
	int64_t head_dim = o->head_dim ? o->head_dim : o->dim / o->heads;
	int64_t q_dim = head_dim * o->heads, kv_dim = head_dim * o->kv_heads;
	int64_t rope_dim = o->rope_dim ? o->rope_dim : head_dim;
	char name[64];

	if (o->bert)
		return add_encoder_tensors(w, specs, n, o);
	add(w, specs, n, o, "token_embd.weight", FILL_MATRIX, o->dim, o->vocab);
	if (o->rope_freqs)
		add(w, specs, n, o, "rope_freqs.weight", FILL_ROPE_FREQS, rope_dim / 2, 1);
	if (o->longrope) {
		add(w, specs, n, o, "rope_factors_long.weight", FILL_ROPE_LONG, rope_dim / 2, 1);
		add(w, specs, n, o, "rope_factors_short.weight", FILL_ROPE_SHORT, rope_dim / 2, 1);
	}
	for (int64_t l = 0; l < o->layers; l++) {
#define BLK(suffix) (snprintf(name, sizeof(name), "blk.%" PRId64 ".%s", l, suffix), name)
		if (!o->olmo2)
			add(w, specs, n, o, BLK("attn_norm.weight"), FILL_NORM, o->dim, 1);
		if (o->phi3) {
			add(w, specs, n, o, BLK("attn_qkv.weight"), FILL_MATRIX, o->dim,
			    q_dim + 2 * kv_dim);
		} else {
			add(w, specs, n, o, BLK("attn_q.weight"), FILL_MATRIX, o->dim, q_dim);
			add(w, specs, n, o, BLK("attn_k.weight"), FILL_MATRIX, o->dim, kv_dim);
			add(w, specs, n, o, BLK("attn_v.weight"), FILL_MATRIX, o->dim, kv_dim);
		}
		if (o->qkv_bias) {
			add(w, specs, n, o, BLK("attn_q.bias"), FILL_BIAS, q_dim, 1);
			add(w, specs, n, o, BLK("attn_k.bias"), FILL_BIAS, kv_dim, 1);
			add(w, specs, n, o, BLK("attn_v.bias"), FILL_BIAS, kv_dim, 1);
		}
		if (o->olmo2) {
			add(w, specs, n, o, BLK("attn_q_norm.weight"), FILL_NORM, q_dim, 1);
			add(w, specs, n, o, BLK("attn_k_norm.weight"), FILL_NORM, kv_dim, 1);
		} else if (o->qk_norm) {
			add(w, specs, n, o, BLK("attn_q_norm.weight"), FILL_NORM, head_dim, 1);
			add(w, specs, n, o, BLK("attn_k_norm.weight"), FILL_NORM, head_dim, 1);
		}
		add(w, specs, n, o, BLK("attn_output.weight"), FILL_MATRIX, q_dim, o->dim);
		if (o->oss) {
			add(w, specs, n, o, BLK("attn_output.bias"), FILL_BIAS, o->dim, 1);
			add(w, specs, n, o, BLK("attn_sinks.weight"), FILL_SINK, o->heads, 1);
		}
		/* gpt-oss's FFN norm is named post_attention_norm */
		if (o->gemma || o->glm4 || o->olmo2 || o->oss)
			add(w, specs, n, o, BLK("post_attention_norm.weight"), FILL_NORM, o->dim, 1);
		if (!o->olmo2 && !o->oss)
			add(w, specs, n, o, BLK("ffn_norm.weight"), FILL_NORM, o->dim, 1);
		if (o->experts) {
			int64_t ff = o->expert_ff ? o->expert_ff : o->ff;

			add(w, specs, n, o, BLK("ffn_gate_inp.weight"), FILL_MATRIX, o->dim,
			    o->experts);
			add3(w, specs, n, o, BLK("ffn_gate_exps.weight"), FILL_MATRIX, o->dim, ff,
			     o->experts);
			add3(w, specs, n, o, BLK("ffn_up_exps.weight"), FILL_MATRIX, o->dim, ff,
			     o->experts);
			add3(w, specs, n, o, BLK("ffn_down_exps.weight"), FILL_MATRIX, ff, o->dim,
			     o->experts);
			if (o->oss) {
				add(w, specs, n, o, BLK("ffn_gate_inp.bias"), FILL_BIAS, o->experts, 1);
				/* wide: part of the gates and ups past the
				 * activation's clamp at 7 */
				add(w, specs, n, o, BLK("ffn_gate_exps.bias"), FILL_BIAS_WIDE, ff,
				    o->experts);
				add(w, specs, n, o, BLK("ffn_up_exps.bias"), FILL_BIAS_WIDE, ff,
				    o->experts);
				add(w, specs, n, o, BLK("ffn_down_exps.bias"), FILL_BIAS, o->dim,
				    o->experts);
			}
		} else if (o->phi3 || o->glm4) {
			add(w, specs, n, o, BLK("ffn_up.weight"), FILL_MATRIX, o->dim, 2 * o->ff);
			add(w, specs, n, o, BLK("ffn_down.weight"), FILL_MATRIX, o->ff, o->dim);
		} else {
			add(w, specs, n, o, BLK("ffn_gate.weight"), FILL_MATRIX, o->dim, o->ff);
			add(w, specs, n, o, BLK("ffn_up.weight"), FILL_MATRIX, o->dim, o->ff);
			add(w, specs, n, o, BLK("ffn_down.weight"), FILL_MATRIX, o->ff, o->dim);
		}
		if (o->gemma || o->glm4 || o->olmo2)
			add(w, specs, n, o, BLK("post_ffw_norm.weight"), FILL_NORM, o->dim, 1);
#undef BLK
	}
	add(w, specs, n, o, "output_norm.weight", FILL_NORM, o->dim, 1);
	if (!o->tied)
		add(w, specs, n, o, "output.weight", FILL_MATRIX, o->dim, o->vocab);
	return exl_gguf_writer_error(w) ? -1 : 0;
}

static void set_metadata(struct gguf_writer *w, struct opts *o)
{
	char key[128], name[96];
	int64_t head_dim = o->head_dim ? o->head_dim : o->dim / o->heads;

#define KEY(suffix) (snprintf(key, sizeof(key), "%s.%s", o->arch, suffix), key)
	meta_str(w, o, "general.architecture", o->arch);
	/* llama.cpp marks Phi-3's special tokens by the model's name: a name
	 * with "phi3" in it makes it look up <|endoftext|> and refuse a
	 * vocabulary without it */
	if (o->phi3 && !o->phi3_vocab)
		snprintf(name, sizeof(name), "exld-mkmodel random Phi 3 architecture");
	else
		snprintf(name, sizeof(name), "exld-mkmodel random %s", o->arch);
	meta_str(w, o, "general.name", name);
	meta_u32(w, o, "general.file_type", o->ftype);
	if (o->type != EXL_F32 && o->type != EXL_F16 && o->type != EXL_BF16)
		meta_u32(w, o, "general.quantization_version", 2);
	meta_u32(w, o, "general.alignment", 32);
	meta_u32(w, o, KEY("context_length"), (uint32_t)o->ctx);
	meta_u32(w, o, KEY("embedding_length"), (uint32_t)o->dim);
	meta_u32(w, o, KEY("block_count"), (uint32_t)o->layers);
	meta_u32(w, o, KEY("feed_forward_length"), (uint32_t)o->ff);
	meta_u32(w, o, KEY("attention.head_count"), (uint32_t)o->heads);
	meta_u32(w, o, KEY("attention.head_count_kv"), (uint32_t)o->kv_heads);
	if (o->head_dim) {
		meta_u32(w, o, KEY("attention.key_length"), (uint32_t)o->head_dim);
		meta_u32(w, o, KEY("attention.value_length"), (uint32_t)o->head_dim);
	}
	if (o->bert) {
		/* LayerNorms; attention both ways; pooled by the mean */
		meta_f32(w, o, KEY("attention.layer_norm_epsilon"), (float)o->eps);
		meta_bool(w, o, KEY("attention.causal"), false);
		meta_u32(w, o, KEY("pooling_type"), 1);
		if (!o->type_count)
			meta_u32(w, o, "tokenizer.ggml.token_type_count", 2);
	} else {
		meta_f32(w, o, KEY("attention.layer_norm_rms_epsilon"), (float)o->eps);
	}
	meta_f32(w, o, KEY("rope.freq_base"), (float)o->rope_base);
	meta_u32(w, o, KEY("rope.dimension_count"), (uint32_t)(o->rope_dim ? o->rope_dim : head_dim));
	if (o->rope_scaling || o->rope_scale)
		meta_str(w, o, KEY("rope.scaling.type"), o->rope_scaling ? o->rope_scaling : "linear");
	if (o->rope_scale)
		meta_f32(w, o, KEY("rope.scaling.factor"), (float)o->rope_scale);
	if (o->longrope) {
		/* as phi3's converter: sqrt(1 + ln(scale) / ln(original)) */
		double scale = (double)o->ctx / (double)o->longrope;

		meta_u32(w, o, KEY("rope.scaling.original_context_length"), (uint32_t)o->longrope);
		meta_f32(w, o, KEY("rope.scaling.attn_factor"), scale > 1.0 ?
			 (float)sqrt(1.0 + log(scale) / log((double)o->longrope)) : 1.0f);
	}
	if (o->experts) {
		meta_u32(w, o, KEY("expert_count"), (uint32_t)o->experts);
		meta_u32(w, o, KEY("expert_used_count"), (uint32_t)o->experts_used);
		if (o->expert_ff)
			meta_u32(w, o, KEY("expert_feed_forward_length"), (uint32_t)o->expert_ff);
	}
	if (!strcmp(o->arch, "qwen2vl") || !strcmp(o->arch, "qwen3vl") ||
	    !strcmp(o->arch, "qwen3vlmoe")) {
		/* M-RoPE's sections, pairs of the head in Qwen3-VL's proportions
		 * (24, 20, 20 of 64) */
		int64_t pairs = (o->rope_dim ? o->rope_dim : head_dim) / 2;
		int32_t sec[4] = { (int32_t)(pairs - 2 * (pairs * 5 / 16)), (int32_t)(pairs * 5 / 16),
				   (int32_t)(pairs * 5 / 16), 0 };

		if (!put_override(w, o, KEY("rope.dimension_sections")))
			exl_gguf_writer_set_arr(w, key, GGUF_VT_INT32, sec, 4);
	}
	if (!strcmp(o->family, "granite")) {
		/* Granite 3.3 2B's multipliers (--kv replaces them) */
		meta_f32(w, o, KEY("logit_scale"), 8.0f);
		meta_f32(w, o, KEY("residual_scale"), 0.22f);
		meta_f32(w, o, KEY("embedding_scale"), 12.0f);
		meta_f32(w, o, KEY("attention.scale"), 0.015625f);
	}
	if (!strcmp(o->arch, "gemma2")) {
		meta_f32(w, o, KEY("attn_logit_softcapping"), 50.0f);
		meta_f32(w, o, KEY("final_logit_softcapping"), 30.0f);
		meta_u32(w, o, KEY("attention.sliding_window"), (uint32_t)(o->swa ? o->swa : 4096));
	} else if (o->swa) {
		meta_u32(w, o, KEY("attention.sliding_window"), (uint32_t)o->swa);
	}
	if (o->swa_pattern && strlen(o->swa_pattern) > 1) {
		bool flags[4096];

		for (int64_t l = 0; l < o->layers; l++)
			flags[l] = o->swa_pattern[l] == '1';
		if (!put_override(w, o, KEY("attention.sliding_window_pattern")))
			exl_gguf_writer_set_arr(w, key, GGUF_VT_BOOL, flags, (uint64_t)o->layers);
	} else if (o->swa_pattern) {
		meta_u32(w, o, KEY("attention.sliding_window_pattern"),
			 (uint32_t)strtoul(o->swa_pattern, NULL, 10));
	}
	meta_u32(w, o, KEY("vocab_size"), (uint32_t)o->vocab);
#undef KEY
}

/* The whole of path (NUL-terminated, for tokenizer.chat_template); NULL
 * after a message. */
static char *read_text(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *s = NULL;
	long n;

	if (!f) {
		fprintf(stderr, "exld-mkmodel: cannot open %s: %s\n", path, strerror(errno));
		return NULL;
	}
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		fprintf(stderr, "exld-mkmodel: cannot read %s: %s\n", path, strerror(errno));
		goto out;
	}
	if (n > (16l << 20)) {
		fprintf(stderr, "exld-mkmodel: %s is over 16 MiB\n", path);
		goto out;
	}
	s = malloc((size_t)n + 1);
	if (!s) {
		fprintf(stderr, "exld-mkmodel: out of memory\n");
		goto out;
	}
	if (fread(s, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "exld-mkmodel: cannot read %s\n", path);
		free(s);
		s = NULL;
		goto out;
	}
	s[n] = '\0';
out:
	fclose(f);
	return s;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct gguf_writer *w;
	struct tensor_spec *specs = NULL;
	int n_specs = 0, rc = 1;
	int64_t n_vocab = 0;
	char err[512];
	char *tmpl = NULL;
	struct timespec t0, t1;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--lora-for"))
			return mkmodel_lora_main(argc, argv);
	rc = parse_args(argc, argv, &o);
	if (rc) {
		usage(rc > 0 ? stdout : stderr);
		return rc > 0 ? 0 : 2;
	}
	rc = 1;
	if (o.chat_template) {
		struct gguf_value v = { .type = GGUF_VT_STRING };

		tmpl = read_text(o.chat_template);
		if (!tmpl)
			return 1;
		v.str = (struct gguf_str){ strlen(tmpl), tmpl };
		if (add_override(&o, "tokenizer.chat_template", v)) {
			free(tmpl);
			return 2;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	w = exl_gguf_writer_new();
	if (!w) {
		fprintf(stderr, "exld-mkmodel: out of memory\n");
		free(tmpl);
		return 1;
	}
	if (o.vocab_from) {
		if (copy_vocab(w, &o, o.vocab_from, &n_vocab))
			goto out;
		if (o.vocab && o.vocab != n_vocab) {
			fprintf(stderr, "exld-mkmodel: --vocab %" PRId64 " but %s has %" PRId64 " tokens\n",
				o.vocab, o.vocab_from, n_vocab);
			goto out;
		}
		o.vocab = n_vocab;
	} else {
		if (!o.vocab)
			o.vocab = 512;
		if (o.vocab < 260) {
			fprintf(stderr, "exld-mkmodel: the synthetic vocabulary needs --vocab >= 260"
				" (3 special and 256 byte tokens come first)\n");
			goto out;
		}
		if (synthetic_vocab(w, &o, o.vocab))
			goto out;
	}
	set_metadata(w, &o);
	put_new_overrides(w, &o);

	specs = calloc((size_t)(o.layers * 20 + 8), sizeof(*specs));
	if (!specs) {
		fprintf(stderr, "exld-mkmodel: out of memory\n");
		goto out;
	}
	if (add_tensors(w, specs, &n_specs, &o) ||
	    exl_gguf_writer_write_file(w, o.out, err, sizeof(err))) {
		fprintf(stderr, "exld-mkmodel: %s\n", exl_gguf_writer_error(w) ? exl_gguf_writer_error(w) : err);
		goto out;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);

	uint64_t params = 0;

	for (int i = 0; i < n_specs; i++)
		params += (uint64_t)(specs[i].cols * specs[i].rows);
	fprintf(stderr, "exld-mkmodel: wrote %s: %s %s, %d tensors, %" PRIu64 " parameters, in %.1f s\n",
		o.out, o.arch, exl_dtype_info(o.type)->name, n_specs, params,
		(double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	rc = 0;
out:
	exl_gguf_writer_free(w);
	free(specs);
	free(tmpl);
	free_pools();
	return rc;
}
