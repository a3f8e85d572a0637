/* The encoders' pass (bert, nomic-bert: embedding models), as llama.cpp's
 * bert graph: token + type 0 + position embeddings, LayerNorm, then per
 * block attention over the whole text, residual and LayerNorm, the FFN,
 * residual and LayerNorm.  The batch's K/V go through the paged cache as
 * a decoder's do; each sequence is whole in its batch (the engine sees to
 * it), so every token's attention reads the others' K/V of this pass. */
#include <math.h>
#include <stdio.h>

#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/model_internal.h"

static void bias(struct exl_model *m, float *y, const float *b, int n, int dim)
{
	if (b)
		m->be->ops->add_bias(m->be, y, b, n, dim);
}

/* x = the embeddings of the n tokens, LayerNormed: the type row and (bert)
 * the positions' rows added to the tokens' (s->proj their scratch). */
static void embed(struct exl_model *m, const int32_t *tokens, int n, float *x)
{
	const struct exl_hparams *hp = &m->hp;
	const struct exl_backend_ops *ops = m->be->ops;
	struct exl_scratch *s = &m->s;
	static const int32_t type0 = 0;

	ops->embed(m->be, &m->tok_embd, tokens, x, n);
	if (m->type_embd.data) {
		ops->embed(m->be, &m->type_embd, &type0, s->proj, 1);
		ops->add_bias(m->be, x, s->proj, n, hp->n_embd);
	}
	if (m->pos_embd.data) {
		ops->embed(m->be, &m->pos_embd, s->pos, s->proj, n);
		ops->add(m->be, x, s->proj, (size_t)n * (size_t)hp->n_embd);
	}
	ops->layernorm(m->be, x, x, m->tok_norm, m->tok_norm_b, n, hp->n_embd, hp->rms_eps);
}

int exl_model_encoder_pass(struct exl_model *m, struct exl_kvcache *kv, const int32_t *tokens,
			   int n, float *x, char *err, size_t errlen)
{
	const struct exl_hparams *hp = &m->hp;
	const struct exl_backend_ops *ops = m->be->ops;
	struct exl_backend *be = m->be;
	struct exl_scratch *s = &m->s;
	const size_t embd = (size_t)hp->n_embd;
	const struct exl_rope_params rp = {
		.n_rot = hp->n_rot,
		.freq_base = hp->rope_freq_base,
		.freq_scale = hp->rope_freq_scale,
		.neox = hp->rope_neox,
		.attn_factor = hp->rope_attn_factor,
	};
	const struct exl_attn_params ap = {
		.scale = hp->attn_scale,
		.non_causal = true,
	};

	for (int i = 0; m->pos_embd.data && i < n; i++) {
		if (s->pos[i] >= hp->n_ctx_train) {
			snprintf(err, errlen, "position %d is past the %d that %s's position "
				 "embeddings have", s->pos[i], hp->n_ctx_train, hp->arch_name);
			return -1;
		}
	}
	embed(m, tokens, n, x);
	for (int il = 0; il < hp->n_layer; il++) {
		const struct exl_layer_weights *lw = &m->layers[il];

		exl_model_matmul_x(m, (const struct exl_weight *[]){ &lw->wq, &lw->wk, &lw->wv }, 3,
				   x, (float *[]){ s->q, s->k, s->v }, n);
		bias(m, s->q, lw->bq, n, (int)lw->wq.rows);
		bias(m, s->k, lw->bk, n, (int)lw->wk.rows);
		bias(m, s->v, lw->bv, n, (int)lw->wv.rows);
		if (exl_layer_has_rope(hp, il)) {
			ops->rope(be, s->q, n, hp->n_head, hp->head_dim, &rp);
			ops->rope(be, s->k, n, hp->n_head_kv, hp->head_dim, &rp);
		}
		ops->kv_store(be, exl_kvcache_layer(kv, il), s->k, s->v);
		ops->attention(be, exl_kvcache_layer(kv, il), s->q, s->att, hp->n_head, &ap);
		ops->matmul(be, &lw->wo, s->att, s->proj, n);
		bias(m, s->proj, lw->bo, n, hp->n_embd);
		ops->add(be, x, s->proj, (size_t)n * embd);
		ops->layernorm(be, x, x, lw->attn_out_norm, lw->attn_out_norm_b, n, hp->n_embd,
			       hp->rms_eps);

		/* the FFN: GELU(up) (bert), or SiLU(gate) * up (nomic-bert) */
		if (lw->w_gate.data) {
			exl_model_matmul_x(m, (const struct exl_weight *[]){ &lw->w_gate, &lw->w_up },
					   2, x, (float *[]){ s->gate, s->up }, n);
			bias(m, s->up, lw->b_up, n, hp->n_ff);
			ops->swiglu(be, s->gate, s->up, (size_t)n * (size_t)hp->n_ff);
		} else {
			ops->matmul(be, &lw->w_up, x, s->gate, n);
			bias(m, s->gate, lw->b_up, n, hp->n_ff);
			ops->gelu(be, s->gate, (size_t)n * (size_t)hp->n_ff);
		}
		ops->matmul(be, &lw->w_down, s->gate, s->proj, n);
		bias(m, s->proj, lw->b_down, n, hp->n_embd);
		ops->add(be, x, s->proj, (size_t)n * embd);
		ops->layernorm(be, x, x, lw->out_norm, lw->out_norm_b, n, hp->n_embd, hp->rms_eps);
	}
	return 0;
}
