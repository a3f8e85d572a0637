/* exld-mkmodel: runs the real tool and reads what it wrote.
 *
 *   test_mkmodel MKMODEL synthetic   every weight type and the _M mixes, llama
 *                                    and qwen2, tied,
 *                                    the synthetic vocabulary, determinism,
 *                                    bad options
 *   test_mkmodel MKMODEL vocab       --vocab-from ../shared/models/vocab/
 *                                    ggml-vocab-llama-spm.gguf
 */
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/core/gguf/gguf.h"
#include "kernels/formats/dtype.h"
#include "kernels/formats/quant.h"
#include "tests/common/check.h"

extern char **environ;

static const char *mkmodel;
static char tmpdir[] = "/tmp/test_mkmodel_XXXXXX";

/* Runs mkmodel with args (NULL-terminated); its stderr lands in errbuf.
 * Returns the exit status, or -1 when it did not exit normally. */
static int run(const char *const *args, char *errbuf, size_t errlen)
{
	const char *argv[64];
	char errpath[256];
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int n = 0, status, fd;
	ssize_t got;

	argv[n++] = mkmodel;
	for (int i = 0; args[i] && n < 63; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	snprintf(errpath, sizeof(errpath), "%s/stderr", tmpdir);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 2, errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	if (posix_spawn(&pid, mkmodel, &fa, NULL, (char *const *)argv, environ)) {
		posix_spawn_file_actions_destroy(&fa);
		snprintf(errbuf, errlen, "cannot run %s", mkmodel);
		return -1;
	}
	posix_spawn_file_actions_destroy(&fa);
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	errbuf[0] = '\0';
	fd = open(errpath, O_RDONLY);
	if (fd >= 0) {
		got = read(fd, errbuf, errlen - 1);
		errbuf[got > 0 ? got : 0] = '\0';
		close(fd);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void *read_file(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	void *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n);
		if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		}
		*size = (size_t)n;
	}
	fclose(f);
	return buf;
}

struct shape {
	const char *type_name;
	uint32_t type;
	uint32_t ftype;
	const char *arch;
	bool tied;
	int dim, layers, heads, kv_heads, ff, vocab;
};

/* Dequantizes t and checks its values: weights uniform in +-1/sqrt(cols)
 * (mean |w| half of that), norms in 1 +- 0.1, biases in +-0.05. */
static void check_values(const struct gguf_tensor *t, const char *kind)
{
	int64_t cols = (int64_t)t->ne[0], rows = (int64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
	size_t row_bytes = exl_dtype_row_bytes(t->type, t->ne[0]);
	float *x = malloc((size_t)cols * sizeof(float));
	double sum_abs = 0, maxabs = 0, minv = INFINITY, maxv = -INFINITY;
	double scale = 1.0 / sqrt((double)cols);
	bool finite = true;
	int64_t n = 0;

	for (int64_t r = 0; r < rows && x; r++) {
		const uint8_t *src = (const uint8_t *)t->data + (size_t)r * row_bytes;

		if (exl_dequantize_row(t->type, src, x, cols)) {
			CHECK(!"dequantize failed");
			break;
		}
		for (int64_t i = 0; i < cols; i++, n++) {
			finite &= isfinite(x[i]) != 0;
			sum_abs += fabs(x[i]);
			maxabs = fmax(maxabs, fabs(x[i]));
			minv = fmin(minv, x[i]);
			maxv = fmax(maxv, x[i]);
		}
	}
	free(x);
	CHECK(finite);
	if (!strcmp(kind, "weight")) {
		double mean_abs = sum_abs / (double)n;

		/* Q2_K's four levels of 4-bit scales and mins may reach a
		 * quarter past the largest value */
		double over = t->type == EXL_Q2_K ? 1.3 : 1.2;

		if (!(maxabs <= over * scale && mean_abs > 0.4 * scale && mean_abs < 0.6 * scale)) {
			fprintf(stderr, "%.*s (%s): max |w| %g mean |w| %g for scale %g\n",
				(int)t->name.len, t->name.ptr, exl_dtype_info(t->type)->name, maxabs,
				mean_abs, scale);
			CHECK(0);
		}
	} else if (!strcmp(kind, "norm")) {
		CHECK(minv >= 0.9 && maxv <= 1.1 && maxv > minv);
	} else {
		CHECK(minv >= -0.05 && maxv <= 0.05 && maxv > minv);
	}
}

static void check_tensor(const struct gguf_file *f, const char *name, uint32_t type, uint64_t ne0,
			 uint64_t ne1, const char *kind)
{
	const struct gguf_tensor *t = exl_gguf_find_tensor(f, name);

	if (!t) {
		fprintf(stderr, "missing tensor %s\n", name);
		CHECK(0);
		return;
	}
	if (t->type != type || t->ne[0] != ne0 || t->ne[1] != ne1 || t->n_dims != (ne1 > 1 ? 2u : 1u)) {
		fprintf(stderr, "%s: type %u [%llu, %llu], expected %u [%llu, %llu]\n", name, t->type,
			(unsigned long long)t->ne[0], (unsigned long long)t->ne[1], type,
			(unsigned long long)ne0, (unsigned long long)ne1);
		CHECK(0);
		return;
	}
	check_values(t, kind);
}

static void check_model(const char *path, const struct shape *s)
{
	char err[512], key[128], buf[64];
	struct gguf_file *f = exl_gguf_open(path, err, sizeof(err));
	int head_dim = s->dim / s->heads, kv_dim = head_dim * s->kv_heads;
	bool qwen2 = !strcmp(s->arch, "qwen2");
	uint32_t u;
	float v;

	if (!f) {
		fprintf(stderr, "%s: %s\n", path, err);
		CHECK(0);
		return;
	}
	CHECK(f->version == 3 && f->alignment == 32);
	CHECK(exl_gguf_get_str(f, "general.architecture", buf, sizeof(buf)) &&
	      !strcmp(buf, s->arch));
	CHECK(exl_gguf_get_u32(f, "general.file_type", &u) && u == s->ftype);
#define HP(suffix, want)                                                            \
	do {                                                                        \
		snprintf(key, sizeof(key), "%s.%s", s->arch, suffix);               \
		CHECK(exl_gguf_get_u32(f, key, &u) && u == (uint32_t)(want));           \
	} while (0)
	HP("embedding_length", s->dim);
	HP("block_count", s->layers);
	HP("feed_forward_length", s->ff);
	HP("attention.head_count", s->heads);
	HP("attention.head_count_kv", s->kv_heads);
	HP("rope.dimension_count", head_dim);
	HP("context_length", 512);
	HP("vocab_size", s->vocab);
#undef HP
	snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon", s->arch);
	CHECK(exl_gguf_get_f32(f, key, &v) && v == (qwen2 ? 1e-6f : 1e-5f));
	snprintf(key, sizeof(key), "%s.rope.freq_base", s->arch);
	CHECK(exl_gguf_get_f32(f, key, &v) && v == (qwen2 ? 1e6f : 1e4f));
	CHECK(f->n_tensors == (uint64_t)(3 - s->tied + s->layers * (9 + (qwen2 ? 3 : 0))));

	check_tensor(f, "token_embd.weight", s->type, s->dim, s->vocab, "weight");
	check_tensor(f, "output_norm.weight", EXL_F32, s->dim, 1, "norm");
	if (s->tied)
		CHECK(exl_gguf_find_tensor(f, "output.weight") == NULL);
	else
		check_tensor(f, "output.weight", s->type, s->dim, s->vocab, "weight");
	for (int l = 0; l < s->layers; l++) {
		char name[64];
#define T(suffix, type, ne0, ne1, kind)                                     \
	(snprintf(name, sizeof(name), "blk.%d.%s", l, suffix),              \
	 check_tensor(f, name, type, ne0, ne1, kind))
		T("attn_norm.weight", EXL_F32, s->dim, 1, "norm");
		T("attn_q.weight", s->type, s->dim, s->dim, "weight");
		T("attn_k.weight", s->type, s->dim, kv_dim, "weight");
		T("attn_v.weight", s->type, s->dim, kv_dim, "weight");
		T("attn_output.weight", s->type, s->dim, s->dim, "weight");
		T("ffn_norm.weight", EXL_F32, s->dim, 1, "norm");
		T("ffn_gate.weight", s->type, s->dim, s->ff, "weight");
		T("ffn_up.weight", s->type, s->dim, s->ff, "weight");
		T("ffn_down.weight", s->type, s->ff, s->dim, "weight");
		if (qwen2) {
			T("attn_q.bias", EXL_F32, s->dim, 1, "bias");
			T("attn_k.bias", EXL_F32, kv_dim, 1, "bias");
			T("attn_v.bias", EXL_F32, kv_dim, 1, "bias");
		} else {
			snprintf(name, sizeof(name), "blk.%d.attn_q.bias", l);
			CHECK(exl_gguf_find_tensor(f, name) == NULL);
		}
#undef T
	}

	/* rows differ, also where blocks come from the pool */
	const struct gguf_tensor *t = exl_gguf_find_tensor(f, "token_embd.weight");
	size_t rb = exl_dtype_row_bytes(t->type, t->ne[0]);
	int same = 0;

	for (uint64_t r = 1; r < t->ne[1]; r++)
		same += !memcmp((const uint8_t *)t->data, (const uint8_t *)t->data + r * rb, rb);
	CHECK(same == 0);
	exl_gguf_close(f);
}

/* The synthetic vocabulary: specials, byte tokens, then unique pieces. */
static void check_synthetic_vocab(const char *path, int vocab)
{
	char err[512], buf[64];
	struct gguf_file *f = exl_gguf_open(path, err, sizeof(err));
	const struct gguf_array *toks, *types, *scores;
	int64_t i64;
	uint32_t u;
	bool b;

	CHECK(f != NULL);
	if (!f)
		return;
	CHECK(exl_gguf_get_str(f, "tokenizer.ggml.model", buf, sizeof(buf)) &&
	      !strcmp(buf, "llama"));
	CHECK(exl_gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &u) && u == 1);
	CHECK(exl_gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &u) && u == 2);
	CHECK(exl_gguf_get_u32(f, "tokenizer.ggml.unknown_token_id", &u) && u == 0);
	CHECK(exl_gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b) && b);
	toks = exl_gguf_get_arr(f, "tokenizer.ggml.tokens");
	types = exl_gguf_get_arr(f, "tokenizer.ggml.token_type");
	scores = exl_gguf_get_arr(f, "tokenizer.ggml.scores");
	CHECK(toks && toks->elem_type == GGUF_VT_STRING && toks->count == (uint64_t)vocab);
	CHECK(types && types->elem_type == GGUF_VT_INT32 && types->count == (uint64_t)vocab);
	CHECK(scores && scores->elem_type == GGUF_VT_FLOAT32 && scores->count == (uint64_t)vocab);
	if (toks && toks->count == (uint64_t)vocab && types && types->count == (uint64_t)vocab) {
		CHECK(exl_gguf_str_eq(toks->strs[0], "<unk>") &&
		      exl_gguf_str_eq(toks->strs[1], "<s>") &&
		      exl_gguf_str_eq(toks->strs[2], "</s>"));
		CHECK(exl_gguf_str_eq(toks->strs[3], "<0x00>") &&
		      exl_gguf_str_eq(toks->strs[3 + 0x41], "<0x41>") &&
		      exl_gguf_str_eq(toks->strs[258], "<0xFF>"));
		CHECK(exl_gguf_str_eq(toks->strs[259], "\xe2\x96\x81"));
		CHECK(exl_gguf_str_eq(toks->strs[260], "\xe2\x96\x81" "a") &&
		      exl_gguf_str_eq(toks->strs[261], "a"));
		CHECK(exl_gguf_arr_get_i64(types, 0, &i64) && i64 == 2);
		CHECK(exl_gguf_arr_get_i64(types, 1, &i64) && i64 == 3);
		CHECK(exl_gguf_arr_get_i64(types, 100, &i64) && i64 == 6);
		CHECK(exl_gguf_arr_get_i64(types, 299, &i64) && i64 == 1);
		/* all distinct */
		int dups = 0;

		for (int i = 0; i < vocab; i++)
			for (int j = i + 1; j < vocab; j++)
				dups += toks->strs[i].len == toks->strs[j].len &&
					!memcmp(toks->strs[i].ptr, toks->strs[j].ptr, toks->strs[i].len);
		CHECK(dups == 0);
	}
	exl_gguf_close(f);
}

/* --type q4_k_m / q5_k_m: llama.cpp's _M recipe, its file_type, Q6_K for
 * the output and for attn_v and ffn_down in layers 0, 3, 6 and 7 of 8 (the
 * first and last eighth and every third between), the base type elsewhere. */
static void check_mix_m(void)
{
	static const struct {
		const char *name;
		uint32_t base, ftype;
	} mixes[] = { { "q4_k_m", EXL_Q4_K, 15 }, { "q5_k_m", EXL_Q5_K, 17 } };
	char path[256], err[2048], name[64];

	for (size_t i = 0; i < sizeof(mixes) / sizeof(mixes[0]); i++) {
		snprintf(path, sizeof(path), "%s/mix-%s.gguf", tmpdir, mixes[i].name);
		const char *args[] = { "--dim", "256", "--layers", "8", "--heads", "2", "--ff", "256",
				       "--vocab", "300", "--type", mixes[i].name, "-o", path, NULL };
		struct gguf_file *f;
		const struct gguf_tensor *t;
		uint32_t u;

		if (run(args, err, sizeof(err)) || !(f = exl_gguf_open(path, err, sizeof(err)))) {
			fprintf(stderr, "mix %s: %s\n", mixes[i].name, err);
			CHECK(0);
			continue;
		}
		CHECK(exl_gguf_get_u32(f, "general.file_type", &u) && u == mixes[i].ftype);
		CHECK((t = exl_gguf_find_tensor(f, "output.weight")) && t->type == EXL_Q6_K);
		CHECK((t = exl_gguf_find_tensor(f, "token_embd.weight")) && t->type == mixes[i].base);
		for (int l = 0; l < 8; l++) {
			static const char *const base_only[] = { "attn_q", "attn_k", "attn_output", "ffn_gate",
								 "ffn_up" };
			static const char *const more[] = { "attn_v", "ffn_down" };
			uint32_t want = l == 0 || l == 3 || l == 6 || l == 7 ? EXL_Q6_K : mixes[i].base;

			for (size_t k = 0; k < 5; k++) {
				snprintf(name, sizeof(name), "blk.%d.%s.weight", l, base_only[k]);
				CHECK((t = exl_gguf_find_tensor(f, name)) && t->type == mixes[i].base);
			}
			for (size_t k = 0; k < 2; k++) {
				snprintf(name, sizeof(name), "blk.%d.%s.weight", l, more[k]);
				t = exl_gguf_find_tensor(f, name);
				CHECK(t && t->type == want);
				if (t && t->type != want)
					fprintf(stderr, "mix %s: %s is type %u, not %u\n", mixes[i].name, name,
						t->type, want);
			}
		}
		exl_gguf_close(f);
	}
}

/* One --seed, one set of floats whatever --type: every matrix of a file
 * of each quantized type is exl_quantize_row of the same matrix of the F32
 * file made with the same options (all tensors small enough to be
 * quantized row by row, not drawn from the block pool). */
static void check_same_weights(void)
{
	static const char *const types[] = { "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl",
					      "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_xs", "mxfp4" };
	char ref_path[256], path[256], err[2048];
	struct gguf_file *ref;

	snprintf(ref_path, sizeof(ref_path), "%s/same-f32.gguf", tmpdir);
	const char *ref_args[] = { "--dim", "256", "--layers", "1", "--heads", "2", "--ff", "512",
				   "--vocab", "300", "--seed", "11", "-o", ref_path, NULL };
	if (run(ref_args, err, sizeof(err))) {
		fprintf(stderr, "same weights: f32: %s\n", err);
		CHECK(0);
		return;
	}
	ref = exl_gguf_open(ref_path, err, sizeof(err));
	CHECK(ref != NULL);
	if (!ref)
		return;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		snprintf(path, sizeof(path), "%s/same-%s.gguf", tmpdir, types[i]);
		const char *args[] = { "--dim", "256", "--layers", "1", "--heads", "2", "--ff", "512",
				       "--vocab", "300", "--seed", "11", "--type", types[i], "-o", path,
				       NULL };
		struct gguf_file *f;
		int bad = 0, matrices = 0;

		if (run(args, err, sizeof(err)) || !(f = exl_gguf_open(path, err, sizeof(err)))) {
			fprintf(stderr, "same weights: %s: %s\n", types[i], err);
			CHECK(0);
			continue;
		}
		for (uint64_t k = 0; k < f->n_tensors; k++) {
			const struct gguf_tensor *t = &f->tensors[k];
			char name[96];

			snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.ptr);
			const struct gguf_tensor *r = exl_gguf_find_tensor(ref, name);
			size_t rb = exl_dtype_row_bytes(t->type, t->ne[0]);
			uint8_t *q = malloc(rb);

			if (t->type == EXL_F32 || !r || !q) {
				free(q);
				continue;
			}
			matrices++;
			for (uint64_t row = 0; row < t->ne[1]; row++) {
				const float *x = (const float *)r->data + row * r->ne[0];

				if (exl_quantize_row(t->type, x, q, (int64_t)t->ne[0]) != rb ||
				    memcmp(q, (const uint8_t *)t->data + row * rb, rb))
					bad++;
			}
			free(q);
		}
		if (bad)
			fprintf(stderr, "same weights: %s: %d rows are not the F32 file's, quantized\n",
				types[i], bad);
		CHECK(bad == 0 && matrices == 9);
		exl_gguf_close(f);
	}
	exl_gguf_close(ref);
}

static int synthetic(void)
{
	static const struct shape shapes[] = {
		{ "f32", EXL_F32, 0, "llama", false, 64, 2, 4, 2, 96, 300 },
		{ "f16", EXL_F16, 1, "llama", false, 64, 1, 4, 4, 128, 260 },
		{ "bf16", EXL_BF16, 32, "qwen2", false, 64, 2, 2, 1, 96, 300 },
		{ "q8_0", EXL_Q8_0, 7, "llama", true, 64, 2, 4, 2, 96, 300 },
		{ "q4_0", EXL_Q4_0, 2, "qwen2", true, 128, 1, 4, 2, 256, 300 },
		/* token_embd and output have 5000 blocks: drawn from the pool */
		{ "q4_k", EXL_Q4_K, 14, "llama", false, 256, 1, 4, 2, 512, 5000 },
		{ "q6_k", EXL_Q6_K, 18, "qwen2", false, 256, 1, 2, 1, 256, 300 },
		{ "q4_1", EXL_Q4_1, 3, "llama", false, 64, 1, 4, 2, 96, 300 },
		{ "q5_0", EXL_Q5_0, 8, "qwen2", true, 64, 1, 4, 2, 96, 300 },
		{ "q5_1", EXL_Q5_1, 9, "llama", false, 64, 1, 4, 2, 96, 300 },
		{ "q2_k", EXL_Q2_K, 10, "llama", false, 256, 1, 4, 2, 256, 300 },
		{ "q3_k", EXL_Q3_K, 11, "qwen2", false, 256, 1, 2, 1, 256, 300 },
		/* 4200 x 256 weights in token_embd and output: the pool */
		{ "q5_k", EXL_Q5_K, 16, "llama", true, 256, 1, 4, 2, 256, 4200 },
		{ "iq4_nl", EXL_IQ4_NL, 25, "llama", false, 64, 1, 4, 2, 96, 300 },
		{ "iq4_xs", EXL_IQ4_XS, 30, "qwen2", false, 256, 1, 2, 1, 256, 300 },
		/* 3 blocks of 17 bytes a row: every other row at an odd offset */
		{ "mxfp4", EXL_MXFP4, 38, "llama", true, 96, 1, 4, 2, 96, 300 },
	};
	char path[256], path2[256], err[2048];
	char dim[16], layers[16], heads[16], kvh[16], ff[16], vocab[16];

	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		const struct shape *s = &shapes[i];

		snprintf(path, sizeof(path), "%s/%s-%s.gguf", tmpdir, s->type_name, s->arch);
		snprintf(dim, sizeof(dim), "%d", s->dim);
		snprintf(layers, sizeof(layers), "%d", s->layers);
		snprintf(heads, sizeof(heads), "%d", s->heads);
		snprintf(kvh, sizeof(kvh), "%d", s->kv_heads);
		snprintf(ff, sizeof(ff), "%d", s->ff);
		snprintf(vocab, sizeof(vocab), "%d", s->vocab);
		const char *args[] = { "--dim", dim, "--layers", layers, "--heads", heads, "--kv-heads", kvh,
				       "--ff", ff, "--vocab", vocab, "--ctx", "512", "--type", s->type_name,
				       "--arch", s->arch, "--seed", "7", "-o", path,
				       s->tied ? "--tied" : NULL, NULL };
		int rc = run(args, err, sizeof(err));

		if (rc) {
			fprintf(stderr, "%s %s: exit %d: %s\n", s->type_name, s->arch, rc, err);
			CHECK(0);
			continue;
		}
		CHECK(strstr(err, "wrote ") != NULL);
		check_model(path, s);
		if (i == 0)
			check_synthetic_vocab(path, s->vocab);
	}

	check_same_weights();
	check_mix_m();

	/* the same options give the same bytes, whatever the thread count;
	 * another seed gives others (q4_k so the pool path is covered) */
	const char *base[] = { "--dim", "256", "--layers", "1", "--heads", "2", "--ff", "256",
			       "--vocab", "4200", "--type", "q4_k", "--threads", "1", "-o", path, NULL };
	const char *other[] = { "--dim", "256", "--layers", "1", "--heads", "2", "--ff", "256",
				"--vocab", "4200", "--type", "q4_k", "--threads", "3", "-o", path2, NULL };
	const char *seeded[] = { "--dim", "256", "--layers", "1", "--heads", "2", "--ff", "256",
				 "--vocab", "4200", "--type", "q4_k", "--seed", "2", "-o", path2, NULL };
	size_t n1 = 0, n2 = 0;
	void *a, *b;

	snprintf(path, sizeof(path), "%s/det1.gguf", tmpdir);
	snprintf(path2, sizeof(path2), "%s/det2.gguf", tmpdir);
	CHECK(run(base, err, sizeof(err)) == 0);
	CHECK(run(other, err, sizeof(err)) == 0);
	a = read_file(path, &n1);
	b = read_file(path2, &n2);
	CHECK(a && b && n1 == n2 && !memcmp(a, b, n1));
	free(b);
	CHECK(run(seeded, err, sizeof(err)) == 0);
	b = read_file(path2, &n2);
	CHECK(a && b && n1 == n2 && memcmp(a, b, n1));
	free(a);
	free(b);

	/* bad options: exit 2 (usage) or 1, and a message that says why */
	static const struct {
		const char *args[12];
		int rc;
		const char *msg;
	} bad[] = {
		{ { "--dim", "100", "--heads", "3", "-o", "x.gguf" }, 2, "must be --heads 3 times an even head size" },
		{ { "--heads", "4", "--kv-heads", "3", "-o", "x.gguf" }, 2, "--kv-heads 3 must divide --heads 4" },
		{ { "--type", "q4_k", "--dim", "64", "-o", "x.gguf" }, 2, "needs --dim and --ff to be multiples of 256" },
		{ { "--type", "iq2_xs", "-o", "x.gguf" }, 2, "unknown --type 'iq2_xs'" },
		{ { "--arch", "gpt2", "-o", "x.gguf" }, 2, "unknown --arch 'gpt2'" },
		{ { "--dim", "-5", "-o", "x.gguf" }, 2, "--dim wants an integer" },
		{ { "--dim", "64" }, 2, "-o FILE is required" },
		{ { "--vocab", "100", "-o", "x.gguf" }, 1, "needs --vocab >= 260" },
		{ { "--vocab-from", "/nonexistent.gguf", "-o", "x.gguf" }, 1, "cannot open /nonexistent.gguf" },
		{ { "-o", "/nonexistent/dir/x.gguf" }, 1, "cannot create /nonexistent/dir/x.gguf.part" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = run(bad[i].args, err, sizeof(err));

		if (rc != bad[i].rc || !strstr(err, bad[i].msg)) {
			fprintf(stderr, "bad option case %zu: exit %d, stderr: %s\n", i, rc, err);
			CHECK(0);
		}
	}
	return 0;
}

static int vocab_from(void)
{
	const char *dir = getenv("EXLD_MODELS");
	char vpath[4096], path[256], err[2048];
	struct gguf_file *v, *f;
	int copied = 0;

	if (!dir || !*dir) {
		printf("EXLD_MODELS is not set; skipping\n");
		return 77;
	}
	snprintf(vpath, sizeof(vpath), "%s/vocab/ggml-vocab-llama-spm.gguf", dir);
	if (access(vpath, R_OK)) {
		printf("%s not found; skipping\n", vpath);
		return 77;
	}
	snprintf(path, sizeof(path), "%s/spm.gguf", tmpdir);
	const char *args[] = { "--dim", "64", "--layers", "1", "--heads", "2", "--ff", "64",
			       "--vocab-from", vpath, "-o", path, NULL };
	int rc = run(args, err, sizeof(err));

	CHECK(rc == 0);
	if (rc) {
		fprintf(stderr, "%s\n", err);
		return 0;
	}
	v = exl_gguf_open(vpath, err, sizeof(err));
	f = exl_gguf_open(path, err, sizeof(err));
	CHECK(v && f);
	if (v && f) {
		uint32_t u;

		CHECK(exl_gguf_get_u32(f, "llama.vocab_size", &u) && u == 32000);
		CHECK(exl_gguf_find_tensor(f, "token_embd.weight")->ne[1] == 32000);
		for (uint64_t i = 0; i < v->n_kv; i++) {
			const struct gguf_kv *kv = &v->kv[i];
			char key[256];

			if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10) || kv->key.len >= sizeof(key))
				continue;
			memcpy(key, kv->key.ptr, kv->key.len);
			key[kv->key.len] = '\0';
			const struct gguf_kv *c = exl_gguf_find_kv(f, key);

			CHECK(c != NULL);
			if (!c)
				continue;
			copied++;
			CHECK(c->val.type == kv->val.type);
			if (c->val.type == GGUF_VT_ARRAY) {
				const struct gguf_array *x = &kv->val.arr, *y = &c->val.arr;
				bool same = x->elem_type == y->elem_type && x->count == y->count;

				for (uint64_t k = 0; same && k < x->count; k++) {
					if (x->elem_type == GGUF_VT_STRING)
						same = x->strs[k].len == y->strs[k].len &&
						       !memcmp(x->strs[k].ptr, y->strs[k].ptr, x->strs[k].len);
				}
				if (same && x->elem_type != GGUF_VT_STRING && x->elem_type != GGUF_VT_ARRAY)
					same = !memcmp(x->data, y->data, x->count * exl_gguf_vtype_size(x->elem_type));
				CHECK(same);
			} else if (c->val.type == GGUF_VT_STRING) {
				CHECK(c->val.str.len == kv->val.str.len &&
				      !memcmp(c->val.str.ptr, kv->val.str.ptr, c->val.str.len));
			} else {
				CHECK(c->val.u64 == kv->val.u64);
			}
		}
		CHECK(copied >= 5);
	}
	exl_gguf_close(v);
	exl_gguf_close(f);

	const char *mismatch[] = { "--vocab", "1000", "--vocab-from", vpath, "-o", path, NULL };

	rc = run(mismatch, err, sizeof(err));
	CHECK(rc == 1 && strstr(err, "--vocab 1000 but") && strstr(err, "has 32000 tokens"));
	return 0;
}

static void cleanup(void)
{
	char cmd[128];

	/* only our own mkdtemp directory */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", tmpdir);
}

int main(int argc, char **argv)
{
	int rc;

	if (argc != 3 || (strcmp(argv[2], "synthetic") && strcmp(argv[2], "vocab"))) {
		fprintf(stderr, "usage: test_mkmodel MKMODEL synthetic|vocab\n");
		return 2;
	}
	mkmodel = argv[1];
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	rc = !strcmp(argv[2], "synthetic") ? synthetic() : vocab_from();
	cleanup();
	if (rc == 77)
		return 77;
	printf("%d checks, %d failed\n", check_count, check_failures);
	return check_failures ? 1 : 0;
}
