/* An adapter's file to its A/B pairs on the base model's backend, every
 * shape checked against the base (lora.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/model/lora.h"
#include "daemon/core/model/model_internal.h"
#include "kernels/formats/dtype.h"
#include "kernels/formats/quant.h"

static const char *const target_name[EXL_LORA_N_TARGETS] = {
	"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
};

static atomic_uint_fast64_t next_id = 1;

/* The base weight a target of layer il names, or NULL. */
static const struct exl_weight *base_weight(const struct exl_model *m, int il,
					    enum exl_lora_target t)
{
	const struct exl_layer_weights *lw = &m->layers[il];

	switch (t) {
	case EXL_LORA_Q: return &lw->wq;
	case EXL_LORA_K: return &lw->wk;
	case EXL_LORA_V: return &lw->wv;
	case EXL_LORA_O: return &lw->wo;
	case EXL_LORA_GATE: return &lw->w_gate;
	case EXL_LORA_UP: return &lw->w_up;
	case EXL_LORA_DOWN: return &lw->w_down;
	default: return NULL;
	}
}

/* Parses "blk.IL.TARGET.weight" (the name without .lora_a / .lora_b). */
static int parse_base(const char *name, size_t len, int n_layer, int *il,
		      enum exl_lora_target *t)
{
	char buf[96];
	char *end;

	if (len >= sizeof(buf) || len < 4 || memcmp(name, "blk.", 4))
		return -1;
	memcpy(buf, name, len);
	buf[len] = '\0';
	long l = strtol(buf + 4, &end, 10);
	if (end == buf + 4 || *end != '.' || l < 0 || l >= n_layer)
		return -1;
	for (int k = 0; k < EXL_LORA_N_TARGETS; k++) {
		size_t tl = strlen(target_name[k]);

		if (!strncmp(end + 1, target_name[k], tl) && !strcmp(end + 1 + tl, ".weight")) {
			*il = (int)l;
			*t = (enum exl_lora_target)k;
			return 0;
		}
	}
	return -1;
}

static int check_header(const struct gguf_file *f, const struct exl_model *m,
			struct exl_lora *l, char *err, size_t errlen)
{
	char s[64];

	if (!exl_gguf_get_str(f, "general.type", s, sizeof(s)) || strcmp(s, "adapter")) {
		snprintf(err, errlen, "not an adapter: general.type is %s, not \"adapter\"",
			 exl_gguf_find_kv(f, "general.type") ? "something else" : "missing");
		return -1;
	}
	if (!exl_gguf_get_str(f, "adapter.type", s, sizeof(s)) || strcmp(s, "lora")) {
		snprintf(err, errlen, "adapter.type is %s, not \"lora\" (only LoRA adapters are "
			 "supported)", exl_gguf_find_kv(f, "adapter.type") ? "something else" :
			 "missing");
		return -1;
	}
	if (!exl_gguf_get_str(f, "general.architecture", l->arch, sizeof(l->arch))) {
		snprintf(err, errlen, "general.architecture is missing");
		return -1;
	}
	if (strcmp(l->arch, m->hp.arch_name)) {
		snprintf(err, errlen, "the adapter is for architecture %s, the model is %s",
			 l->arch, m->hp.arch_name);
		return -1;
	}
	/* the encoder pass applies no adapter: refused, not ignored */
	if (m->hp.encoder) {
		snprintf(err, errlen, "adapters are not supported on embedding models (%s)",
			 m->hp.arch_name);
		return -1;
	}
	if (!exl_gguf_get_f32(f, "adapter.lora.alpha", &l->alpha)) {
		snprintf(err, errlen, "adapter.lora.alpha is missing (or not a float32)");
		return -1;
	}
	if (!(l->alpha >= 0.0f && l->alpha <= 1e6f)) {
		snprintf(err, errlen, "adapter.lora.alpha %g is out of range [0, 1e6]",
			 (double)l->alpha);
		return -1;
	}
	return 0;
}

struct pair_src {
	const struct gguf_tensor *a, *b;
};

/* Finds every pair and checks its shapes; *floats counts their elements. */
static int collect(const struct gguf_file *f, const struct exl_model *m, struct pair_src *src,
		   uint64_t *floats, char *err, size_t errlen)
{
	int n_layer = m->hp.n_layer;

	for (uint64_t i = 0; i < f->n_tensors; i++) {
		const struct gguf_tensor *t = &f->tensors[i];
		size_t len = (size_t)t->name.len;
		bool is_a;
		int il;
		enum exl_lora_target tg;

		if (len > 7 && !memcmp(t->name.ptr + len - 7, ".lora_a", 7))
			is_a = true;
		else if (len > 7 && !memcmp(t->name.ptr + len - 7, ".lora_b", 7))
			is_a = false;
		else {
			snprintf(err, errlen, "tensor '%.*s' is not a LoRA tensor (.lora_a / .lora_b)",
				 (int)(len > 96 ? 96 : len), t->name.ptr);
			return -1;
		}
		if (parse_base(t->name.ptr, len - 7, n_layer, &il, &tg)) {
			snprintf(err, errlen, "tensor '%.*s': its base is not a block's attn_q/k/v/"
				 "output or ffn_gate/up/down weight of this %d-layer model",
				 (int)(len > 96 ? 96 : len), t->name.ptr, n_layer);
			return -1;
		}
		struct pair_src *p = &src[(size_t)il * EXL_LORA_N_TARGETS + tg];
		const struct gguf_tensor **slot = is_a ? &p->a : &p->b;

		if (*slot) {
			snprintf(err, errlen, "tensor '%.*s' appears twice", (int)len, t->name.ptr);
			return -1;
		}
		*slot = t;
	}
	*floats = 0;
	for (int il = 0; il < n_layer; il++) {
		for (int k = 0; k < EXL_LORA_N_TARGETS; k++) {
			struct pair_src *p = &src[(size_t)il * EXL_LORA_N_TARGETS + k];
			const struct exl_weight *w = base_weight(m, il, (enum exl_lora_target)k);
			char base[64];

			if (!p->a && !p->b)
				continue;
			snprintf(base, sizeof(base), "blk.%d.%s.weight", il, target_name[k]);
			if (!p->a || !p->b) {
				snprintf(err, errlen, "%s has %s but no %s", base,
					 p->a ? "lora_a" : "lora_b", p->a ? "lora_b" : "lora_a");
				return -1;
			}
			if (!w->data || !exl_gguf_find_tensor(m->gguf, base)) {
				snprintf(err, errlen, "%s.lora_a: the model has no tensor %s (fused or "
					 "expert weights take no adapter here)", base, base);
				return -1;
			}
			uint64_t r = p->a->ne[1];
			if (p->a->n_dims != 2 || p->b->n_dims != 2 || p->a->ne[0] != (uint64_t)w->cols ||
			    p->b->ne[1] != (uint64_t)w->rows || p->b->ne[0] != r || r < 1 ||
			    r > EXL_LORA_MAX_RANK) {
				snprintf(err, errlen, "%s: lora_a is [%llu, %llu] and lora_b [%llu, %llu]; "
					 "the model's weight needs [%lld, r] and [r, %lld] with r in "
					 "1..%d (wrong base model?)", base,
					 (unsigned long long)p->a->ne[0], (unsigned long long)p->a->ne[1],
					 (unsigned long long)p->b->ne[0], (unsigned long long)p->b->ne[1],
					 (long long)w->cols, (long long)w->rows, EXL_LORA_MAX_RANK);
				return -1;
			}
			const struct gguf_tensor *ab[2] = { p->a, p->b };
			for (int h = 0; h < 2; h++) {
				const struct exl_dtype_info *di = exl_dtype_info(ab[h]->type);

				if (!di || exl_dtype_row_bytes(ab[h]->type, ab[h]->ne[0]) *
					   ab[h]->ne[1] != ab[h]->nbytes) {
					snprintf(err, errlen, "%s.lora_%c: type %u cannot be read here", base,
						 h ? 'b' : 'a', ab[h]->type);
					return -1;
				}
			}
			*floats += r * (uint64_t)w->cols + (uint64_t)w->rows * r;
		}
	}
	if (!*floats) {
		snprintf(err, errlen, "the adapter has no LoRA tensors");
		return -1;
	}
	return 0;
}

/* Dequantizes t's rows into dst. */
static int read_f32(const struct gguf_tensor *t, float *dst)
{
	size_t rb = exl_dtype_row_bytes(t->type, t->ne[0]);

	for (uint64_t r = 0; r < t->ne[1]; r++) {
		const uint8_t *src = (const uint8_t *)t->data + r * rb;

		if (exl_dequantize_row(t->type, src, dst + r * t->ne[0], (int64_t)t->ne[0]))
			return -1;
	}
	return 0;
}

static int upload(struct exl_lora *l, struct exl_weight *w, float *host, uint64_t rows,
		  uint64_t cols, char *err, size_t errlen)
{
	size_t bytes = (size_t)(rows * cols) * sizeof(float);
	const void *d = l->be->ops->upload(l->be, host, bytes);

	if (!d) {
		snprintf(err, errlen, "cannot upload %zu bytes to backend %s", bytes,
			 l->be->ops->name);
		return -1;
	}
	l->uploads[l->n_uploads++] = d;
	w->type = EXL_F32;
	w->rows = (int64_t)rows;
	w->cols = (int64_t)cols;
	w->row_bytes = (size_t)cols * sizeof(float);
	w->data = d;
	return 0;
}

static int fill(struct exl_lora *l, const struct exl_model *m, const struct pair_src *src,
		uint64_t floats, char *err, size_t errlen)
{
	size_t n_slots = (size_t)m->hp.n_layer * EXL_LORA_N_TARGETS;

	if (floats > SIZE_MAX / sizeof(float) / 2) {
		snprintf(err, errlen, "the adapter is too large");
		return -1;
	}
	l->host = malloc((size_t)floats * sizeof(float));
	l->pair = calloc(n_slots, sizeof(*l->pair));
	l->uploads = calloc(2 * n_slots, sizeof(*l->uploads));
	if (!l->host || !l->pair || !l->uploads) {
		snprintf(err, errlen, "out of memory for %llu adapter weights",
			 (unsigned long long)floats);
		return -1;
	}
	float *at = l->host;
	for (size_t i = 0; i < n_slots; i++) {
		const struct pair_src *p = &src[i];
		struct exl_lora_pair *lp = &l->pair[i];

		if (!p->a)
			continue;
		uint64_t r = p->a->ne[1], in = p->a->ne[0], out = p->b->ne[1];
		float *a = at, *b = at + r * in;

		at = b + out * r;
		if (read_f32(p->a, a) || read_f32(p->b, b)) {
			snprintf(err, errlen, "blk.%zu.%s: cannot read its type", i / EXL_LORA_N_TARGETS,
				 target_name[i % EXL_LORA_N_TARGETS]);
			return -1;
		}
		if (upload(l, &lp->a, a, r, in, err, errlen) ||
		    upload(l, &lp->b, b, out, r, err, errlen))
			return -1;
		lp->alpha_over_r = l->alpha > 0.0f ? l->alpha / (float)r : 1.0f;
		if ((int)r > l->max_rank)
			l->max_rank = (int)r;
		l->n_pairs++;
	}
	return 0;
}

static void lora_free(struct exl_lora *l)
{
	for (int i = 0; i < l->n_uploads; i++)
		l->be->ops->unload(l->be, l->uploads[i]);
	free(l->uploads);
	free(l->pair);
	free(l->host);
	free(l->path);
	free(l);
}

struct exl_lora *exl_lora_load(const char *path, const struct exl_model *m, char *err,
			       size_t errlen)
{
	struct exl_lora *l = calloc(1, sizeof(*l));
	struct pair_src *src = NULL;
	struct gguf_file *f = NULL;
	uint64_t floats = 0;
	char msg[512];

	if (!l) {
		snprintf(err, errlen, "%s: out of memory", path);
		return NULL;
	}
	l->be = m->be;
	l->base = m;
	l->n_layer = m->hp.n_layer;
	atomic_init(&l->refs, 1);
	l->path = strdup(path);
	if (!l->path) {
		snprintf(msg, sizeof(msg), "out of memory");
		goto fail;
	}
	f = exl_gguf_open(path, msg, sizeof(msg));
	if (!f)
		goto fail;
	if (check_header(f, m, l, msg, sizeof(msg)))
		goto fail;
	src = calloc((size_t)m->hp.n_layer * EXL_LORA_N_TARGETS, sizeof(*src));
	if (!src) {
		snprintf(msg, sizeof(msg), "out of memory");
		goto fail;
	}
	if (collect(f, m, src, &floats, msg, sizeof(msg)) ||
	    fill(l, m, src, floats, msg, sizeof(msg)))
		goto fail;
	free(src);
	exl_gguf_close(f);
	l->id = atomic_fetch_add(&next_id, 1);
	return l;
fail:
	snprintf(err, errlen, "%s: %s", path, msg);
	free(src);
	if (f)
		exl_gguf_close(f);
	lora_free(l);
	return NULL;
}

void exl_lora_ref(struct exl_lora *l)
{
	atomic_fetch_add(&l->refs, 1);
}

void exl_lora_unref(struct exl_lora *l)
{
	if (l && atomic_fetch_sub(&l->refs, 1) == 1)
		lora_free(l);
}

uint64_t exl_lora_set_key(const struct exl_lora_set *s)
{
	uint64_t h = 0x6c6f7261736b6579ULL;

	if (!s || s->n <= 0)
		return 0;
	for (int i = 0; i < s->n; i++) {
		uint32_t bits;

		memcpy(&bits, &s->use[i].scale, sizeof(bits));
		h ^= s->use[i].lora->id + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
		h ^= (uint64_t)bits + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
		h *= 0xbf58476d1ce4e5b9ULL;
		h ^= h >> 31;
	}
	return h ? h : 1;
}
