/* The reference forward pass (see ref_forward.h).
 *
 * Per token at position p, per layer (llama.cpp's llm_build_llama /
 * llm_build_qwen2):
 *   h   = rmsnorm(x) * attn_norm
 *   q,k,v = Wq h (+ bq), Wk h (+ bk), Wv h (+ bv)
 *   rope(q), rope(k): the first n_rot dimensions of each head rotate by
 *       angle p * freq_scale * base^(-2i / n_rot) for pair i; llama pairs
 *       (2i, 2i+1), qwen2 (neox) pairs (i, i + n_rot/2)
 *   att = softmax(q k^T / sqrt(head_dim)) v over positions 0..p, query head
 *       j reading key/value head j / (n_head / n_head_kv)
 *   x  += Wo att
 *   h   = rmsnorm(x) * ffn_norm
 *   x  += Wdown (silu(Wgate h) * Wup h)
 * then logits = Wout (rmsnorm(x) * output_norm), Wout = token_embd when
 * there is no output.weight.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/gguf/gguf.h"
#include "ref_forward.h"

#define GGML_TYPE_F32 0

struct ref_layer {
	double *attn_norm, *wq, *wk, *wv, *bq, *bk, *bv, *wo;
	double *ffn_norm, *w_gate, *w_up, *w_down;
	double *k_cache, *v_cache; /* [n_ctx][n_head_kv * head_dim] */
};

struct ref_model {
	struct ref_hparams hp;
	bool kv_f16;
	const float *taken_k, *taken_v; /* ref_model_take_kv */
	int taken_n_pos;
	struct ref_kv_report report;
	int n_ctx; /* positions the caches hold */
	double *tok_embd, *output_norm, *output;
	struct ref_layer *layers;
};

/* Reads metadata key "<arch>.<suffix>" as an unsigned integer. */
static int meta_int(const struct gguf_file *f, const char *arch, const char *suffix, int def,
		    bool required, int *out, char *err, size_t errlen)
{
	char key[160];
	uint32_t v;

	snprintf(key, sizeof(key), "%s.%s", arch, suffix);
	if (!gguf_find_kv(f, key)) {
		if (required) {
			snprintf(err, errlen, "reference: no metadata key %s", key);
			return -1;
		}
		*out = def;
		return 0;
	}
	if (!gguf_get_u32(f, key, &v) || v > (1u << 24)) {
		snprintf(err, errlen, "reference: bad metadata key %s", key);
		return -1;
	}
	*out = (int)v;
	return 0;
}

static int meta_float(const struct gguf_file *f, const char *arch, const char *suffix,
		      double def, double *out, char *err, size_t errlen)
{
	char key[160];
	float v;

	snprintf(key, sizeof(key), "%s.%s", arch, suffix);
	if (!gguf_find_kv(f, key)) {
		*out = def;
		return 0;
	}
	if (!gguf_get_f32(f, key, &v)) {
		snprintf(err, errlen, "reference: bad metadata key %s", key);
		return -1;
	}
	*out = v;
	return 0;
}

/* The F32 tensor name of exactly rows x cols (GGUF ne = [cols, rows]) as
 * doubles; *out = NULL when absent and optional. */
static int load_tensor(const struct gguf_file *f, const char *name, int rows, int cols,
		       bool optional, double **out, char *err, size_t errlen)
{
	const struct gguf_tensor *t = gguf_find_tensor(f, name);
	size_t n = (size_t)rows * (size_t)cols;

	*out = NULL;
	if (!t) {
		if (optional)
			return 0;
		snprintf(err, errlen, "reference: no tensor %s", name);
		return -1;
	}
	if (t->type != GGML_TYPE_F32) {
		snprintf(err, errlen, "reference: tensor %s is not F32", name);
		return -1;
	}
	if (t->ne[0] != (uint64_t)cols || t->ne[1] != (uint64_t)rows || t->ne[2] != 1 ||
	    t->ne[3] != 1 || t->nbytes != n * sizeof(float)) {
		snprintf(err, errlen, "reference: tensor %s is not [%d, %d]", name, cols, rows);
		return -1;
	}
	*out = malloc(n * sizeof(double));
	if (!*out) {
		snprintf(err, errlen, "reference: out of memory");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		float x;

		memcpy(&x, (const char *)t->data + i * sizeof(float), sizeof(float));
		(*out)[i] = x;
	}
	return 0;
}

static int read_hparams(const struct gguf_file *f, struct ref_hparams *hp, char *err,
			size_t errlen)
{
	char arch[32], key[160], type[32];
	const struct gguf_array *toks = gguf_get_arr(f, "tokenizer.ggml.tokens");
	double factor = 0;

	if (!gguf_get_str(f, "general.architecture", arch, sizeof(arch)) ||
	    (strcmp(arch, "llama") && strcmp(arch, "qwen2"))) {
		snprintf(err, errlen, "reference: architecture is not llama or qwen2");
		return -1;
	}
	hp->neox = !strcmp(arch, "qwen2");
	if (!toks) {
		snprintf(err, errlen, "reference: no tokenizer.ggml.tokens");
		return -1;
	}
	hp->n_vocab = (int)toks->count;
	if (meta_int(f, arch, "embedding_length", 0, true, &hp->n_embd, err, errlen) ||
	    meta_int(f, arch, "block_count", 0, true, &hp->n_layer, err, errlen) ||
	    meta_int(f, arch, "attention.head_count", 0, true, &hp->n_head, err, errlen) ||
	    meta_int(f, arch, "attention.head_count_kv", hp->n_head, false, &hp->n_head_kv, err,
		     errlen) ||
	    meta_int(f, arch, "feed_forward_length", 0, true, &hp->n_ff, err, errlen))
		return -1;
	if (!hp->n_head || !hp->n_head_kv || hp->n_head % hp->n_head_kv) {
		snprintf(err, errlen, "reference: bad head counts");
		return -1;
	}
	if (meta_int(f, arch, "attention.key_length", hp->n_embd / hp->n_head, false,
		     &hp->head_dim, err, errlen) ||
	    meta_int(f, arch, "rope.dimension_count", hp->head_dim, false, &hp->n_rot, err,
		     errlen) ||
	    meta_float(f, arch, "attention.layer_norm_rms_epsilon", 1e-5, &hp->eps, err, errlen) ||
	    meta_float(f, arch, "rope.freq_base", 10000.0, &hp->freq_base, err, errlen))
		return -1;
	if (hp->n_rot > hp->head_dim || hp->n_rot % 2) {
		snprintf(err, errlen, "reference: bad rope dimension count %d", hp->n_rot);
		return -1;
	}
	/* The type defaults to linear; its factor is rope.scaling.factor or
	 * the older rope.scale_linear; "none" never scales. */
	snprintf(key, sizeof(key), "%s.rope.scaling.type", arch);
	snprintf(type, sizeof(type), "linear");
	if (gguf_find_kv(f, key) && !gguf_get_str(f, key, type, sizeof(type))) {
		snprintf(err, errlen, "reference: bad %s", key);
		return -1;
	}
	if (strcmp(type, "linear") && strcmp(type, "none")) {
		snprintf(err, errlen, "reference: rope scaling type is not linear or none");
		return -1;
	}
	snprintf(key, sizeof(key), "%s.rope.scaling.factor", arch);
	if (meta_float(f, arch, gguf_find_kv(f, key) ? "rope.scaling.factor" : "rope.scale_linear",
		       0, &factor, err, errlen))
		return -1;
	hp->freq_scale = factor > 0 && !strcmp(type, "linear") ? 1.0 / factor : 1.0;
	double attn_factor;

	if (meta_float(f, arch, "rope.scaling.attn_factor", 1.0, &attn_factor, err, errlen))
		return -1;
	if (attn_factor != 1.0) {
		snprintf(err, errlen, "reference: rope.scaling.attn_factor is not 1");
		return -1;
	}
	return 0;
}

void ref_model_free(struct ref_model *m)
{
	if (!m)
		return;
	for (int l = 0; m->layers && l < m->hp.n_layer; l++) {
		struct ref_layer *ly = &m->layers[l];

		free(ly->attn_norm);
		free(ly->wq);
		free(ly->wk);
		free(ly->wv);
		free(ly->bq);
		free(ly->bk);
		free(ly->bv);
		free(ly->wo);
		free(ly->ffn_norm);
		free(ly->w_gate);
		free(ly->w_up);
		free(ly->w_down);
		free(ly->k_cache);
		free(ly->v_cache);
	}
	free(m->layers);
	free(m->tok_embd);
	free(m->output_norm);
	if (m->output != m->tok_embd)
		free(m->output);
	free(m);
}

struct ref_model *ref_model_open(const char *path, bool kv_f16, char *err, size_t errlen)
{
	struct gguf_file *f = gguf_open(path, err, errlen);
	struct ref_model *m = NULL;
	struct ref_hparams *hp;
	int q_dim, kv_dim;
	char name[96];

	if (!f)
		return NULL;
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "reference: out of memory");
		goto fail;
	}
	m->kv_f16 = kv_f16;
	hp = &m->hp;
	if (read_hparams(f, hp, err, errlen))
		goto fail;
	q_dim = hp->n_head * hp->head_dim;
	kv_dim = hp->n_head_kv * hp->head_dim;
	m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
	if (!m->layers) {
		snprintf(err, errlen, "reference: out of memory");
		goto fail;
	}
	if (load_tensor(f, "token_embd.weight", hp->n_vocab, hp->n_embd, false, &m->tok_embd, err,
			errlen) ||
	    load_tensor(f, "output_norm.weight", 1, hp->n_embd, false, &m->output_norm, err,
			errlen) ||
	    load_tensor(f, "output.weight", hp->n_vocab, hp->n_embd, true, &m->output, err, errlen))
		goto fail;
	hp->tied = !m->output;
	if (hp->tied)
		m->output = m->tok_embd;
	for (int l = 0; l < hp->n_layer; l++) {
		struct ref_layer *ly = &m->layers[l];
#define T(suffix, rows, cols, opt, dst)                                                   \
	(snprintf(name, sizeof(name), "blk.%d.%s", l, suffix),                            \
	 load_tensor(f, name, rows, cols, opt, dst, err, errlen))
		if (T("attn_norm.weight", 1, hp->n_embd, false, &ly->attn_norm) ||
		    T("attn_q.weight", q_dim, hp->n_embd, false, &ly->wq) ||
		    T("attn_k.weight", kv_dim, hp->n_embd, false, &ly->wk) ||
		    T("attn_v.weight", kv_dim, hp->n_embd, false, &ly->wv) ||
		    T("attn_q.bias", 1, q_dim, true, &ly->bq) ||
		    T("attn_k.bias", 1, kv_dim, true, &ly->bk) ||
		    T("attn_v.bias", 1, kv_dim, true, &ly->bv) ||
		    T("attn_output.weight", hp->n_embd, q_dim, false, &ly->wo) ||
		    T("ffn_norm.weight", 1, hp->n_embd, false, &ly->ffn_norm) ||
		    T("ffn_gate.weight", hp->n_ff, hp->n_embd, false, &ly->w_gate) ||
		    T("ffn_up.weight", hp->n_ff, hp->n_embd, false, &ly->w_up) ||
		    T("ffn_down.weight", hp->n_embd, hp->n_ff, false, &ly->w_down))
			goto fail;
#undef T
		if (l == 0)
			hp->qkv_bias = ly->bq != NULL;
	}
	gguf_close(f);
	return m;
fail:
	ref_model_free(m);
	gguf_close(f);
	return NULL;
}

const struct ref_hparams *ref_model_hparams(const struct ref_model *m)
{
	return &m->hp;
}

void ref_model_take_kv(struct ref_model *m, const float *k, const float *v, int n_pos)
{
	m->taken_k = k;
	m->taken_v = k ? v : NULL;
	m->taken_n_pos = k ? n_pos : 0;
}

const struct ref_kv_report *ref_model_kv_report(const struct ref_model *m)
{
	return &m->report;
}

/* The distance between IEEE halves around x: 11 significant bits for
 * normals, a fixed 2^-24 below 2^-14. */
static double f16_step(double x)
{
	int e;

	if (x == 0)
		return ldexp(1.0, -24);
	frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
	return ldexp(1.0, e - 11 < -24 ? -24 : e - 11);
}

/* x rounded to the nearest IEEE half (ties to even), as a double. */
static double round_f16(double x)
{
	if (x == 0 || !isfinite(x))
		return x;
	double step = f16_step(x);
	double r = nearbyint(x / step) * step;

	return fabs(r) > 65504.0 ? copysign(INFINITY, x) : r;
}

static void rmsnorm(double *out, const double *x, const double *w, int n, double eps)
{
	double ss = 0;

	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	double s = 1.0 / sqrt(ss / n + eps);
	for (int i = 0; i < n; i++)
		out[i] = x[i] * s * w[i];
}

/* out[r] = sum_c w[r][c] x[c] (+ b[r]) */
static void matvec(double *out, const double *w, const double *b, const double *x, int rows,
		   int cols)
{
	for (int r = 0; r < rows; r++) {
		const double *row = w + (size_t)r * (size_t)cols;
		double s = b ? b[r] : 0.0;

		for (int c = 0; c < cols; c++)
			s += row[c] * x[c];
		out[r] = s;
	}
}

/* Rotates the first n_rot dimensions of each of n_heads heads of v. */
static void rope(const struct ref_hparams *hp, double *v, int n_heads, int pos)
{
	int half = hp->n_rot / 2;

	for (int h = 0; h < n_heads; h++) {
		double *x = v + (size_t)h * (size_t)hp->head_dim;

		for (int i = 0; i < half; i++) {
			double theta = pos * hp->freq_scale *
				       pow(hp->freq_base, -2.0 * i / (double)hp->n_rot);
			double c = cos(theta), s = sin(theta);
			int a = hp->neox ? i : 2 * i;
			int b = hp->neox ? i + half : 2 * i + 1;
			double x0 = x[a], x1 = x[b];

			x[a] = x0 * c - x1 * s;
			x[b] = x0 * s + x1 * c;
		}
	}
}

static double silu(double x)
{
	return x / (1.0 + exp(-x));
}

/* Grows every layer's K/V cache to hold n positions. */
static int reserve_cache(struct ref_model *m, int n, char *err, size_t errlen)
{
	const struct ref_hparams *hp = &m->hp;
	size_t kv_dim = (size_t)hp->n_head_kv * (size_t)hp->head_dim;

	if (n <= m->n_ctx)
		return 0;
	for (int l = 0; l < hp->n_layer; l++) {
		struct ref_layer *ly = &m->layers[l];
		double *k = realloc(ly->k_cache, (size_t)n * kv_dim * sizeof(double));

		if (k)
			ly->k_cache = k;
		double *v = realloc(ly->v_cache, (size_t)n * kv_dim * sizeof(double));

		if (v)
			ly->v_cache = v;
		if (!k || !v) {
			snprintf(err, errlen, "reference: out of memory");
			return -1;
		}
	}
	m->n_ctx = n;
	return 0;
}

/* One element of taken K/V against the reference's double value r.  The
 * engine rounded its float32 value of r to F16, so the half it stored is one
 * of the two around r, give or take the float32 error of that value.  That
 * error is relative to the magnitudes summed into the element, not to the
 * element: a small one is the difference of large products.  So the bound
 * is one F16 step of r plus 2^-16 of scale, the largest |value| of the
 * row r belongs to (float32 keeps 2^-24; a few layers of forward pass lose
 * a few bits more).  A real bug (wrong rotation, a missing bias) moves an
 * element by a good part of its own size.  Updates the report; -1 when the
 * element is off by more. */
static int check_taken(struct ref_model *m, int layer, int pos, double taken, double r,
		       double scale)
{
	struct ref_kv_report *rep = &m->report;
	double step = f16_step(r);
	double d = fabs(taken - r);

	rep->n++;
	if (taken != round_f16(r))
		rep->flips++;
	if (d / step > rep->worst) {
		rep->worst = d / step;
		rep->worst_layer = layer;
		rep->worst_pos = pos;
	}
	return d <= step + ldexp(scale, -16) ? 0 : -1;
}

static double max_abs(const double *x, size_t n)
{
	double m = 0;

	for (size_t i = 0; i < n; i++)
		m = fabs(x[i]) > m ? fabs(x[i]) : m;
	return m;
}

/* Replaces kp and vp (position p of layer l, after rope) with the taken
 * K/V once each element passed check_taken. */
static int take_kv(struct ref_model *m, int l, int p, double *kp, double *vp, char *err,
		   size_t errlen)
{
	const struct ref_hparams *hp = &m->hp;
	size_t kv_dim = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
	size_t off = ((size_t)l * (size_t)m->taken_n_pos + (size_t)p) * kv_dim;
	double k_scale = max_abs(kp, kv_dim), v_scale = max_abs(vp, kv_dim);

	if (p >= m->taken_n_pos) {
		snprintf(err, errlen, "no taken K/V for position %d", p);
		return -1;
	}
	for (size_t i = 0; i < kv_dim; i++) {
		double tk = m->taken_k[off + i], tv = m->taken_v[off + i];

		if (check_taken(m, l, p, tk, kp[i], k_scale) ||
		    check_taken(m, l, p, tv, vp[i], v_scale)) {
			snprintf(err, errlen, "layer %d position %d element %zu: K %.9g / V %.9g "
				 "stored, the reference's are %.9g / %.9g: not the F16 rounding "
				 "of the same value", l, p, i, tk, tv, kp[i], vp[i]);
			return -1;
		}
		kp[i] = tk;
		vp[i] = tv;
	}
	return 0;
}

int ref_forward(struct ref_model *m, const int32_t *tokens, int n, double *logits, char *err,
		size_t errlen)
{
	const struct ref_hparams *hp = &m->hp;
	int q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
	int group = hp->n_head / hp->n_head_kv;
	int width = q_dim > hp->n_ff ? q_dim : hp->n_ff;
	double *x = NULL, *h = NULL, *q = NULL, *att = NULL, *a = NULL, *b = NULL, *score = NULL;
	int rc = -1;

	if (width < hp->n_embd)
		width = hp->n_embd;
	memset(&m->report, 0, sizeof(m->report));
	if (reserve_cache(m, n, err, errlen))
		return -1;
	x = malloc((size_t)hp->n_embd * sizeof(double));
	h = malloc((size_t)hp->n_embd * sizeof(double));
	q = malloc((size_t)q_dim * sizeof(double));
	att = malloc((size_t)q_dim * sizeof(double));
	a = malloc((size_t)width * sizeof(double));
	b = malloc((size_t)width * sizeof(double));
	score = malloc((size_t)n * sizeof(double));
	if (!x || !h || !q || !att || !a || !b || !score) {
		snprintf(err, errlen, "reference: out of memory");
		goto out;
	}
	for (int p = 0; p < n; p++) {
		if (tokens[p] < 0 || tokens[p] >= hp->n_vocab) {
			snprintf(err, errlen, "reference: token %d out of range", tokens[p]);
			goto out;
		}
		memcpy(x, m->tok_embd + (size_t)tokens[p] * (size_t)hp->n_embd,
		       (size_t)hp->n_embd * sizeof(double));
		for (int l = 0; l < hp->n_layer; l++) {
			struct ref_layer *ly = &m->layers[l];
			double *kp = ly->k_cache + (size_t)p * (size_t)kv_dim;
			double *vp = ly->v_cache + (size_t)p * (size_t)kv_dim;

			rmsnorm(h, x, ly->attn_norm, hp->n_embd, hp->eps);
			matvec(q, ly->wq, ly->bq, h, q_dim, hp->n_embd);
			matvec(kp, ly->wk, ly->bk, h, kv_dim, hp->n_embd);
			matvec(vp, ly->wv, ly->bv, h, kv_dim, hp->n_embd);
			rope(hp, q, hp->n_head, p);
			rope(hp, kp, hp->n_head_kv, p);
			if (m->taken_k) {
				if (take_kv(m, l, p, kp, vp, err, errlen))
					goto out;
			} else {
				for (int i = 0; m->kv_f16 && i < kv_dim; i++) {
					kp[i] = round_f16(kp[i]);
					vp[i] = round_f16(vp[i]);
				}
			}
			for (int hd = 0; hd < hp->n_head; hd++) {
				const double *qh = q + (size_t)hd * (size_t)hp->head_dim;
				size_t koff = (size_t)(hd / group) * (size_t)hp->head_dim;
				double mx = -INFINITY, sum = 0;

				for (int t = 0; t <= p; t++) {
					const double *kt = ly->k_cache + (size_t)t * (size_t)kv_dim + koff;
					double s = 0;

					for (int i = 0; i < hp->head_dim; i++)
						s += qh[i] * kt[i];
					score[t] = s / sqrt((double)hp->head_dim);
					mx = score[t] > mx ? score[t] : mx;
				}
				for (int t = 0; t <= p; t++) {
					score[t] = exp(score[t] - mx);
					sum += score[t];
				}
				double *o = att + (size_t)hd * (size_t)hp->head_dim;

				for (int i = 0; i < hp->head_dim; i++)
					o[i] = 0;
				for (int t = 0; t <= p; t++) {
					const double *vt = ly->v_cache + (size_t)t * (size_t)kv_dim + koff;

					for (int i = 0; i < hp->head_dim; i++)
						o[i] += score[t] / sum * vt[i];
				}
			}
			matvec(a, ly->wo, NULL, att, hp->n_embd, q_dim);
			for (int i = 0; i < hp->n_embd; i++)
				x[i] += a[i];

			rmsnorm(h, x, ly->ffn_norm, hp->n_embd, hp->eps);
			matvec(a, ly->w_gate, NULL, h, hp->n_ff, hp->n_embd);
			matvec(b, ly->w_up, NULL, h, hp->n_ff, hp->n_embd);
			for (int i = 0; i < hp->n_ff; i++)
				a[i] = silu(a[i]) * b[i];
			matvec(b, ly->w_down, NULL, a, hp->n_embd, hp->n_ff);
			for (int i = 0; i < hp->n_embd; i++)
				x[i] += b[i];
		}
		rmsnorm(h, x, m->output_norm, hp->n_embd, hp->eps);
		matvec(logits + (size_t)p * (size_t)hp->n_vocab, m->output, NULL, h, hp->n_vocab,
		       hp->n_embd);
	}
	rc = 0;
out:
	free(x);
	free(h);
	free(q);
	free(att);
	free(a);
	free(b);
	free(score);
	return rc;
}
