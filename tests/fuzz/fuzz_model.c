/* Fuzz target for loading a model and running it: a GGUF whose every byte
 * parses (the reader's own fuzzing, fuzz_gguf) can still say anything in its
 * metadata and tensors.  Each input is an edit script applied to one of a
 * few small random-weight models that exld-mkmodel writes at start-up
 * (llama, qwen2, qwen3moe, gemma3, phi3, mistral3 with YaRN and its
 * temperature, olmo2 with windows, granite, glm4, gpt-oss, the encoders
 * bert and nomic-bert (a pass of hidden states), over weight types from
 * Q8_0 to Q4_K), or to a LoRA adapter for the first two: keys set to other types
 * and boundary values, arrays resized, keys and tensors dropped, tensors
 * reshaped, retyped or their bytes overwritten, vocabulary entries
 * replaced.  The result is written out and loaded on the CPU backend (an
 * adapter for its unedited model, loaded once); a model that loads
 * tokenizes a text, sizes its KV pool as the daemon does, prefills a prompt
 * and decodes a few tokens, under the adapter when there is one, and
 * follows a JSON schema over its vocabulary (the tree of its token bytes,
 * masks, accepted tokens) as constrained decoding does.
 * It checks that
 *   - nothing crashes, reads out of bounds or hangs (a bad file is refused
 *     at load, or computes garbage within bounds);
 *   - every refusal and every failed step carries a message.
 * The bases come from exld-mkmodel (fuzz_mkmodel.h).  See docs/fuzzing.md.
 *
 * Script: byte 0 picks the base; then ops, each an opcode byte and its
 * arguments, until the input ends (a short op is dropped). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/grammar/filter.h"
#include "daemon/core/grammar/grammar_filter.h"
#include "daemon/core/gguf/gguf_write.h"
#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/lora.h"
#include "daemon/core/model/model.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "kernels/backend.h"
#include "kernels/formats/dtype.h"
#include "tests/fuzz/fuzz_mkmodel.h"
#include "tests/fuzz/fuzz_target.h"

/* ---- the bases ---- */

static const char *const base_args[][24] = {
	{ "--arch", "llama", "--dim", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2",
	  "--vocab", "300", "--ctx", "256", "--type", "q8_0", "--tied", NULL },
	{ "--arch", "qwen2", "--dim", "64", "--layers", "1", "--heads", "4", "--kv-heads", "1",
	  "--vocab", "300", "--ctx", "256", "--type", "q4_0", NULL },
	{ "--arch", "qwen3moe", "--dim", "64", "--layers", "1", "--heads", "2", "--experts", "4",
	  "--experts-used", "2", "--ff", "128", "--vocab", "300", "--ctx", "256", "--type", "f16",
	  NULL },
	{ "--arch", "gemma3", "--dim", "256", "--layers", "2", "--heads", "2", "--kv-heads", "1",
	  "--swa", "4", "--swa-pattern", "2", "--ff", "512", "--vocab", "300", "--ctx", "256", "--type",
	  "q4_k",
	  NULL },
	{ "--arch", "phi3", "--dim", "64", "--layers", "1", "--heads", "4", "--vocab", "300",
	  "--ctx", "256", "--type", "q5_0", NULL },
	/* YaRN with mistral3's betas, log multiplier and temperature */
	{ "--arch", "mistral3", "--dim", "64", "--layers", "1", "--heads", "4", "--vocab", "300",
	  "--ctx", "256", "--type", "q8_0", "--rope-scaling", "yarn", "--rope-scale", "4", "--kv",
	  "mistral3.attention.temperature_scale=f32:0.1", NULL },
	/* no pre-norms, whole q/k norms, OLMo 3's windows */
	{ "--arch", "olmo2", "--dim", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2",
	  "--swa", "4", "--vocab", "300", "--ctx", "256", "--type", "q4_0", NULL },
	/* granite's multipliers; glm4's fused gate/up and half rope */
	{ "--arch", "granite", "--dim", "64", "--layers", "1", "--heads", "4", "--vocab", "300",
	  "--ctx", "256", "--type", "iq4_nl", NULL },
	{ "--arch", "glm4", "--dim", "64", "--layers", "1", "--heads", "4", "--vocab", "300",
	  "--ctx", "256", "--type", "f16", NULL },
	/* the encoders: LayerNorms, attention both ways, learned positions */
	{ "--arch", "bert", "--dim", "64", "--layers", "2", "--heads", "4", "--ff", "128",
	  "--vocab", "300", "--ctx", "64", "--type", "q8_0", NULL },
	{ "--arch", "nomic-bert", "--dim", "64", "--layers", "1", "--heads", "4", "--ff", "128",
	  "--vocab", "300", "--ctx", "256", "--type", "f16", NULL },
	/* gpt-oss: sinks, biases, a window on layer 0, its experts */
	{ "--arch", "gpt-oss", "--dim", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2",
	  "--swa", "4", "--experts", "4", "--ff", "64", "--vocab", "300", "--ctx", "256", "--type",
	  "q8_0", NULL },
};
#define N_BASES (sizeof(base_args) / sizeof(base_args[0]))

/* Adapters: for which base, and how (every target, or some at rank 1). */
static const int lora_base[] = { 0, 1 };
static const char *const lora_args[][8] = {
	{ "--rank", "4", "--alpha", "8", NULL },
	{ "--rank", "1", "--alpha", "0", "--lora-targets", "attn_v,ffn_down", NULL },
};
#define N_LORAS (sizeof(lora_base) / sizeof(lora_base[0]))

static struct gguf_file *bases[N_BASES + N_LORAS];
static struct exl_model *hosts[N_LORAS]; /* each adapter's model */
static char workdir[64];
static struct exl_backend *be;

static void die(const char *what)
{
	fprintf(stderr, "fuzz_model: %s\n", what);
	abort();
}

static void make_bases(void)
{
	static const char *const threads[] = { "--threads", "1", NULL };
	char path[N_BASES][128], lpath[128], err[512];

	snprintf(workdir, sizeof(workdir), "/tmp/exld-fuzz-model-XXXXXX");
	if (!mkdtemp(workdir))
		die("mkdtemp failed");
	be = exl_backend_cpu_create(1, err, sizeof(err));
	if (!be) {
		fprintf(stderr, "fuzz_model: cpu backend: %s\n", err);
		abort();
	}
	for (size_t i = 0; i < N_BASES; i++) {
		snprintf(path[i], sizeof(path[i]), "%s/base%zu.gguf", workdir, i);
		fuzz_mkmodel("fuzz_model", base_args[i], threads, path[i]);
	}
	for (size_t i = 0; i < N_LORAS; i++) {
		const char *lora_for[] = { "--lora-for", path[lora_base[i]], NULL };

		snprintf(lpath, sizeof(lpath), "%s/lora%zu.gguf", workdir, i);
		fuzz_mkmodel("fuzz_model", lora_for, lora_args[i], lpath);
		hosts[i] = exl_model_load(path[lora_base[i]], be, err, sizeof(err));
		if (!hosts[i]) {
			fprintf(stderr, "fuzz_model: %s: %s\n", path[lora_base[i]], err);
			abort();
		}
		bases[N_BASES + i] = exl_gguf_open(lpath, err, sizeof(err));
		if (!bases[N_BASES + i]) {
			fprintf(stderr, "fuzz_model: %s: %s\n", lpath, err);
			abort();
		}
		unlink(lpath);
	}
	/* The files stay mapped (and the hosts' weights with them); their
	 * names go now, so that nothing is left behind. */
	for (size_t i = 0; i < N_BASES; i++) {
		bases[i] = exl_gguf_open(path[i], err, sizeof(err));
		if (!bases[i]) {
			fprintf(stderr, "fuzz_model: %s: %s\n", path[i], err);
			abort();
		}
		unlink(path[i]);
	}
}

static void cleanup(void)
{
	if (workdir[0])
		rmdir(workdir);
}

static void init(void)
{
	static int done;

	if (done)
		return;
	done = 1;
	make_bases();
	atexit(cleanup);
}

/* ---- reading the script ---- */

struct script {
	const uint8_t *p;
	size_t left;
};

static bool take(struct script *s, void *out, size_t n)
{
	if (s->left < n)
		return false;
	memcpy(out, s->p, n);
	s->p += n;
	s->left -= n;
	return true;
}

static const int64_t int_values[] = {
	0, 1, 2, 3, 4, 7, 8, 16, 31, 32, 33, 63, 64, 65, 128, 255, 256, 257, 299, 300, 301,
	1023, 1024, 4096, 65535, 65536, 1 << 20, INT32_MAX, (int64_t)INT32_MAX + 1, UINT32_MAX,
	INT64_MAX, -1, -2, INT32_MIN, INT64_MIN,
};
#define N_INTS (sizeof(int_values) / sizeof(int_values[0]))

static double float_value(uint8_t k)
{
	static const double v[] = { 0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-6, 1e-30, 1e30, 1e-3, 1e3,
				    10000.0, 1e6, 3.4e38, 1e-45, 30.0, 50.0 };

	switch (k % 20) {
	case 17: return NAN;
	case 18: return INFINITY;
	case 19: return -INFINITY;
	default: return v[k % 20];
	}
}

static const char *const strings[] = {
	"", "none", "linear", "yarn", "longrope", "llama", "gpt2", "qwen2", "qwen3", "qwen3moe",
	"phi3", "gemma2", "gemma3", "llama3", "default", "<s>", "\xe2\x96\x81", "\xff\xfe",
	"a b", "{{ messages }}", "mistral3", "granite", "olmo2", "glm4", "smollm3", "qwen3vl", "gpt-oss",
	"gemma",
};
#define N_STRINGS (sizeof(strings) / sizeof(strings[0]))

/* Keys worth setting beyond the base's own; %A is the architecture. */
static const char *const extra_keys[] = {
	"%A.context_length", "%A.embedding_length", "%A.block_count", "%A.feed_forward_length",
	"%A.attention.head_count", "%A.attention.head_count_kv", "%A.attention.key_length",
	"%A.attention.value_length", "%A.rope.dimension_count", "%A.rope.freq_base",
	"%A.attention.layer_norm_rms_epsilon", "%A.expert_count", "%A.expert_used_count",
	"%A.expert_feed_forward_length", "%A.expert_weights_scale", "%A.expert_shared_count",
	"%A.rope.scaling.type", "%A.rope.scaling.factor", "%A.rope.scaling.attn_factor",
	"%A.rope.scaling.original_context_length", "%A.rope.scale_linear",
	"%A.attention.sliding_window", "%A.attention.sliding_window_pattern",
	"%A.final_logit_softcapping", "%A.attn_logit_softcapping", "%A.rope.freq_base_swa",
	"%A.pooling_type", "%A.rope.scaling.yarn_beta_fast", "%A.rope.scaling.yarn_beta_slow",
	"%A.rope.scaling.yarn_log_multiplier", "%A.attention.temperature_scale",
	"%A.logit_scale", "%A.residual_scale", "%A.embedding_scale", "%A.attention.scale",
	"%A.rope.dimension_sections", "%A.nextn_predict_layers", "%A.rope.scaling.finetuned",
	"split.count", "split.no",
	"general.architecture", "general.alignment", "tokenizer.ggml.model",
	"tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
	"tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
	"tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
	"tokenizer.ggml.padding_token_id", "tokenizer.ggml.eot_token_id",
	"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix", "tokenizer.chat_template",
	"general.type", "adapter.type", "adapter.lora.alpha",
};
#define N_EXTRA (sizeof(extra_keys) / sizeof(extra_keys[0]))

/* ---- the edited model ---- */

#define MAX_KEYS 128
#define MAX_TENSORS 64
#define MAX_BLOB (8u << 20)

struct edited_kv {
	char key[96];
	bool drop;
	bool own;              /* val (and what it points at) built here */
	struct gguf_value val;
	void *mem[2];          /* what an own value allocated */
};

struct edited_tensor {
	char name[96];
	bool drop;
	uint32_t type, n_dims;
	uint64_t ne[GGUF_MAX_DIMS];
	const void *data;
	void *own;             /* a changed copy of the data */
};

struct model_edit {
	const struct gguf_file *base;
	char arch[32];
	size_t n_kv, n_t;
	struct edited_kv kv[MAX_KEYS];
	struct edited_tensor t[MAX_TENSORS];
};

static size_t cstr_copy(char *dst, size_t cap, struct gguf_str s)
{
	size_t n = s.len < cap - 1 ? s.len : cap - 1;

	memcpy(dst, s.ptr, n);
	dst[n] = 0;
	return n;
}

static void edit_init(struct model_edit *e, const struct gguf_file *f)
{
	memset(e, 0, sizeof(*e));
	e->base = f;
	for (uint64_t i = 0; i < f->n_kv && e->n_kv < MAX_KEYS; i++) {
		struct edited_kv *k = &e->kv[e->n_kv++];

		cstr_copy(k->key, sizeof(k->key), f->kv[i].key);
		k->val = f->kv[i].val;
		if (!strcmp(k->key, "general.architecture") && f->kv[i].val.type == GGUF_VT_STRING)
			cstr_copy(e->arch, sizeof(e->arch), f->kv[i].val.str);
	}
	for (uint64_t i = 0; i < f->n_tensors && e->n_t < MAX_TENSORS; i++) {
		const struct gguf_tensor *g = &f->tensors[i];
		struct edited_tensor *t = &e->t[e->n_t++];

		cstr_copy(t->name, sizeof(t->name), g->name);
		t->type = g->type;
		t->n_dims = g->n_dims;
		memcpy(t->ne, g->ne, sizeof(t->ne));
		t->data = g->data;
	}
}

static void kv_release(struct edited_kv *k)
{
	if (k->own) {
		free(k->mem[0]);
		free(k->mem[1]);
	}
	k->own = false;
	k->mem[0] = k->mem[1] = NULL;
}

static void edit_free(struct model_edit *e)
{
	for (size_t i = 0; i < e->n_kv; i++)
		kv_release(&e->kv[i]);
	for (size_t i = 0; i < e->n_t; i++)
		free(e->t[i].own);
}

/* The entry for key index i: one of the base's, or an extra key (added
 * when the file lacks it). */
static struct edited_kv *kv_pick(struct model_edit *e, uint8_t i)
{
	char key[96];

	if (i < 128 && e->n_kv)
		return &e->kv[i % e->n_kv];
	const char *pat = extra_keys[i % N_EXTRA];
	if (!strncmp(pat, "%A", 2))
		snprintf(key, sizeof(key), "%s%s", e->arch, pat + 2);
	else
		snprintf(key, sizeof(key), "%s", pat);
	for (size_t k = 0; k < e->n_kv; k++)
		if (!strcmp(e->kv[k].key, key))
			return &e->kv[k];
	if (e->n_kv == MAX_KEYS)
		return NULL;
	struct edited_kv *k = &e->kv[e->n_kv++];
	memset(k, 0, sizeof(*k));
	snprintf(k->key, sizeof(k->key), "%s", key);
	k->drop = true; /* until a value is set */
	return k;
}

static const enum gguf_vtype scalar_types[] = {
	GGUF_VT_UINT8, GGUF_VT_INT8, GGUF_VT_UINT16, GGUF_VT_INT16, GGUF_VT_UINT32,
	GGUF_VT_INT32, GGUF_VT_FLOAT32, GGUF_VT_BOOL, GGUF_VT_UINT64, GGUF_VT_INT64,
	GGUF_VT_FLOAT64,
};
#define N_SCALAR (sizeof(scalar_types) / sizeof(scalar_types[0]))

static size_t vt_size(enum gguf_vtype t)
{
	switch (t) {
	case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
	case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
	case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
	default: return 8;
	}
}

/* Element v of a scalar array of type t, from table index x. */
static void put_elem(uint8_t *dst, enum gguf_vtype t, uint8_t x)
{
	int64_t iv = int_values[x % N_INTS];
	uint64_t u = (uint64_t)iv;

	if (t == GGUF_VT_FLOAT32) {
		float f = (float)float_value(x);
		memcpy(dst, &f, 4);
	} else if (t == GGUF_VT_FLOAT64) {
		double d = float_value(x);
		memcpy(dst, &d, 8);
	} else if (t == GGUF_VT_BOOL) {
		dst[0] = x & 1;
	} else {
		memcpy(dst, &u, vt_size(t)); /* little-endian host: the low bytes */
	}
}

/* op 0: a scalar of any type */
static void op_set_scalar(struct model_edit *e, struct script *s)
{
	uint8_t a[3];

	if (!take(s, a, 3))
		return;
	struct edited_kv *k = kv_pick(e, a[0]);
	if (!k)
		return;
	enum gguf_vtype t = scalar_types[a[1] % N_SCALAR];
	kv_release(k);
	k->drop = false;
	memset(&k->val, 0, sizeof(k->val));
	k->val.type = t;
	if (t == GGUF_VT_FLOAT32 || t == GGUF_VT_FLOAT64)
		k->val.f64 = float_value(a[2]);
	else if (t == GGUF_VT_BOOL)
		k->val.u64 = a[2] & 1;
	else if (t == GGUF_VT_INT8 || t == GGUF_VT_INT16 || t == GGUF_VT_INT32 || t == GGUF_VT_INT64)
		k->val.i64 = int_values[a[2] % N_INTS];
	else
		k->val.u64 = (uint64_t)int_values[a[2] % N_INTS];
	/* the writer stores what fits the type */
	if (t == GGUF_VT_UINT8) k->val.u64 &= 0xff;
	if (t == GGUF_VT_UINT16) k->val.u64 &= 0xffff;
	if (t == GGUF_VT_UINT32) k->val.u64 &= 0xffffffffu;
	if (t == GGUF_VT_INT8) k->val.i64 = (int8_t)k->val.i64;
	if (t == GGUF_VT_INT16) k->val.i64 = (int16_t)k->val.i64;
	if (t == GGUF_VT_INT32) k->val.i64 = (int32_t)k->val.i64;
}

/* op 1: a string, from the table or the script's bytes */
static void op_set_string(struct model_edit *e, struct script *s)
{
	uint8_t a[2];

	if (!take(s, a, 2))
		return;
	struct edited_kv *k = kv_pick(e, a[0]);
	if (!k)
		return;
	const char *src = strings[a[1] % N_STRINGS];
	size_t len = strlen(src);
	if (a[1] >= 0xc0) { /* the next bytes, up to 63 of them */
		len = (size_t)(a[1] & 0x3f) < s->left ? (size_t)(a[1] & 0x3f) : s->left;
		src = (const char *)s->p;
		s->p += len;
		s->left -= len;
	}
	char *mem = malloc(len + 1);
	if (!mem)
		return;
	memcpy(mem, src, len);
	mem[len] = 0;
	kv_release(k);
	k->drop = false;
	k->own = true;
	k->mem[0] = mem;
	memset(&k->val, 0, sizeof(k->val));
	k->val.type = GGUF_VT_STRING;
	k->val.str.ptr = mem;
	k->val.str.len = len;
}

static const uint64_t counts[] = { 0, 1, 2, 3, 4, 5, 8, 64, 255, 256, 299, 300, 301, 1000 };
#define N_COUNTS (sizeof(counts) / sizeof(counts[0]))

/* op 2: a scalar array: elem type, count, fill */
static void op_set_array(struct model_edit *e, struct script *s)
{
	uint8_t a[4];

	if (!take(s, a, 4))
		return;
	struct edited_kv *k = kv_pick(e, a[0]);
	if (!k)
		return;
	enum gguf_vtype t = scalar_types[a[1] % N_SCALAR];
	uint64_t n = counts[a[2] % N_COUNTS];
	size_t es = vt_size(t);
	uint8_t *mem = malloc(n * es + 1);
	if (!mem)
		return;
	for (uint64_t i = 0; i < n; i++)
		put_elem(mem + i * es, t, (uint8_t)(a[3] + (a[3] & 0x80 ? i : 0)));
	kv_release(k);
	k->drop = false;
	k->own = true;
	k->mem[0] = mem;
	memset(&k->val, 0, sizeof(k->val));
	k->val.type = GGUF_VT_ARRAY;
	k->val.arr.elem_type = t;
	k->val.arr.count = n;
	k->val.arr.data = mem;
}

/* op 3: an array of the base's resized (truncated, or its last element
 * repeated), or one string entry of a string array replaced */
static void op_resize_array(struct model_edit *e, struct script *s)
{
	uint8_t a[3];

	if (!take(s, a, 3))
		return;
	struct edited_kv *k = kv_pick(e, a[0]);
	if (!k || k->drop || k->val.type != GGUF_VT_ARRAY || k->own)
		return;
	const struct gguf_array *src = &k->val.arr;
	if (src->elem_type == GGUF_VT_ARRAY)
		return;
	uint64_t n = src->count;
	if (a[1] & 0x80)
		n = counts[a[1] % N_COUNTS];
	else if (a[1] & 1)
		n = n ? n - 1 : 0;
	else
		n = n + 1;
	if (!src->count && n)
		return;
	struct gguf_value v = k->val;
	v.arr.count = n;
	if (src->elem_type == GGUF_VT_STRING) {
		struct gguf_str *strs = malloc((n + 1) * sizeof(*strs));
		if (!strs)
			return;
		for (uint64_t i = 0; i < n; i++)
			strs[i] = src->strs[i < src->count ? i : src->count - 1];
		/* a[2]: which entry to replace with a table string (0xff: none) */
		if (n && a[2] != 0xff) {
			const char *str = strings[a[2] % N_STRINGS];
			strs[a[2] % n] = (struct gguf_str){ .ptr = str, .len = strlen(str) };
		}
		v.arr.strs = strs;
		v.arr.data = NULL;
		k->mem[0] = strs;
	} else {
		size_t es = vt_size(src->elem_type);
		uint8_t *mem = malloc(n * es + 1);
		if (!mem)
			return;
		for (uint64_t i = 0; i < n; i++)
			memcpy(mem + i * es, (const uint8_t *)src->data + (i < src->count ? i : src->count - 1) * es,
			       es);
		v.arr.data = mem;
		k->mem[0] = mem;
	}
	k->val = v;
	k->own = true;
}

/* op 4: drop a key */
static void op_drop_key(struct model_edit *e, struct script *s)
{
	uint8_t a;

	if (!take(s, &a, 1))
		return;
	struct edited_kv *k = kv_pick(e, a);
	if (k) {
		kv_release(k);
		k->drop = true;
	}
}

/* An op's n argument bytes into a, and the tensor a[0] picks; NULL when
 * the script is short or the tensor dropped. */
static struct edited_tensor *t_args(struct model_edit *e, struct script *s, uint8_t *a, size_t n)
{
	if (!take(s, a, n) || !e->n_t)
		return NULL;
	struct edited_tensor *t = &e->t[a[0] % e->n_t];
	return t->drop ? NULL : t;
}

static uint64_t t_bytes(const struct edited_tensor *t)
{
	uint64_t rows = 1;

	for (uint32_t d = 1; d < t->n_dims; d++) {
		if (t->ne[d] && rows > UINT64_MAX / t->ne[d])
			return 0;
		rows *= t->ne[d];
	}
	size_t rb = exl_dtype_row_bytes(t->type, t->ne[0]);
	if (!rb || (rows && rb > MAX_BLOB / rows))
		return 0;
	return rb * rows;
}

/* The tensor's bytes for its new shape or type: the old bytes as far as
 * they go, then zeros; false when too large (the edit is undone). */
static bool t_redata(struct edited_tensor *t, const struct edited_tensor *old, uint64_t old_bytes)
{
	uint64_t n = t_bytes(t);

	if (!n)
		return false;
	uint8_t *mem = calloc(1, n);
	if (!mem)
		return false;
	memcpy(mem, old->data, n < old_bytes ? n : old_bytes);
	free(t->own);
	t->own = mem;
	t->data = mem;
	return true;
}

static const uint64_t dims[] = { 0, 1, 2, 3, 16, 31, 32, 33, 63, 64, 65, 128, 255, 256, 299,
				 300, 301, 512 };
#define N_DIMS (sizeof(dims) / sizeof(dims[0]))

/* op 5: a tensor's shape: one dim to another value, or a dim added or
 * removed */
static void op_reshape(struct model_edit *e, struct script *s)
{
	uint8_t a[3];
	struct edited_tensor *t = t_args(e, s, a, sizeof(a));

	if (!t)
		return;
	struct edited_tensor old = *t;
	uint64_t old_bytes = t_bytes(&old);
	if (a[1] & 0x80) {
		uint32_t nd = 1 + (a[1] & 3);
		for (uint32_t d = t->n_dims; d < nd; d++)
			t->ne[d] = 1;
		for (uint32_t d = nd; d < GGUF_MAX_DIMS; d++)
			t->ne[d] = 1;
		t->n_dims = nd;
	} else {
		t->ne[a[1] % t->n_dims] = dims[a[2] % N_DIMS];
	}
	if (!old_bytes || !t_redata(t, &old, old_bytes))
		*t = old; /* too large: undone (t_redata changed nothing) */
}

/* op 6: a tensor's type */
static void op_retype(struct model_edit *e, struct script *s)
{
	uint8_t a[2];
	struct edited_tensor *t = t_args(e, s, a, sizeof(a));

	if (!t)
		return;
	struct edited_tensor old = *t;
	uint64_t old_bytes = t_bytes(&old);
	t->type = a[1] % (EXL_DTYPE_COUNT + 4);
	if (!old_bytes || !t_redata(t, &old, old_bytes))
		*t = old;
}

/* op 7: 8 bytes of a tensor's data overwritten (NaN scales, huge levels),
 * or the tensor dropped */
static void op_poke(struct model_edit *e, struct script *s)
{
	uint8_t a[11];
	struct edited_tensor *t = t_args(e, s, a, sizeof(a));

	if (!t)
		return;
	if (a[1] == 0xff) {
		t->drop = true;
		return;
	}
	uint64_t n = t_bytes(t);
	if (!n)
		return;
	if (!t->own) {
		uint8_t *mem = malloc(n);
		if (!mem)
			return;
		memcpy(mem, t->data, n);
		t->own = mem;
		t->data = mem;
	}
	uint64_t at = ((uint64_t)a[1] << 8 | a[2]) * 7 % n;
	size_t len = n - at < 8 ? (size_t)(n - at) : 8;
	memcpy((uint8_t *)t->own + at, a + 3, len);
}

static void apply(struct model_edit *e, struct script *s)
{
	uint8_t op;

	while (take(s, &op, 1)) {
		switch (op % 8) {
		case 0: op_set_scalar(e, s); break;
		case 1: op_set_string(e, s); break;
		case 2: op_set_array(e, s); break;
		case 3: op_resize_array(e, s); break;
		case 4: op_drop_key(e, s); break;
		case 5: op_reshape(e, s); break;
		case 6: op_retype(e, s); break;
		default: op_poke(e, s); break;
		}
	}
}

/* Writes the edited model to path; false when the writer refuses it (a
 * type it cannot size, say): nothing to load then. */
static bool write_model(struct model_edit *e, const char *path)
{
	struct gguf_writer *w = exl_gguf_writer_new();
	char err[512];
	bool ok;

	if (!w)
		die("out of memory");
	for (size_t i = 0; i < e->n_kv; i++)
		if (!e->kv[i].drop)
			exl_gguf_writer_set(w, e->kv[i].key, &e->kv[i].val);
	for (size_t i = 0; i < e->n_t; i++) {
		const struct edited_tensor *t = &e->t[i];

		if (!t->drop)
			exl_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
	}
	ok = exl_gguf_writer_write_file(w, path, err, sizeof(err)) == 0;
	exl_gguf_writer_free(w);
	return ok;
}

/* ---- running what loaded ---- */

static void check_msg(const char *what, const char *err)
{
	if (!err[0]) {
		fprintf(stderr, "fuzz_model: %s failed without a message\n", what);
		abort();
	}
}

static int argmax(const float *x, int n)
{
	int best = 0;

	for (int i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

/* A JSON schema's filter over the model's vocabulary, as a constrained job
 * makes it: a few steps of the masks and the first allowed token. */
static void run_constraint(const struct exl_tokenizer *tok, int n_vocab)
{
	static const char schema[] = "{\"type\":\"object\",\"properties\":{\"a\":"
				     "{\"type\":\"string\",\"maxLength\":4}},\"required\":[\"a\"]}";
	struct exl_grammar_filter_opts o = { .strip_leading_space = true };
	uint32_t *mask = calloc(((size_t)n_vocab + 31) / 32, sizeof(uint32_t));
	char err[512] = "";

	if (!mask)
		die("out of memory");
	struct exl_filter *f = exl_grammar_filter_create(tok, EXL_CONSTRAINT_JSON_SCHEMA, schema,
							 sizeof(schema) - 1, &o, err, sizeof(err));
	if (!f) {
		check_msg("a JSON schema filter", err);
		free(mask);
		return;
	}
	int step = 0;

	for (; step < 6; step++) {
		int next = -1;

		memset(mask, 0, ((size_t)n_vocab + 31) / 32 * sizeof(uint32_t));
		err[0] = 0;
		if (f->ops->allowed(f, mask, n_vocab, err, sizeof(err))) {
			check_msg("a filter's mask", err);
			break;
		}
		for (int t = 0; t < n_vocab && next < 0; t++)
			if (mask[t / 32] >> (t % 32) & 1)
				next = t;
		if (next < 0)
			break;
		err[0] = 0;
		if (f->ops->accept(f, next, err, sizeof(err))) {
			fprintf(stderr, "fuzz_model: token %d was allowed and refused: %s\n", next, err);
			abort();
		}
	}
	if (getenv("FUZZ_MODEL_VERBOSE"))
		fprintf(stderr, "constraint: %d tokens\n", step);
	f->ops->free(f);
	free(mask);
}

static void run_model(struct exl_model *m, const struct exl_lora_set *lora)
{
	const struct exl_hparams *hp = exl_model_hparams(m);
	const struct exl_tokenizer *tok = exl_model_tokenizer(m);
	int32_t *ids = NULL, prompt[8];
	char err[512] = "";
	int n;

	n = exl_tok_encode(tok, "Hello world, <s> \xc3\xa9!", 21, true, true, &ids, err,
			   sizeof(err));
	if (n < 0) {
		check_msg("tokenizing", err);
		n = 0;
	}
	if (n > 8)
		n = 8;
	for (int i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= hp->n_vocab) {
			fprintf(stderr, "fuzz_model: token id %d of %d\n", ids[i], hp->n_vocab);
			abort();
		}
		prompt[i] = ids[i];
	}
	free(ids);
	if (!n)
		prompt[n++] = 0;
	if (!lora)
		run_constraint(tok, hp->n_vocab);

	/* as the daemon sizes its pool (with at most 64 positions here) */
	err[0] = 0;
	int kv_tokens = exl_model_kv_auto_tokens(m, 16, 2, 64, 64, err, sizeof(err));
	if (kv_tokens < 0) {
		check_msg("sizing the KV pool", err);
		return;
	}
	err[0] = 0;
	struct exl_kvcache *kv = exl_model_kvcache_create_for(m, 64, 16, 2, 64, err, sizeof(err));
	if (!kv) {
		check_msg("making the KV cache", err);
		return;
	}
	float *logits = malloc((size_t)hp->n_vocab * 8 * sizeof(float));
	struct exl_kv_seq seq, *seqs[1] = { &seq };
	int32_t sq[8] = { 0 };
	bool want[8] = { false };

	if (!logits)
		die("out of memory");
	exl_kv_seq_init(&seq);
	seq.lora = lora;
	/* an encoder: the hidden states of the whole text, in one pass */
	if (hp->encoder) {
		bool hid[8] = { true, true, true, true, true, true, true, true };
		float *hidden = malloc((size_t)hp->n_embd * 8 * sizeof(float));
		struct exl_batch b = { n, prompt, sq, want, 1, seqs };
		struct exl_batch_io io = { NULL, hid, hidden };

		if (!hidden)
			die("out of memory");
		err[0] = 0;
		if (!exl_kv_seq_reserve(kv, &seq, n) &&
		    exl_model_forward_io(m, kv, &b, &io, NULL, err, sizeof(err)))
			check_msg("an encoder's pass", err);
		free(hidden);
		exl_kv_seq_release(kv, &seq);
		free(logits);
		exl_kvcache_free(kv);
		return;
	}
	want[n - 1] = true;
	for (int step = 0; step < 4; step++) {
		struct exl_batch b = { n, prompt, sq, want, 1, seqs };

		err[0] = 0;
		if (exl_kv_seq_reserve(kv, &seq, n)) {
			break; /* the pool is full: the engine would wait */
		}
		if (exl_model_forward(m, kv, &b, logits, err, sizeof(err))) {
			check_msg("a forward pass", err);
			break;
		}
		if (getenv("FUZZ_MODEL_VERBOSE"))
			fprintf(stderr, "step %d: token %d\n", step, argmax(logits, hp->n_vocab));
		prompt[0] = argmax(logits, hp->n_vocab);
		n = 1;
		want[0] = true;
	}
	exl_kv_seq_release(kv, &seq);
	free(logits);
	exl_kvcache_free(kv);
}

int fuzz_one(const uint8_t *data, size_t size)
{
	struct script s = { data, size };
	struct model_edit *e;
	char path[128], err[512] = "";
	uint8_t pick;

	init();
	if (!take(&s, &pick, 1))
		return 0;
	pick %= N_BASES + N_LORAS;
	e = malloc(sizeof(*e));
	if (!e)
		die("out of memory");
	edit_init(e, bases[pick]);
	apply(e, &s);
	snprintf(path, sizeof(path), "%s/edited.gguf", workdir);
	if (write_model(e, path) && pick < N_BASES) {
		struct exl_model *m = exl_model_load(path, be, err, sizeof(err));

		if (getenv("FUZZ_MODEL_VERBOSE"))
			fprintf(stderr, "%s\n", m ? "loaded" : err);
		if (m) {
			run_model(m, NULL);
			exl_model_free(m);
		} else {
			check_msg("loading", err);
		}
		unlink(path);
	} else if (pick >= N_BASES) {
		struct exl_model *host = hosts[pick - N_BASES];
		struct exl_lora *l = exl_lora_load(path, host, err, sizeof(err));

		if (getenv("FUZZ_MODEL_VERBOSE"))
			fprintf(stderr, "adapter: %s\n", l ? "loaded" : err);
		if (l) {
			/* scales as a job may give them, negative included */
			struct exl_lora_set set = { 1, { { l, size % 2 ? -0.5f : 2.0f } }, 0 };

			set.key = exl_lora_set_key(&set);
			run_model(host, &set);
			exl_lora_unref(l);
		} else {
			check_msg("loading an adapter", err);
		}
		unlink(path);
	}
	edit_free(e);
	free(e);
	return 0;
}

/* ---- seeds and dictionary ---- */

static const uint8_t seed_plain[] = { 0 };
static const uint8_t seed_keys[] = { 1, 0, 130, 5, 22, 4, 131, 2, 128, 4, 1, 2, 0, 129, 4, 40 };
static const uint8_t seed_tok[] = { 0, 3, 161, 1, 3, 3, 162, 0x81, 5, 1, 159, 6 };
static const uint8_t seed_tensors[] = { 2, 5, 3, 0, 8, 6, 4, 8, 7, 9, 1, 2, 0xff, 0xff, 0xff,
					0xff, 0x7f, 0x80, 0, 0 };
static const uint8_t seed_gemma[] = { 3, 0, 149, 4, 1, 1, 144, 1, 2, 150, 0, 6, 3 };
static const uint8_t seed_phi[] = { 4, 1, 145, 4, 0, 145, 0, 29, 5, 0, 1, 12 };
static const uint8_t seed_lora[] = { 5, 5, 1, 1, 2, 3, 0, 7, 2, 0, 0, 0x7f, 0x80, 0, 0, 0, 0,
				     0, 0 };
static const uint8_t seed_lora2[] = { 6, 0, 2, 6, 4, 0, 6, 3, 1 };

size_t fuzz_seeds(const struct fuzz_blob **out)
{
	static const struct fuzz_blob seeds[] = {
		{ "plain", seed_plain, sizeof(seed_plain) },
		{ "keys", seed_keys, sizeof(seed_keys) },
		{ "tokenizer", seed_tok, sizeof(seed_tok) },
		{ "tensors", seed_tensors, sizeof(seed_tensors) },
		{ "gemma", seed_gemma, sizeof(seed_gemma) },
		{ "phi", seed_phi, sizeof(seed_phi) },
		{ "lora", seed_lora, sizeof(seed_lora) },
		{ "lora2", seed_lora2, sizeof(seed_lora2) },
	};

	*out = seeds;
	return sizeof(seeds) / sizeof(seeds[0]);
}

size_t fuzz_dict(const struct fuzz_blob **out)
{
	static const uint8_t ops[][1] = { { 0 }, { 1 }, { 2 }, { 3 }, { 4 }, { 5 }, { 6 }, { 7 } };
	static const struct fuzz_blob dict[] = {
		{ "op0", ops[0], 1 }, { "op1", ops[1], 1 }, { "op2", ops[2], 1 }, { "op3", ops[3], 1 },
		{ "op4", ops[4], 1 }, { "op5", ops[5], 1 }, { "op6", ops[6], 1 }, { "op7", ops[7], 1 },
	};

	*out = dict;
	return sizeof(dict) / sizeof(dict[0]);
}

size_t fuzz_max_len(void)
{
	return 256;
}
