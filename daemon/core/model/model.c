/* A model's lifetime: load (metadata, tokenizer, weights), accessors, free. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/lora.h"
#include "daemon/core/model/mapguard.h"
#include "daemon/core/model/model_internal.h"
#include "daemon/core/tokenizer/tokenizer.h"

struct exl_model *exl_model_load(const char *path, struct exl_backend *be,
				 char *err, size_t errlen)
{
	struct exl_model *m;
	char msg[512];

	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "%s: out of memory", path);
		return NULL;
	}
	m->be = be;
	atomic_init(&m->file_fault, 0);
	m->path = strdup(path);
	if (!m->path) {
		snprintf(msg, sizeof(msg), "out of memory");
		goto fail;
	}
	m->gguf = exl_gguf_open(path, msg, sizeof(msg));
	if (!m->gguf)
		goto fail;
	if (stat(path, &m->file_st)) {
		snprintf(msg, sizeof(msg), "stat: %s", strerror(errno));
		goto fail;
	}
	/* every mapping, a split model's parts too: a part truncated under
	 * us reads as zeros and flags the model (mapguard.h) */
	if (m->gguf->mapped) {
		if (exl_mapguard_add(m->gguf->base, m->gguf->size, &m->file_fault, msg, sizeof(msg)))
			goto fail;
		m->guarded = 1;
		for (uint32_t i = 0; i < m->gguf->n_parts; i++) {
			const struct gguf_file *p = m->gguf->parts[i];

			if (exl_mapguard_add(p->base, p->size, &m->file_fault, msg, sizeof(msg)))
				goto fail;
			m->guarded++;
		}
	}
	if (exl_hparams_read(m->gguf, &m->hp, msg, sizeof(msg)))
		goto fail;
	m->tok = exl_tokenizer_load(m->gguf, msg, sizeof(msg));
	if (!m->tok)
		goto fail;
	if (exl_tokenizer_n_vocab(m->tok) != m->hp.n_vocab) {
		snprintf(msg, sizeof(msg), "tokenizer has %d tokens, model %d",
			 exl_tokenizer_n_vocab(m->tok), m->hp.n_vocab);
		goto fail;
	}
	if (exl_model_bind_tensors(m, msg, sizeof(msg)))
		goto fail;
	if (atomic_load(&m->file_fault)) {
		snprintf(msg, sizeof(msg), "the file was truncated while it loaded");
		goto fail;
	}
	return m;
fail:
	snprintf(err, errlen, "%s: %s", path, msg);
	exl_model_free(m);
	return NULL;
}

void exl_model_free(struct exl_model *m)
{
	if (!m)
		return;
	exl_model_scratch_free(m);
	exl_lora_batch_free(m);
	for (int i = 0; i < m->n_uploads; i++)
		m->be->ops->unload(m->be, m->uploads[i]);
	free(m->uploads);
	free(m->layers);
	free(m->experts);
	if (m->tok)
		exl_tokenizer_free(m->tok);
	for (int i = 0; i < m->guarded; i++)
		exl_mapguard_remove(i ? m->gguf->parts[i - 1]->base : m->gguf->base);
	if (m->gguf)
		exl_gguf_close(m->gguf);
	free(m->path);
	free(m);
}

int exl_model_check_file(struct exl_model *m, char *why, size_t whylen)
{
	struct stat st;

	if (atomic_load(&m->file_fault)) {
		snprintf(why, whylen, "%s was truncated while loaded", m->path);
		return 2;
	}
	if (stat(m->path, &st)) {
		/* removed: the mapping keeps the old file whole */
		snprintf(why, whylen, "%s: %s (the loaded copy goes on)", m->path, strerror(errno));
		return 1;
	}
	if (st.st_dev != m->file_st.st_dev || st.st_ino != m->file_st.st_ino) {
		snprintf(why, whylen, "%s was replaced by another file; the loaded one goes on "
			 "until the model is unloaded and loaded again", m->path);
		return 1;
	}
	if (st.st_size != m->file_st.st_size ||
	    st.st_mtim.tv_sec != m->file_st.st_mtim.tv_sec ||
	    st.st_mtim.tv_nsec != m->file_st.st_mtim.tv_nsec) {
		atomic_store(&m->file_fault, 1);
		snprintf(why, whylen, "%s was rewritten in place while loaded", m->path);
		return 2;
	}
	return 0;
}

void exl_model_set_context(struct exl_model *m, int n_ctx)
{
	exl_model_pick_rope_factors(m, n_ctx);
}

const struct exl_hparams *exl_model_hparams(const struct exl_model *m)
{
	return &m->hp;
}

const struct exl_backend *exl_model_backend(const struct exl_model *m)
{
	return m->be;
}

const struct exl_tokenizer *exl_model_tokenizer(const struct exl_model *m)
{
	return m->tok;
}

const struct gguf_file *exl_model_gguf(const struct exl_model *m)
{
	return m->gguf;
}

size_t exl_model_weight_bytes(const struct exl_model *m)
{
	return m->weight_bytes;
}

/* Layers of a model that mixes sliding-window and global attention that
 * are local; 0 for a model with only one kind (one pool serves it). */
static int mixed_local_layers(const struct exl_hparams *hp)
{
	int n_local = 0;

	for (int il = 0; il < hp->n_layer && hp->n_swa > 0; il++)
		n_local += exl_layer_is_swa(hp, il);
	return n_local == hp->n_layer ? 0 : n_local;
}

/* The local pool a mixed model needs: each sequence's window, a page kept
 * behind it and a chunk ahead, for n_seqs sequences (n_seqs <= 0: none
 * given, -1). */
static int64_t local_pool_tokens(const struct exl_hparams *hp, int page_size, int n_seqs,
				 int chunk)
{
	if (n_seqs <= 0 || page_size <= 0)
		return -1;
	int64_t span = ((int64_t)hp->n_swa - 1 + page_size + (chunk > 0 ? chunk : 0) +
			page_size - 1) / page_size + 1;

	return span * page_size * n_seqs;
}

int exl_model_kv_auto_tokens(struct exl_model *m, int page_size, int n_seqs, int chunk,
			     int64_t max_tokens, char *err, size_t errlen)
{
	const struct exl_hparams *hp = &m->hp;
	int n_local = mixed_local_layers(hp);
	int64_t local = local_pool_tokens(hp, page_size, n_seqs, chunk);

	/* As one pool of every layer a position: right when the local pool is
	 * as large as the global one, which exl_model_kvcache_create_for caps
	 * it at (no sequence count, or windows that need more) */
	int all = exl_kvcache_auto_tokens(m->be, hp->n_layer, hp->n_head_kv, hp->head_dim,
					  page_size, max_tokens, err, errlen);

	if (all < 0 || !n_local || local < 0 || local >= all)
		return all;
	/* a smaller local pool leaves the rest to the global layers alone */
	return exl_kvcache_auto_tokens_mixed(m->be, hp->n_layer, n_local, hp->n_head_kv,
					     hp->head_dim, page_size, local, max_tokens, err,
					     errlen);
}

struct exl_kvcache *exl_model_kvcache_create_for(struct exl_model *m, int n_tokens,
						 int page_size, int n_seqs, int chunk, char *err,
						 size_t errlen)
{
	const struct exl_hparams *hp = &m->hp;
	struct exl_kvcache *kv;
	bool *local = NULL;
	int n_local = 0;

	for (int il = 0; il < hp->n_layer && hp->n_swa > 0; il++)
		n_local += exl_layer_is_swa(hp, il);
	if (!mixed_local_layers(hp)) {
		kv = exl_kvcache_create(m->be, hp->n_layer, hp->n_head_kv, hp->head_dim, n_tokens,
					page_size, err, errlen);
		/* Pages behind the window go back from the one pool only when
		 * no layer reads them: a global layer reads every position */
		if (kv && n_local)
			exl_kvcache_set_window(kv, hp->n_swa);
		return kv;
	}
	local = calloc((size_t)hp->n_layer, sizeof(*local));
	if (!local) {
		snprintf(err, errlen, "kv cache: out of memory");
		return NULL;
	}
	for (int il = 0; il < hp->n_layer; il++)
		local[il] = exl_layer_is_swa(hp, il);
	/* the local pool: n_seqs sequences' windows, at most the global pool */
	int64_t local_tokens = n_tokens;
	int64_t want = local_pool_tokens(hp, page_size, n_seqs, chunk);

	if (want >= 0 && want < local_tokens)
		local_tokens = want;
	kv = exl_kvcache_create_mixed(m->be, hp->n_layer, hp->n_head_kv, hp->head_dim, n_tokens,
				      page_size, local, hp->n_swa, (int)local_tokens, err, errlen);
	free(local);
	return kv;
}

struct exl_kvcache *exl_model_kvcache_create(struct exl_model *m, int n_tokens, int page_size,
					     char *err, size_t errlen)
{
	return exl_model_kvcache_create_for(m, n_tokens, page_size, 0, 0, err, errlen);
}
