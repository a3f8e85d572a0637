/* Binding a model's tensors by name, with shape and type checks, and
 * handing them to the backend.
 *
 * Binding runs twice over the same names: a plan pass checks every tensor
 * and adds up the bytes the backend will hold, so a model that cannot fit
 * on the device is refused with the numbers before anything is uploaded;
 * then the pass that uploads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/model/model_internal.h"
#include "kernels/backend_select.h"
#include "kernels/formats/dtype.h"
#include "kernels/formats/quant.h"

#define MIB (1024.0 * 1024.0)

struct binder {
	struct exl_model *m;
	bool plan;       /* check and count only; *data is the host bytes */
	uint64_t bytes;  /* plan: bytes the upload pass will upload */
};

static const char *type_name(uint32_t t)
{
	const struct exl_dtype_info *info = exl_dtype_info(t);

	return info ? info->name : "unknown";
}

static void shape_str(char *buf, size_t len, const uint64_t *ne, uint32_t n_dims)
{
	size_t off = 0;

	off += (size_t)snprintf(buf, len, "[");
	for (uint32_t d = 0; d < n_dims && off < len; d++)
		off += (size_t)snprintf(buf + off, len - off, "%s%llu", d ? ", " : "",
					(unsigned long long)ne[d]);
	if (off < len)
		snprintf(buf + off, len - off, "]");
}

static int track_upload(struct exl_model *m, const void *p)
{
	const void **u = realloc(m->uploads, ((size_t)m->n_uploads + 1) * sizeof(*u));

	if (!u)
		return -1;
	m->uploads = u;
	m->uploads[m->n_uploads++] = p;
	return 0;
}

/* Finds name with shape [ne0] (ne1 == 0), [ne0, ne1] (ne2 == 0) or [ne0,
 * ne1, ne2], checks its type and uploads it (the plan pass counts its bytes
 * instead).  A tensor that is absent gives *data = NULL and 0 when
 * optional. */
static int bind3(struct binder *bd, const char *name, uint64_t ne0, uint64_t ne1, uint64_t ne2,
		 bool matmul, bool optional, const struct gguf_tensor **out, const void **data,
		 char *err, size_t errlen)
{
	struct exl_model *m = bd->m;
	const struct gguf_tensor *t = exl_gguf_find_tensor(m->gguf, name);
	const char *why;
	uint64_t want[3] = { ne0, ne1, ne2 };
	uint32_t want_dims = ne2 ? 3 : ne1 ? 2 : 1;
	char ws[64], fs[96];

	*data = NULL;
	if (!t) {
		if (optional)
			return 0;
		snprintf(err, errlen, "missing tensor '%s'", name);
		return -1;
	}
	bool ok = t->ne[0] == want[0] && t->ne[1] == (ne1 ? ne1 : 1) && t->ne[2] == (ne2 ? ne2 : 1);
	for (uint32_t d = 3; d < GGUF_MAX_DIMS; d++)
		ok = ok && t->ne[d] == 1;
	if (!ok) {
		shape_str(ws, sizeof(ws), want, want_dims);
		shape_str(fs, sizeof(fs), t->ne, t->n_dims ? t->n_dims : 1);
		snprintf(err, errlen, "tensor '%s' has shape %s, expected %s", name, fs, ws);
		return -1;
	}
	if (matmul ? !exl_dtype_supported(t->type) : t->type != EXL_F32) {
		snprintf(err, errlen, "tensor '%s' has unsupported type %s (type %u)%s", name,
			 type_name(t->type), t->type, matmul ? "" : ", expected f32");
		return -1;
	}
	size_t row_bytes = exl_dtype_row_bytes(t->type, t->ne[0]);
	uint64_t rows = t->ne[1] * t->ne[2];
	if (!row_bytes || t->nbytes / row_bytes != rows || t->nbytes % row_bytes) {
		snprintf(err, errlen, "tensor '%s': %llu bytes do not hold %llu rows of %llu %s",
			 name, (unsigned long long)t->nbytes, (unsigned long long)rows,
			 (unsigned long long)t->ne[0], type_name(t->type));
		return -1;
	}
	if (bd->plan) {
		bd->bytes += t->nbytes;
		*data = t->data;
		*out = t;
		return 0;
	}
	*data = m->be->ops->upload(m->be, t->data, t->nbytes);
	if (!*data) {
		why = exl_backend_error(m->be);
		snprintf(err, errlen, "tensor '%s': cannot upload %llu bytes to backend %s (%.1f MiB "
			 "of weights uploaded before it): %s", name, (unsigned long long)t->nbytes,
			 m->be->ops->name, m->weight_bytes / MIB, why ? why : "no reason given");
		return -1;
	}
	if (track_upload(m, *data)) {
		m->be->ops->unload(m->be, *data);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	m->weight_bytes += t->nbytes;
	*out = t;
	return 0;
}

static int bind(struct binder *bd, const char *name, uint64_t ne0, uint64_t ne1, bool matmul,
		bool optional, const struct gguf_tensor **out, const void **data, char *err,
		size_t errlen)
{
	return bind3(bd, name, ne0, ne1, 0, matmul, optional, out, data, err, errlen);
}

static int bind_vec(struct binder *bd, const char *name, int n, bool optional,
		    const float **out, char *err, size_t errlen)
{
	const struct gguf_tensor *t;
	const void *d;

	if (bind(bd, name, (uint64_t)n, 0, false, optional, &t, &d, err, errlen))
		return -1;
	*out = d;
	return 0;
}

/* An F32 table of rows x cols (GGUF shape [cols, rows]): gpt-oss's expert
 * biases, a row an expert. */
static int bind_rows(struct binder *bd, const char *name, int cols, int rows, const float **out,
		     char *err, size_t errlen)
{
	const struct gguf_tensor *t;
	const void *d;

	if (bind(bd, name, (uint64_t)cols, (uint64_t)rows, false, false, &t, &d, err, errlen))
		return -1;
	*out = d;
	return 0;
}

/* Offers matmul weight w, just bound from t, to the backend's repack (a
 * layout its kernels read faster, kernels/backend.h).  Where the backend
 * took a copy, the model unloads that instead, and the file's pages of t
 * go back to the system: nothing reads them again. */
static int repack_mat(struct binder *bd, const struct gguf_tensor *t, struct exl_weight *w, char *err,
		      size_t errlen)
{
	struct exl_model *m = bd->m;
	const void *orig = w->data;
	char why[200];

	if (bd->plan || !m->be->ops->repack)
		return 0;
	if (m->be->ops->repack(m->be, w, why, sizeof(why))) {
		snprintf(err, errlen, "tensor '%.*s': %s", (int)t->name.len, t->name.ptr, why);
		return -1;
	}
	if (w->data == orig)
		return 0;
	for (int i = m->n_uploads - 1; i >= 0; i--) {
		if (m->uploads[i] == orig) {
			m->uploads[i] = w->data;
			break;
		}
	}
	exl_gguf_drop_pages(m->gguf, t->data, t->nbytes);
	return 0;
}

/* A matmul weight of rows x cols (GGUF shape [cols, rows]); w->data NULL
 * when absent and optional.  repack: the backend may hold it in a layout
 * of its own (never for a table embed reads rows of, nor a tensor whose
 * rows are split at other than a multiple of 8: rows_of). */
static int bind_mat_opt(struct binder *bd, const char *name, int rows, int cols, bool optional,
			bool repack, struct exl_weight *w, char *err, size_t errlen)
{
	const struct gguf_tensor *t;
	const void *d;

	memset(w, 0, sizeof(*w));
	if (bind(bd, name, (uint64_t)cols, (uint64_t)rows, true, optional, &t, &d, err, errlen))
		return -1;
	if (!d)
		return 0;
	w->type = t->type;
	w->rows = rows;
	w->cols = cols;
	w->row_bytes = exl_dtype_row_bytes(t->type, (uint64_t)cols);
	w->data = d;
	w->layout = EXL_LAYOUT_ROWS;
	return repack ? repack_mat(bd, t, w, err, errlen) : 0;
}

static int bind_mat(struct binder *bd, const char *name, int rows, int cols,
		    struct exl_weight *w, char *err, size_t errlen)
{
	return bind_mat_opt(bd, name, rows, cols, false, true, w, err, errlen);
}

/* Rows first .. first + n - 1 of w, as a weight of its own.  Rows are
 * whole blocks of their type, so this is an offset into the same memory
 * (the backend's copy included: uploads keep the layout, and a repacked
 * group of 8 rows takes 8 * row_bytes, so callers repack only tensors
 * whose splits fall on multiples of 8). */
static struct exl_weight rows_of(const struct exl_weight *w, int64_t first, int64_t n)
{
	struct exl_weight v = *w;

	v.rows = n;
	v.data = (const char *)w->data + (size_t)first * w->row_bytes;
	return v;
}

/* The n_expert matrices of rows x cols in a 3-D expert tensor (GGUF shape
 * [cols, rows, n_expert]), one view each. */
static int bind_experts(struct binder *bd, const char *name, int rows, int cols, int n_expert,
			struct exl_weight *views, char *err, size_t errlen)
{
	const struct gguf_tensor *t;
	const void *d;
	struct exl_weight all;

	if (bind3(bd, name, (uint64_t)cols, (uint64_t)rows, (uint64_t)n_expert, true, false, &t,
		  &d, err, errlen))
		return -1;
	all.type = t->type;
	all.rows = (int64_t)rows * n_expert;
	all.cols = cols;
	all.row_bytes = exl_dtype_row_bytes(t->type, (uint64_t)cols);
	all.data = d;
	all.layout = EXL_LAYOUT_ROWS;
	if (d && rows % 8 == 0 && repack_mat(bd, t, &all, err, errlen))
		return -1;
	for (int e = 0; e < n_expert; e++)
		views[e] = rows_of(&all, (int64_t)e * rows, rows);
	return 0;
}

/* q, k and v: three tensors, or phi3's one attn_qkv whose rows are q's, then
 * k's, then v's (any architecture may have it, as in llama.cpp).  Biases
 * likewise, qwen2's required. */
static int bind_qkv(struct binder *bd, int il, struct exl_layer_weights *lw, char *err,
		    size_t errlen)
{
	const struct exl_hparams *hp = &bd->m->hp;
	int q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
	bool bias = hp->arch == EXL_ARCH_QWEN2;
	struct exl_weight qkv;
	const float *b = NULL;
	char name[96];

#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%d.%s", il, suffix), name)
	if (bind_mat_opt(bd, NAME("attn_qkv.weight"), q_dim + 2 * kv_dim, hp->n_embd, true,
			 q_dim % 8 == 0 && kv_dim % 8 == 0, &qkv, err, errlen) ||
	    (qkv.data && bind_vec(bd, NAME("attn_qkv.bias"), q_dim + 2 * kv_dim, true, &b, err,
				  errlen)))
		return -1;
	if (qkv.data) {
		lw->wq = rows_of(&qkv, 0, q_dim);
		lw->wk = rows_of(&qkv, q_dim, kv_dim);
		lw->wv = rows_of(&qkv, q_dim + kv_dim, kv_dim);
		if (b) {
			lw->bq = b;
			lw->bk = b + q_dim;
			lw->bv = b + q_dim + kv_dim;
			return 0;
		}
	} else if (bind_mat(bd, NAME("attn_q.weight"), q_dim, hp->n_embd, &lw->wq, err, errlen) ||
		   bind_mat(bd, NAME("attn_k.weight"), kv_dim, hp->n_embd, &lw->wk, err, errlen) ||
		   bind_mat(bd, NAME("attn_v.weight"), kv_dim, hp->n_embd, &lw->wv, err, errlen)) {
		return -1;
	}
	/* qwen2 always has q/k/v biases; some llama conversions do too. */
	if (bind_vec(bd, NAME("attn_q.bias"), q_dim, !bias, &lw->bq, err, errlen) ||
	    bind_vec(bd, NAME("attn_k.bias"), kv_dim, !bias, &lw->bk, err, errlen) ||
	    bind_vec(bd, NAME("attn_v.bias"), kv_dim, !bias, &lw->bv, err, errlen))
		return -1;
#undef NAME
	return 0;
}

/* The FFN: gate, up and down; phi3's and glm4's ffn_up hold gate's rows
 * then up's;
 * a mixture of experts has a router and three 3-D expert tensors. */
static int bind_ffn(struct binder *bd, int il, struct exl_layer_weights *lw, char *err,
		    size_t errlen)
{
	struct exl_model *m = bd->m;
	const struct exl_hparams *hp = &m->hp;
	char name[96];

#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%d.%s", il, suffix), name)
	if (hp->n_expert) {
		int ne = hp->n_expert, ff = hp->n_ff_exp;
		struct exl_weight *ev = m->experts + (size_t)il * 3 * (size_t)ne;
		/* gpt-oss has biases on the router and every expert */
		bool oss = hp->arch == EXL_ARCH_GPT_OSS;

		lw->exp_gate = ev;
		lw->exp_up = ev + ne;
		lw->exp_down = ev + 2 * ne;
		return bind_mat(bd, NAME("ffn_gate_inp.weight"), ne, hp->n_embd, &lw->w_router,
				err, errlen) ||
		       bind_experts(bd, NAME("ffn_gate_exps.weight"), ff, hp->n_embd, ne,
				    lw->exp_gate, err, errlen) ||
		       bind_experts(bd, NAME("ffn_up_exps.weight"), ff, hp->n_embd, ne,
				    lw->exp_up, err, errlen) ||
		       bind_experts(bd, NAME("ffn_down_exps.weight"), hp->n_embd, ff, ne,
				    lw->exp_down, err, errlen) ||
		       (oss && (bind_vec(bd, NAME("ffn_gate_inp.bias"), ne, false, &lw->b_router,
					 err, errlen) ||
				bind_rows(bd, NAME("ffn_gate_exps.bias"), ff, ne, &lw->exp_b_gate,
					  err, errlen) ||
				bind_rows(bd, NAME("ffn_up_exps.bias"), ff, ne, &lw->exp_b_up, err,
					  errlen) ||
				bind_rows(bd, NAME("ffn_down_exps.bias"), hp->n_embd, ne,
					  &lw->exp_b_down, err, errlen))) ? -1 : 0;
	}
	if (hp->arch == EXL_ARCH_PHI3 || hp->arch == EXL_ARCH_GLM4) {
		struct exl_weight gate_up;

		if (bind_mat_opt(bd, NAME("ffn_up.weight"), 2 * hp->n_ff, hp->n_embd, false,
				 hp->n_ff % 8 == 0, &gate_up, err, errlen))
			return -1;
		lw->w_gate = rows_of(&gate_up, 0, hp->n_ff);
		lw->w_up = rows_of(&gate_up, hp->n_ff, hp->n_ff);
	} else if (bind_mat(bd, NAME("ffn_gate.weight"), hp->n_ff, hp->n_embd, &lw->w_gate, err,
			    errlen) ||
		   bind_mat(bd, NAME("ffn_up.weight"), hp->n_ff, hp->n_embd, &lw->w_up, err,
			    errlen)) {
		return -1;
	}
	return bind_mat(bd, NAME("ffn_down.weight"), hp->n_embd, hp->n_ff, &lw->w_down, err,
			errlen);
#undef NAME
}

static int bind_layer(struct binder *bd, int il, char *err, size_t errlen)
{
	struct exl_model *m = bd->m;
	const struct exl_hparams *hp = &m->hp;
	struct exl_layer_weights *lw = &m->layers[il];
	int q_dim = hp->n_head * hp->head_dim;
	char name[96];

#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%d.%s", il, suffix), name)
	/* olmo2 norms q and k whole: weights as long as they are */
	int qn = hp->qk_norm_full ? q_dim : hp->head_dim;
	int kn = hp->qk_norm_full ? hp->n_head_kv * hp->head_dim : hp->head_dim;
	/* gpt-oss: the output bias and sinks, and its FFN's pre-norm under
	 * the name post_attention_norm */
	bool oss = hp->arch == EXL_ARCH_GPT_OSS;

	if (bind_vec(bd, NAME("attn_norm.weight"), hp->n_embd, hp->no_pre_norm, &lw->attn_norm, err,
		     errlen) ||
	    bind_qkv(bd, il, lw, err, errlen) ||
	    bind_vec(bd, NAME("attn_q_norm.weight"), qn, !hp->qk_norm, &lw->q_norm, err, errlen) ||
	    bind_vec(bd, NAME("attn_k_norm.weight"), kn, !hp->qk_norm, &lw->k_norm, err, errlen) ||
	    bind_mat(bd, NAME("attn_output.weight"), hp->n_embd, q_dim, &lw->wo, err, errlen) ||
	    (oss && (bind_vec(bd, NAME("attn_output.bias"), hp->n_embd, false, &lw->bo, err,
			      errlen) ||
		     bind_vec(bd, NAME("attn_sinks.weight"), hp->n_head, false, &lw->sinks, err,
			      errlen))) ||
	    bind_vec(bd, NAME("post_attention_norm.weight"), hp->n_embd, !hp->post_norms && !oss,
		     oss ? &lw->ffn_norm : &lw->attn_post_norm, err, errlen) ||
	    (!oss && bind_vec(bd, NAME("ffn_norm.weight"), hp->n_embd, hp->no_pre_norm,
			      &lw->ffn_norm, err, errlen)) ||
	    bind_ffn(bd, il, lw, err, errlen) ||
	    bind_vec(bd, NAME("post_ffw_norm.weight"), hp->n_embd, !hp->post_norms,
		     &lw->ffn_post_norm, err, errlen))
		return -1;
	/* Norms an architecture does not have would be ignored by llama.cpp
	 * too (it refuses files with tensors it does not load); only theirs
	 * are read. */
	if (!hp->qk_norm)
		lw->q_norm = lw->k_norm = NULL;
	if (!hp->post_norms)
		lw->attn_post_norm = lw->ffn_post_norm = NULL;
	if (hp->no_pre_norm)
		lw->attn_norm = lw->ffn_norm = NULL;
	/* Biases of the attention output or of the FFN, which llama.cpp adds
	 * where a llama or mistral3 conversion has them, are not applied
	 * here: such a file is refused rather than run without them. */
	static const char *const biases[] = { "attn_output.bias", "ffn_gate.bias", "ffn_up.bias",
					      "ffn_down.bias" };
	for (size_t i = oss ? 1 : 0; i < sizeof(biases) / sizeof(biases[0]); i++) {
		if (exl_gguf_find_tensor(m->gguf, NAME(biases[i]))) {
			snprintf(err, errlen, "tensor '%s' is not supported (exld applies no "
				 "bias to the attention output or the FFN)", name);
			return -1;
		}
	}
#undef NAME
	return 0;
}

/* Rope frequency factors: llama's rope_freqs (llama 3.1 and later), or the
 * long and short factors of phi3's (and longrope llama's) 128k variants.
 * Other architectures have none, and a file that carries them is refused
 * rather than run without. */
static int bind_rope_factors(struct binder *bd, char *err, size_t errlen)
{
	struct exl_model *m = bd->m;
	const struct exl_hparams *hp = &m->hp;
	static const char *const names[] = { "rope_freqs.weight", "rope_factors_long.weight",
					     "rope_factors_short.weight" };
	const float **dst[] = { &m->rope_freqs, &m->rope_long, &m->rope_short };
	bool llama = hp->arch == EXL_ARCH_LLAMA || hp->arch == EXL_ARCH_MISTRAL3 ||
		     hp->arch == EXL_ARCH_GRANITE;
	bool want[3] = { llama, llama || hp->arch == EXL_ARCH_PHI3,
			 llama || hp->arch == EXL_ARCH_PHI3 };

	for (int i = 0; i < 3; i++) {
		if (!want[i] && exl_gguf_find_tensor(m->gguf, names[i])) {
			snprintf(err, errlen, "tensor '%s' (rope frequency factors) is not "
				 "supported for architecture '%s'", names[i], hp->arch_name);
			return -1;
		}
		if (want[i] && bind_vec(bd, names[i], hp->n_rot / 2, true, dst[i], err, errlen))
			return -1;
	}
	if (m->rope_freqs && (m->rope_long || m->rope_short)) {
		snprintf(err, errlen, "both rope_freqs and rope_factors_long/short tensors");
		return -1;
	}
	exl_model_pick_rope_factors(m, hp->n_ctx_train);
	return 0;
}

/* An encoder's block (bert, nomic-bert): q/k/v (biases optional), the
 * attention output, LayerNorms after the attention and the FFN (weight and
 * bias), and the FFN: up and down with optional biases, and nomic-bert's
 * gate. */
static int bind_encoder_layer(struct binder *bd, int il, char *err, size_t errlen)
{
	struct exl_model *m = bd->m;
	const struct exl_hparams *hp = &m->hp;
	struct exl_layer_weights *lw = &m->layers[il];
	int q_dim = hp->n_head * hp->head_dim;
	char name[96];

#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%d.%s", il, suffix), name)
	if (bind_qkv(bd, il, lw, err, errlen) ||
	    bind_mat(bd, NAME("attn_output.weight"), hp->n_embd, q_dim, &lw->wo, err, errlen) ||
	    bind_vec(bd, NAME("attn_output.bias"), hp->n_embd, true, &lw->bo, err, errlen) ||
	    bind_vec(bd, NAME("attn_output_norm.weight"), hp->n_embd, false, &lw->attn_out_norm,
		     err, errlen) ||
	    bind_vec(bd, NAME("attn_output_norm.bias"), hp->n_embd, false, &lw->attn_out_norm_b,
		     err, errlen) ||
	    bind_mat(bd, NAME("ffn_up.weight"), hp->n_ff, hp->n_embd, &lw->w_up, err, errlen) ||
	    bind_vec(bd, NAME("ffn_up.bias"), hp->n_ff, true, &lw->b_up, err, errlen) ||
	    (hp->arch == EXL_ARCH_NOMIC_BERT &&
	     bind_mat(bd, NAME("ffn_gate.weight"), hp->n_ff, hp->n_embd, &lw->w_gate, err,
		      errlen)) ||
	    bind_mat(bd, NAME("ffn_down.weight"), hp->n_embd, hp->n_ff, &lw->w_down, err,
		     errlen) ||
	    bind_vec(bd, NAME("ffn_down.bias"), hp->n_embd, true, &lw->b_down, err, errlen) ||
	    bind_vec(bd, NAME("layer_output_norm.weight"), hp->n_embd, false, &lw->out_norm, err,
		     errlen) ||
	    bind_vec(bd, NAME("layer_output_norm.bias"), hp->n_embd, false, &lw->out_norm_b, err,
		     errlen))
		return -1;
	/* what exld does not run is refused rather than left out */
	if (exl_gguf_find_tensor(m->gguf, NAME("attn_q_norm.weight")) ||
	    exl_gguf_find_tensor(m->gguf, NAME("attn_norm_2.weight"))) {
		snprintf(err, errlen, "tensor '%s' is not supported (a %s variant exld does not "
			 "run)", name, hp->arch_name);
		return -1;
	}
#undef NAME
	return 0;
}

/* An encoder's embeddings: tokens, token type 0's row when the file has
 * types, bert's learned positions, and their LayerNorm; no output matrix
 * (it only embeds).  Classifier heads (rerankers) are refused. */
static int bind_encoder(struct binder *bd, char *err, size_t errlen)
{
	struct exl_model *m = bd->m;
	const struct exl_hparams *hp = &m->hp;
	const struct gguf_tensor *types = exl_gguf_find_tensor(m->gguf, "token_types.weight");

	if (exl_gguf_find_tensor(m->gguf, "cls.weight") ||
	    exl_gguf_find_tensor(m->gguf, "cls.output.weight")) {
		snprintf(err, errlen, "%s with a classifier head (a reranker: cls.weight) is not "
			 "supported; exld runs embedding models", hp->arch_name);
		return -1;
	}
	if (bind_mat_opt(bd, "token_embd.weight", hp->n_vocab, hp->n_embd, false, false,
			 &m->tok_embd, err, errlen) ||
	    (types && bind_mat_opt(bd, "token_types.weight", (int)(types->ne[1] ? types->ne[1] : 1),
				   hp->n_embd, false, false, &m->type_embd, err, errlen)) ||
	    (hp->pos_embd && bind_mat_opt(bd, "position_embd.weight", hp->n_ctx_train, hp->n_embd,
					  false, false, &m->pos_embd, err, errlen)) ||
	    bind_vec(bd, "token_embd_norm.weight", hp->n_embd, false, &m->tok_norm, err, errlen) ||
	    bind_vec(bd, "token_embd_norm.bias", hp->n_embd, false, &m->tok_norm_b, err, errlen))
		return -1;
	if (types && (types->ne[1] < 1 || types->ne[1] > 64)) {
		snprintf(err, errlen, "tensor 'token_types.weight' has %llu types",
			 (unsigned long long)types->ne[1]);
		return -1;
	}
	if (!m->layers)
		m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
	if (!m->layers) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (int il = 0; il < hp->n_layer; il++)
		if (bind_encoder_layer(bd, il, err, errlen))
			return -1;
	return 0;
}

/* One pass over every tensor of the layout. */
static int bind_all(struct binder *bd, char *err, size_t errlen)
{
	struct exl_model *m = bd->m;
	const struct exl_hparams *hp = &m->hp;
	const void *d;
	const struct gguf_tensor *t;

	if (hp->encoder)
		return bind_encoder(bd, err, errlen);

	/* embed reads its rows: kept as the file has them */
	if (bind_mat_opt(bd, "token_embd.weight", hp->n_vocab, hp->n_embd, false, false, &m->tok_embd,
			 err, errlen) ||
	    bind_vec(bd, "output_norm.weight", hp->n_embd, false, &m->output_norm, err, errlen))
		return -1;
	if (bind(bd, "output.weight", (uint64_t)hp->n_embd, (uint64_t)hp->n_vocab, true, true,
		 &t, &d, err, errlen))
		return -1;
	/* llama.cpp adds it where a qwen2vl file has one; exld does not */
	if (exl_gguf_find_tensor(m->gguf, "output.bias")) {
		snprintf(err, errlen, "tensor 'output.bias' is not supported (exld applies no bias "
			 "to the logits)");
		return -1;
	}
	if (d) {
		m->output.type = t->type;
		m->output.rows = hp->n_vocab;
		m->output.cols = hp->n_embd;
		m->output.row_bytes = exl_dtype_row_bytes(t->type, (uint64_t)hp->n_embd);
		m->output.data = d;
		m->output.layout = EXL_LAYOUT_ROWS;
		m->hp.tied_embeddings = false;
		if (repack_mat(bd, t, &m->output, err, errlen))
			return -1;
	} else {
		m->output = m->tok_embd;
		m->hp.tied_embeddings = true;
	}

	if (bind_rope_factors(bd, err, errlen))
		return -1;
	if (!m->layers)
		m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
	if (!m->experts && hp->n_expert)
		m->experts = calloc((size_t)hp->n_layer * 3 * (size_t)hp->n_expert,
				    sizeof(*m->experts));
	if (!m->layers || (hp->n_expert && !m->experts)) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (int il = 0; il < hp->n_layer; il++)
		if (bind_layer(bd, il, err, errlen))
			return -1;
	return 0;
}

/* Refuses weights of `need` bytes that a device with its own memory has no
 * room for, naming both numbers. */
static int check_fits(struct exl_model *m, uint64_t need, char *err, size_t errlen)
{
	struct exl_backend_mem mem;
	char msg[300];

	if (m->be->ops->mem_info(m->be, &mem, msg, sizeof(msg))) {
		snprintf(err, errlen, "cannot tell whether %.1f MiB of weights fit on %s: %s",
			 need / MIB, mem.device, msg);
		return -1;
	}
	if (!mem.total_bytes || need <= mem.free_bytes)
		return 0;
	snprintf(err, errlen, "model needs %.1f MiB of VRAM for its weights (%llu bytes), "
		 "%.1f MiB free of %.1f MiB on %s", need / MIB, (unsigned long long)need,
		 mem.free_bytes / MIB, mem.total_bytes / MIB, mem.device);
	return -1;
}

int exl_model_bind_tensors(struct exl_model *m, char *err, size_t errlen)
{
	struct binder bd = { m, true, 0 };

	if (bind_all(&bd, err, errlen) || check_fits(m, bd.bytes, err, errlen))
		return -1;
	bd.plan = false;
	return bind_all(&bd, err, errlen);
}

void exl_model_pick_rope_factors(struct exl_model *m, int n_ctx)
{
	/* As llama.cpp: phi3's long factors when the context may outgrow the
	 * one it was trained for, the short ones within it. */
	if (m->rope_freqs)
		m->rope_factors = m->rope_freqs;
	else
		m->rope_factors = n_ctx > m->hp.n_ctx_orig ? m->rope_long : m->rope_short;
}
