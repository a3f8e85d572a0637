/* The batched forward pass over the paged KV cache, one for every
 * architecture: the llama block, with what each architecture adds switched
 * on by its hyperparameters and by which weights it has (biases, per-head
 * q/k norms, post norms, GELU, soft-capping, sliding windows, experts).
 *
 * All buffers come from the model's scratch, which grows with the largest
 * batch seen and is reused, so a pass allocates nothing once warm.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/lora.h"
#include "daemon/core/model/model_internal.h"
#include "kernels/backend_select.h"
#include "kernels/formats/elem_math.h"

static void dev_free(struct exl_backend *be, float **p)
{
	if (*p)
		be->ops->free(be, *p);
	*p = NULL;
}

static void scratch_free_tokens(struct exl_model *m)
{
	struct exl_scratch *s = &m->s;
	struct exl_backend *be = m->be;

	dev_free(be, &s->x);
	dev_free(be, &s->x_out);
	dev_free(be, &s->xn);
	dev_free(be, &s->q);
	dev_free(be, &s->k);
	dev_free(be, &s->v);
	dev_free(be, &s->att);
	dev_free(be, &s->proj);
	dev_free(be, &s->gate);
	dev_free(be, &s->up);
	dev_free(be, &s->xe);
	dev_free(be, &s->router);
	free(s->pos);
	free(s->seq);
	free(s->rows);
	free(s->tok_in);
	free(s->hid_rows);
	free(s->log_rows);
	free(s->router_host);
	free(s->exp_count);
	free(s->exp_rows);
	free(s->exp_w);
	s->pos = s->seq = s->rows = s->exp_count = s->exp_rows = NULL;
	s->tok_in = s->hid_rows = s->log_rows = NULL;
	s->router_host = s->exp_w = NULL;
	s->cap_tokens = 0;
}

void exl_model_scratch_free(struct exl_model *m)
{
	struct exl_scratch *s = &m->s;

	scratch_free_tokens(m);
	dev_free(m->be, &s->logits);
	s->cap_logits = 0;
	free(s->seq_start);
	free(s->seq_count);
	free(s->page_table);
	s->seq_start = s->seq_count = s->page_table = NULL;
	s->cap_seqs = 0;
	s->cap_page_table = 0;
}

static float *dev_alloc(struct exl_backend *be, size_t rows, size_t cols, bool *ok)
{
	float *p = be->ops->alloc(be, rows * cols * sizeof(float));

	if (!p)
		*ok = false;
	return p;
}

/* Room for n tokens; rounded up so batch sizes that wander a little do not
 * reallocate every pass. */
static int scratch_reserve_tokens(struct exl_model *m, int n, char *err, size_t errlen)
{
	const struct exl_hparams *hp = &m->hp;
	struct exl_scratch *s = &m->s;
	struct exl_backend *be = m->be;
	bool ok = true;

	if (n <= s->cap_tokens)
		return 0;
	scratch_free_tokens(m);
	size_t cap = ((size_t)n + 31) & ~(size_t)31;
	size_t q_dim = (size_t)hp->n_head * (size_t)hp->head_dim;
	size_t kv_dim = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
	size_t ff = (size_t)(hp->n_expert ? hp->n_ff_exp : hp->n_ff);
	size_t ne = (size_t)hp->n_expert;

	s->x = dev_alloc(be, cap, (size_t)hp->n_embd, &ok);
	s->x_out = dev_alloc(be, cap, (size_t)hp->n_embd, &ok);
	s->xn = dev_alloc(be, cap, (size_t)hp->n_embd, &ok);
	s->q = dev_alloc(be, cap, q_dim, &ok);
	s->k = dev_alloc(be, cap, kv_dim, &ok);
	s->v = dev_alloc(be, cap, kv_dim, &ok);
	s->att = dev_alloc(be, cap, q_dim, &ok);
	s->proj = dev_alloc(be, cap, (size_t)hp->n_embd, &ok);
	s->gate = dev_alloc(be, cap, ff, &ok);
	s->up = dev_alloc(be, cap, ff, &ok);
	s->pos = malloc(cap * sizeof(*s->pos));
	s->seq = malloc(cap * sizeof(*s->seq));
	s->rows = malloc(cap * sizeof(*s->rows));
	s->tok_in = malloc(cap * sizeof(*s->tok_in));
	s->hid_rows = malloc(cap * sizeof(*s->hid_rows));
	s->log_rows = malloc(cap * sizeof(*s->log_rows));
	if (ne) {
		s->xe = dev_alloc(be, cap, (size_t)hp->n_embd, &ok);
		s->router = dev_alloc(be, cap, ne, &ok);
		s->router_host = malloc(cap * ne * sizeof(*s->router_host));
		s->exp_count = malloc(ne * sizeof(*s->exp_count));
		s->exp_rows = malloc(cap * ne * sizeof(*s->exp_rows));
		s->exp_w = malloc(cap * ne * sizeof(*s->exp_w));
		ok = ok && s->router_host && s->exp_count && s->exp_rows && s->exp_w;
	}
	if (!ok || !s->pos || !s->seq || !s->rows || !s->tok_in || !s->hid_rows || !s->log_rows) {
		scratch_free_tokens(m);
		snprintf(err, errlen, "cannot allocate scratch for a batch of %d tokens on "
			 "backend %s", n, be->ops->name);
		return -1;
	}
	s->cap_tokens = (int)cap;
	return 0;
}

static int scratch_reserve_logits(struct exl_model *m, int n, char *err, size_t errlen)
{
	struct exl_scratch *s = &m->s;
	bool ok = true;

	if (n <= s->cap_logits)
		return 0;
	dev_free(m->be, &s->logits);
	s->cap_logits = 0;
	size_t cap = ((size_t)n + 7) & ~(size_t)7;
	s->logits = dev_alloc(m->be, cap, (size_t)m->hp.n_vocab, &ok);
	if (!ok) {
		snprintf(err, errlen, "cannot allocate logits for %d tokens on backend %s", n,
			 m->be->ops->name);
		return -1;
	}
	s->cap_logits = (int)cap;
	return 0;
}

static int scratch_reserve_seqs(struct exl_model *m, int n_seqs, size_t table, char *err,
				size_t errlen)
{
	struct exl_scratch *s = &m->s;

	if (n_seqs > s->cap_seqs) {
		int32_t *a = realloc(s->seq_start, (size_t)n_seqs * sizeof(*a));
		if (a)
			s->seq_start = a;
		int32_t *c = realloc(s->seq_count, (size_t)n_seqs * sizeof(*c));
		if (c)
			s->seq_count = c;
		if (!a || !c)
			goto oom;
		s->cap_seqs = n_seqs;
	}
	if (table > s->cap_page_table) {
		int32_t *t = realloc(s->page_table, table * sizeof(*t));
		if (!t)
			goto oom;
		s->page_table = t;
		s->cap_page_table = table;
	}
	return 0;
oom:
	snprintf(err, errlen, "out of memory for a batch of %d sequences", n_seqs);
	return -1;
}

/* Checks the batch, fills pos / seq / rows / seq_start / seq_count and the
 * page table, and hid_rows / log_rows (indices into rows) with their
 * counts.  Returns the number of rows that want logits or hidden states,
 * or -1. */
static int plan_batch(struct exl_model *m, struct exl_kvcache *kv, const struct exl_batch *b,
		      const struct exl_batch_io *io, struct exl_batch_desc *desc, int *n_hid, int *n_log, char *err,
		      size_t errlen)
{
	struct exl_scratch *s = &m->s;
	int n = b->n_tokens, n_out = 0, max_pages = 1;

	*n_hid = *n_log = 0;

	for (int j = 0; j < b->n_seqs; j++) {
		s->seq_start[j] = -1;
		s->seq_count[j] = 0;
		if (!b->seqs[j]) {
			snprintf(err, errlen, "batch sequence %d is NULL", j);
			return -1;
		}
	}
	for (int i = 0; i < n; i++) {
		int j = b->seq[i];

		if (j < 0 || j >= b->n_seqs) {
			snprintf(err, errlen, "batch token %d: sequence index %d out of range "
				 "[0, %d)", i, j, b->n_seqs);
			return -1;
		}
		if (io->embd_rows && io->embd_rows[i]) {
			s->tok_in[i] = 0;
		} else if (b->tokens[i] < 0 || b->tokens[i] >= m->hp.n_vocab) {
			snprintf(err, errlen, "batch token %d: id %d out of range [0, %d)", i,
				 b->tokens[i], m->hp.n_vocab);
			return -1;
		} else {
			s->tok_in[i] = b->tokens[i];
		}
		if (s->seq_start[j] < 0) {
			s->seq_start[j] = i;
		} else if (b->seq[i - 1] != j) {
			snprintf(err, errlen, "batch token %d: the tokens of sequence %d are not "
				 "consecutive", i, j);
			return -1;
		}
		s->pos[i] = b->seqs[j]->n_pos + s->seq_count[j]++;
		s->seq[i] = j;
		bool hid = io->want_hidden && io->want_hidden[i];

		if (!b->want_logits[i] && !hid)
			continue;
		if (hid)
			s->hid_rows[(*n_hid)++] = n_out;
		if (b->want_logits[i])
			s->log_rows[(*n_log)++] = n_out;
		s->rows[n_out++] = i;
	}
	for (int j = 0; j < b->n_seqs; j++) {
		const struct exl_kv_seq *sq = b->seqs[j];

		if (!exl_kv_seq_writable(kv, sq, s->seq_count[j])) {
			snprintf(err, errlen, "batch sequence %d: positions %d..%d are not reserved "
				 "for it alone", j, sq->n_pos, sq->n_pos + s->seq_count[j] - 1);
			return -1;
		}
		if (sq->n_pages > max_pages)
			max_pages = sq->n_pages;
	}
	/* the local pool's table (exl_kvcache_create_mixed) after the global
	 * one, at the same indices */
	bool local = exl_kvcache_local_n_pages(kv) > 0;
	size_t table = (size_t)b->n_seqs * (size_t)max_pages;
	if (scratch_reserve_seqs(m, b->n_seqs, local ? 2 * table : table, err, errlen))
		return -1;
	for (int j = 0; j < b->n_seqs; j++) {
		const struct exl_kv_seq *sq = b->seqs[j];
		int32_t *row = s->page_table + (size_t)j * (size_t)max_pages;
		int32_t *lrow = row + table;

		memcpy(row, sq->pages, (size_t)sq->n_pages * sizeof(*row));
		for (int p = sq->n_pages; p < max_pages; p++)
			row[p] = -1;
		if (!local)
			continue;
		memcpy(lrow, sq->lpages, (size_t)sq->n_pages * sizeof(*lrow));
		for (int p = sq->n_pages; p < max_pages; p++)
			lrow[p] = -1;
	}
	desc->n_tokens = n;
	desc->pos = s->pos;
	desc->seq = s->seq;
	desc->n_seqs = b->n_seqs;
	desc->max_pages = max_pages;
	desc->page_table = s->page_table;
	desc->local_max_pages = local ? max_pages : 0;
	desc->local_page_table = local ? s->page_table + table : NULL;
	return n_out;
}

/* What the backend said about its last failure, or a plain fallback. */
static const char *backend_msg(const struct exl_backend *be, const char *fallback)
{
	const char *msg = exl_backend_error(be);

	return msg && *msg ? msg : fallback;
}

static int file_changed(const struct exl_model *m, char *err, size_t errlen)
{
	snprintf(err, errlen, "the model file %s changed on disk while loaded (rewritten or "
		 "truncated in place); unload the model and load it again (replace model files "
		 "with mv, not cp)", m->path);
	return -1;
}

/* The experts' top-k of one token's router logits l[ne] (softmax, the k
 * largest, their probabilities renormalized to sum 1 and scaled, as
 * llama.cpp's build_moe_ffn for llama and qwen3moe; gpt-oss: the k
 * largest logits, weighted by their own softmax), appended to each chosen
 * expert's row list. */
static void route_token(struct exl_model *m, const float *l, int t, int nr)
{
	const struct exl_hparams *hp = &m->hp;
	struct exl_scratch *s = &m->s;
	int ne = hp->n_expert, k = hp->n_expert_used;
	int chosen[EXL_MAX_EXPERTS];
	float p[EXL_MAX_EXPERTS], mx = l[0], sum = 0.0f, picked = 0.0f;

	for (int e = 1; e < ne; e++)
		mx = l[e] > mx ? l[e] : mx;
	for (int e = 0; e < ne; e++) {
		p[e] = expf(l[e] - mx);
		sum += p[e];
	}
	for (int e = 0; e < ne; e++)
		p[e] /= sum;
	/* the softmax is monotonic: the same k as the logits' own, and the
	 * softmax of the chosen is theirs renormalized, as below */
	/* k passes of a selection: k is small (2 to 8 of 8 to 128) */
	for (int i = 0; i < k; i++) {
		int best = -1;

		for (int e = 0; e < ne; e++) {
			bool taken = false;

			for (int j = 0; j < i && !taken; j++)
				taken = chosen[j] == e;
			if (!taken && (best < 0 || p[e] > p[best]))
				best = e;
		}
		chosen[i] = best;
		picked += p[best];
	}
	/* llama.cpp clamps the sum to the smallest normal half (gpt-oss's
	 * softmax over the chosen has none: the largest weighs 1 there) */
	if (picked < 6.103515625e-5f && !hp->moe_softmax_topk)
		picked = 6.103515625e-5f;
	for (int i = 0; i < k; i++) {
		int e = chosen[i];
		size_t at = (size_t)e * (size_t)nr + (size_t)s->exp_count[e]++;

		s->exp_rows[at] = t;
		/* granite's residual scale, on a sum of weighted experts, is
		 * on their weights */
		s->exp_w[at] = p[e] / picked * hp->expert_weights_scale *
			       (hp->resid_mul != 0.0f ? hp->resid_mul : 1.0f);
	}
}

/* s->gate = act(s->gate) * s->up over count floats. */
static void gated_act(struct exl_model *m, size_t count)
{
	const struct exl_backend_ops *ops = m->be->ops;
	struct exl_scratch *s = &m->s;

	if (m->hp.ffn_act == EXL_FFN_GELU)
		ops->geglu(m->be, s->gate, s->up, count);
	else if (m->hp.ffn_act == EXL_FFN_SWIGLU_OAI)
		ops->swiglu_oai(m->be, s->gate, s->up, count, 1.702f, 7.0f);
	else
		ops->swiglu(m->be, s->gate, s->up, count);
}

/* The mixture-of-experts FFN of the nr rows of s->xn, added into x.  The
 * router's logits come back to the host, which picks each token's experts;
 * then each expert that any token chose runs once over all of its tokens,
 * gathered into one batch: a matmul per weight per expert, however many
 * tokens chose it. */
static int moe_ffn(struct exl_model *m, const struct exl_layer_weights *lw, float *x, int nr,
		   char *err, size_t errlen)
{
	const struct exl_hparams *hp = &m->hp;
	const struct exl_backend_ops *ops = m->be->ops;
	struct exl_backend *be = m->be;
	struct exl_scratch *s = &m->s;
	int ne = hp->n_expert;
	size_t ff = (size_t)hp->n_ff_exp;

	ops->matmul(be, &lw->w_router, s->xn, s->router, nr);
	if (lw->b_router)
		ops->add_bias(be, s->router, lw->b_router, nr, ne);
	if (ops->download(be, s->router_host, s->router, (size_t)nr * (size_t)ne * sizeof(float))) {
		const char *msg = exl_backend_error(be);

		snprintf(err, errlen, "backend %s: %s", ops->name,
			 msg && *msg ? msg : "cannot read back the expert router's logits");
		return -1;
	}
	memset(s->exp_count, 0, (size_t)ne * sizeof(*s->exp_count));
	for (int t = 0; t < nr; t++)
		route_token(m, s->router_host + (size_t)t * (size_t)ne, t, nr);
	for (int e = 0; e < ne; e++) {
		const int32_t *rows = s->exp_rows + (size_t)e * (size_t)nr;
		int cnt = s->exp_count[e];

		if (!cnt)
			continue;
		ops->gather_rows(be, s->xe, s->xn, rows, cnt, hp->n_embd);
		ops->matmul(be, &lw->exp_gate[e], s->xe, s->gate, cnt);
		ops->matmul(be, &lw->exp_up[e], s->xe, s->up, cnt);
		if (lw->exp_b_gate) {
			ops->add_bias(be, s->gate, lw->exp_b_gate + (size_t)e * ff, cnt, (int)ff);
			ops->add_bias(be, s->up, lw->exp_b_up + (size_t)e * ff, cnt, (int)ff);
		}
		gated_act(m, (size_t)cnt * ff);
		ops->matmul(be, &lw->exp_down[e], s->gate, s->proj, cnt);
		if (lw->exp_b_down)
			ops->add_bias(be, s->proj, lw->exp_b_down + (size_t)e * (size_t)hp->n_embd,
				      cnt, hp->n_embd);
		ops->add_rows_scaled(be, x, s->proj, rows, s->exp_w + (size_t)e * (size_t)nr, cnt,
				     hp->n_embd);
	}
	return 0;
}

/* The adapters' targets at each place (lora.h), those sharing an input together. */
static const enum exl_lora_target lora_qkv[] = { EXL_LORA_Q, EXL_LORA_K, EXL_LORA_V };
static const enum exl_lora_target lora_o[] = { EXL_LORA_O };
static const enum exl_lora_target lora_gate_up[] = { EXL_LORA_GATE, EXL_LORA_UP };
static const enum exl_lora_target lora_down[] = { EXL_LORA_DOWN };

void exl_model_matmul_x(struct exl_model *m, const struct exl_weight *const *w, int count,
			const float *x, float *const *y, int n)
{
	const struct exl_backend_ops *ops = m->be->ops;

	if (ops->matmul_n) {
		ops->matmul_n(m->be, w, count, x, y, n);
		return;
	}
	for (int i = 0; i < count; i++)
		ops->matmul(m->be, w[i], x, y[i], n);
}

/* The dense FFN of the nr rows of xin (s->xn, or olmo2's x) into s->proj
 * (gathered: the rows the last layer keeps, for the adapters). */
static void dense_ffn(struct exl_model *m, const struct exl_layer_weights *lw, int il, int nr,
		      bool gathered, const float *xin)
{
	const struct exl_hparams *hp = &m->hp;
	const struct exl_backend_ops *ops = m->be->ops;
	struct exl_backend *be = m->be;
	struct exl_scratch *s = &m->s;
	size_t count = (size_t)nr * (size_t)hp->n_ff;

	exl_model_matmul_x(m, (const struct exl_weight *[]){ &lw->w_gate, &lw->w_up }, 2, xin,
			   (float *[]){ s->gate, s->up }, nr);
	exl_lora_batch_apply(m, il, xin, gathered, 2, lora_gate_up,
			     (float *[]){ s->gate, s->up });
	gated_act(m, count);
	ops->matmul(be, &lw->w_down, s->gate, s->proj, nr);
	exl_lora_batch_apply(m, il, s->gate, gathered, 1, lora_down, &s->proj);
	if (lw->ffn_post_norm)
		ops->rmsnorm(be, s->proj, s->proj, lw->ffn_post_norm, nr, hp->n_embd, hp->rms_eps);
}

/* The input rows a batch brings in place of token embeddings, into x. */
static int copy_embd_rows(struct exl_model *m, const struct exl_batch *b,
			  const float *const *rows, float *x, char *err, size_t errlen)
{
	const struct exl_backend_ops *ops = m->be->ops;
	size_t row = (size_t)m->hp.n_embd * sizeof(float);

	for (int i = 0; i < b->n_tokens; i++) {
		if (!rows[i])
			continue;
		if (ops->copy_in(m->be, (char *)x + (size_t)i * row, rows[i], row)) {
			snprintf(err, errlen, "backend %s: %s", ops->name,
				 backend_msg(m->be, "cannot copy in an input embedding"));
			return -1;
		}
	}
	return 0;
}

/* The hidden rows asked for, of the n_out normed rows in s->xn, to host. */
static int download_hidden(struct exl_model *m, float *hidden, int n_out, int n_hid, char *err,
			   size_t errlen)
{
	const struct exl_backend_ops *ops = m->be->ops;
	struct exl_scratch *s = &m->s;
	const float *src = s->xn;

	if (n_hid < n_out) {
		ops->gather_rows(m->be, s->proj, s->xn, s->hid_rows, n_hid, m->hp.n_embd);
		src = s->proj;
	}
	if (ops->download(m->be, hidden, src, (size_t)n_hid * (size_t)m->hp.n_embd *
			  sizeof(float))) {
		snprintf(err, errlen, "backend %s: %s", ops->name,
			 backend_msg(m->be, "cannot read back the hidden states"));
		return -1;
	}
	return 0;
}

int exl_model_forward(struct exl_model *m, struct exl_kvcache *kv, const struct exl_batch *b,
		      float *logits, char *err, size_t errlen)
{
	return exl_model_forward_io(m, kv, b, NULL, logits, err, errlen);
}

/* YaRN (rope.scaling.type yarn) for a layer's rope: the ramp from its base
 * over the original context, and the magnitude scale 1 + 0.1 ln(1 / scale)
 * of its own scale (1 for gemma3's unscaled local layers), times what
 * llama.cpp makes of the file's factor: mscale(1) / mscale(log_mul) with
 * mistral3's yarn_log_multiplier (so 1 / (1 + 0.1 ln factor) for 1), else
 * mscale(1), divided by 1 + 0.1 ln factor, mscale(m) = 1 + 0.1 m ln factor
 * (1 for factors up to 1). */
static void yarn_params(const struct exl_hparams *hp, struct exl_rope_params *rp)
{
	const float factor = 1.0f / hp->rope_freq_scale;
	const float lf = logf(factor);
	float ms = factor <= 1.0f ? 1.0f : 0.1f * lf + 1.0f;

	rp->ext_factor = 1.0f;
	exl_rope_yarn_ramp_dims(rp->n_rot, hp->n_ctx_orig, rp->freq_base, hp->yarn_beta_fast,
				hp->yarn_beta_slow, &rp->ramp_lo, &rp->ramp_hi);
	if (hp->yarn_log_mul != 0.0f && factor > 1.0f)
		ms /= 0.1f * hp->yarn_log_mul * lf + 1.0f;
	ms *= 1.0f / (1.0f + 0.1f * lf);
	rp->attn_factor = hp->rope_attn_factor * ms * (1.0f + 0.1f * logf(1.0f / rp->freq_scale));
}

int exl_model_forward_io(struct exl_model *m, struct exl_kvcache *kv, const struct exl_batch *b,
			 const struct exl_batch_io *io, float *logits, char *err, size_t errlen)
{
	static const struct exl_batch_io no_io;
	const struct exl_hparams *hp = &m->hp;
	const struct exl_backend_ops *ops = m->be->ops;
	struct exl_backend *be = m->be;
	struct exl_scratch *s = &m->s;
	struct exl_batch_desc desc;
	const struct exl_batch_io *bio = io ? io : &no_io;
	struct exl_rope_params rp_global = {
		.n_rot = hp->n_rot,
		.freq_base = hp->rope_freq_base,
		.freq_scale = hp->rope_freq_scale,
		.neox = hp->rope_neox,
		.freq_factors = m->rope_factors,
		.attn_factor = hp->rope_attn_factor,
	};
	struct exl_rope_params rp_local = rp_global;
	const struct exl_attn_params ap_global = {
		.scale = hp->attn_scale,
		.softcap = hp->attn_softcap,
	};
	struct exl_attn_params ap_local = ap_global;
	const int q_dim = hp->n_head * hp->head_dim;
	const size_t embd = (size_t)hp->n_embd;
	int n = b->n_tokens, n_hid, n_log;

	if (atomic_load(&m->file_fault))
		return file_changed(m, err, errlen);
	if (n <= 0 || b->n_seqs <= 0 || !b->tokens || !b->seq || !b->want_logits || !b->seqs) {
		snprintf(err, errlen, "empty or incomplete batch (%d tokens, %d sequences)", n,
			 b->n_seqs);
		return -1;
	}
	const struct exl_kv_layer *kl0 = exl_kvcache_layer(kv, 0);
	if (!kl0 || !exl_kvcache_layer(kv, hp->n_layer - 1) || kl0->n_kv_heads != hp->n_head_kv ||
	    kl0->head_dim != hp->head_dim) {
		snprintf(err, errlen, "kv cache is not shaped for this model");
		return -1;
	}
	/* a layer in the local pool sees only its window's positions there */
	for (int il = 0; exl_kvcache_local_n_pages(kv) && il < hp->n_layer; il++) {
		if (exl_kvcache_layer(kv, il)->table &&
		    (!exl_layer_is_swa(hp, il) || exl_kvcache_local_window(kv) < hp->n_swa)) {
			snprintf(err, errlen, "kv cache keeps layer %d in its local pool, which "
				 "the model's layer cannot use", il);
			return -1;
		}
	}
	if (scratch_reserve_tokens(m, n, err, errlen) ||
	    scratch_reserve_seqs(m, b->n_seqs, 0, err, errlen))
		return -1;
	int n_out = plan_batch(m, kv, b, bio, &desc, &n_hid, &n_log, err, errlen);
	if (n_out < 0)
		return -1;
	if ((n_log > 0 && !logits) || (n_hid > 0 && !bio->hidden)) {
		snprintf(err, errlen, "batch wants logits for %d tokens and hidden states for %d "
			 "but has no buffer", n_log, n_hid);
		return -1;
	}
	if (scratch_reserve_logits(m, n_log, err, errlen) ||
	    exl_lora_batch_plan(m, b, s->rows, n_out, err, errlen))
		return -1;
	if (ops->set_batch(be, &desc)) {
		snprintf(err, errlen, "backend %s: %s", ops->name,
			 backend_msg(be, "refused the batch layout"));
		return -1;
	}

	/* gemma's local layers: their own rope, and the window */
	rp_local.freq_base = hp->rope_freq_base_swa;
	rp_local.freq_scale = hp->rope_freq_scale_swa;
	ap_local.window = hp->n_swa;
	if (hp->rope_yarn) {
		yarn_params(hp, &rp_global);
		yarn_params(hp, &rp_local);
	}
	/* olmo2's local layers: as llama.cpp turns them, no YaRN, factor 1 */
	if (hp->local_rope_plain) {
		rp_local.ext_factor = 0.0f;
		rp_local.ramp_lo = rp_local.ramp_hi = 0.0f;
		rp_local.attn_factor = 1.0f;
	}
	/* mistral3's attention temperature: on the queries' rotation alone.
	 * Without one q and k share their tables (the backends keep two). */
	struct exl_rope_params rq_global = rp_global, rq_local = rp_local;

	if (hp->attn_temp_scale != 0.0f) {
		rq_global.temp_scale = rq_local.temp_scale = hp->attn_temp_scale;
		rq_global.temp_floor = rq_local.temp_floor = hp->n_ctx_orig;
	}

	float *x = s->x;
	if (hp->encoder) {
		/* an embedding model: hidden states only, no output norm */
		if (n_log > 0 || bio->embd_rows) {
			snprintf(err, errlen, "%s is an embedding model: it gives no logits and "
				 "takes no input embeddings", hp->arch_name);
			return -1;
		}
		if (exl_model_encoder_pass(m, kv, b->tokens, n, x, err, errlen))
			return -1;
		if (n_out > 0)
			ops->gather_rows(be, s->xn, x, s->rows, n_out, hp->n_embd);
		goto output;
	}
	ops->embed(be, &m->tok_embd, bio->embd_rows ? s->tok_in : b->tokens, x, n);
	if (bio->embd_rows && copy_embd_rows(m, b, bio->embd_rows, x, err, errlen))
		return -1;
	if (hp->embd_scale)
		ops->scale(be, x, sqrtf((float)hp->n_embd), (size_t)n * embd);
	if (hp->embd_mul != 0.0f)
		ops->scale(be, x, hp->embd_mul, (size_t)n * embd);
	for (int il = 0; il < hp->n_layer; il++) {
		const struct exl_layer_weights *lw = &m->layers[il];
		const struct exl_kv_layer *kl = exl_kvcache_layer(kv, il);
		bool last = il == hp->n_layer - 1;
		bool local = exl_layer_is_swa(hp, il);
		const float *att = s->att;
		int nr = n;

		/* olmo2 normalizes only after: its projections read x itself */
		const float *xin = x;

		if (lw->attn_norm) {
			ops->rmsnorm(be, s->xn, x, lw->attn_norm, n, hp->n_embd, hp->rms_eps);
			xin = s->xn;
		}
		exl_model_matmul_x(m, (const struct exl_weight *[]){ &lw->wq, &lw->wk, &lw->wv }, 3,
				   xin, (float *[]){ s->q, s->k, s->v }, n);
		exl_lora_batch_apply(m, il, xin, false, 3, lora_qkv,
				     (float *[]){ s->q, s->k, s->v });
		if (lw->bq)
			ops->add_bias(be, s->q, lw->bq, n, (int)lw->wq.rows);
		if (lw->bk)
			ops->add_bias(be, s->k, lw->bk, n, (int)lw->wk.rows);
		if (lw->bv)
			ops->add_bias(be, s->v, lw->bv, n, (int)lw->wv.rows);
		if (lw->q_norm && hp->qk_norm_full) {
			/* olmo2: each token's q and k a row */
			ops->rmsnorm(be, s->q, s->q, lw->q_norm, n, q_dim, hp->rms_eps);
			ops->rmsnorm(be, s->k, s->k, lw->k_norm, n, hp->n_head_kv * hp->head_dim,
				     hp->rms_eps);
		} else if (lw->q_norm) {
			/* every head a row of its own */
			ops->rmsnorm(be, s->q, s->q, lw->q_norm, n * hp->n_head, hp->head_dim,
				     hp->rms_eps);
			ops->rmsnorm(be, s->k, s->k, lw->k_norm, n * hp->n_head_kv, hp->head_dim,
				     hp->rms_eps);
		}
		if (exl_layer_has_rope(hp, il)) {
			ops->rope(be, s->q, n, hp->n_head, hp->head_dim,
				  local ? &rq_local : &rq_global);
			ops->rope(be, s->k, n, hp->n_head_kv, hp->head_dim,
				  local ? &rp_local : &rp_global);
		}
		ops->kv_store(be, kl, s->k, s->v);
		if (last && n_out == 0)
			break; /* nothing reads this layer's output */
		struct exl_attn_params ap = local ? ap_local : ap_global;

		ap.sinks = lw->sinks;
		ops->attention(be, kl, s->q, s->att, hp->n_head, &ap);

		/* Past the last attention only the rows that want logits matter. */
		if (last && n_out < n) {
			ops->gather_rows(be, s->q, s->att, s->rows, n_out, q_dim);
			ops->gather_rows(be, s->x_out, x, s->rows, n_out, hp->n_embd);
			att = s->q;
			x = s->x_out;
			nr = n_out;
		}
		ops->matmul(be, &lw->wo, att, s->proj, nr);
		exl_lora_batch_apply(m, il, att, nr < n, 1, lora_o, &s->proj);
		if (lw->bo)
			ops->add_bias(be, s->proj, lw->bo, nr, hp->n_embd);
		if (lw->attn_post_norm)
			ops->rmsnorm(be, s->proj, s->proj, lw->attn_post_norm, nr, hp->n_embd,
				     hp->rms_eps);
		if (hp->resid_mul != 0.0f)
			ops->scale(be, s->proj, hp->resid_mul, (size_t)nr * embd);
		ops->add(be, x, s->proj, (size_t)nr * embd);

		const float *fin = x;

		if (lw->ffn_norm) {
			ops->rmsnorm(be, s->xn, x, lw->ffn_norm, nr, hp->n_embd, hp->rms_eps);
			fin = s->xn;
		}
		if (hp->n_expert) {
			if (moe_ffn(m, lw, x, nr, err, errlen))
				return -1;
		} else {
			dense_ffn(m, lw, il, nr, nr < n, fin);
			if (hp->resid_mul != 0.0f)
				ops->scale(be, s->proj, hp->resid_mul, (size_t)nr * embd);
			ops->add(be, x, s->proj, (size_t)nr * embd);
		}
	}
	if (n_out > 0)
		ops->rmsnorm(be, s->xn, x, m->output_norm, n_out, hp->n_embd, hp->rms_eps);
output:
	if (n_hid > 0 && download_hidden(m, bio->hidden, n_out, n_hid, err, errlen))
		return -1;
	if (n_log > 0) {
		const float *xl = s->xn;

		if (n_log < n_out) {
			/* s->x or s->x_out, whichever x is not */
			float *other = x == s->x ? s->x_out : s->x;

			ops->gather_rows(be, other, s->xn, s->log_rows, n_log, hp->n_embd);
			xl = other;
		}
		ops->matmul(be, &m->output, xl, s->logits, n_log);
		if (hp->logit_scale != 0.0f)
			ops->scale(be, s->logits, 1.0f / hp->logit_scale,
				   (size_t)n_log * (size_t)hp->n_vocab);
		if (hp->final_softcap > 0.0f)
			ops->softcap(be, s->logits, hp->final_softcap,
				     (size_t)n_log * (size_t)hp->n_vocab);
		if (ops->download(be, logits, s->logits,
				  (size_t)n_log * (size_t)hp->n_vocab * sizeof(float))) {
			snprintf(err, errlen, "backend %s: %s", ops->name,
				 backend_msg(be, "cannot read back the logits"));
			return -1;
		}
	} else if (ops->sync(be)) {
		snprintf(err, errlen, "backend %s: %s", ops->name,
			 backend_msg(be, "failed running the batch"));
		return -1;
	}
	/* A queueing backend reports a failed op only now. */
	const char *be_err = exl_backend_error(be);
	if (be_err) {
		snprintf(err, errlen, "backend %s: %s", ops->name, be_err);
		return -1;
	}
	/* Weights read from a truncated file came back as zeros (mapguard.h):
	 * these logits mean nothing. */
	if (atomic_load(&m->file_fault))
		return file_changed(m, err, errlen);

	for (int j = 0; j < b->n_seqs; j++) {
		if (!s->seq_count[j])
			continue;
		if (exl_kv_seq_commit(kv, b->seqs[j], b->tokens + s->seq_start[j],
				      s->seq_count[j])) {
			snprintf(err, errlen, "batch sequence %d: cannot commit %d positions", j,
				 s->seq_count[j]);
			return -1;
		}
	}
	return 0;
}
