/* A model's lifetime: load (metadata, tokenizer, weights), accessors, free. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/gguf.h"
#include "daemon/kvcache.h"
#include "daemon/model_internal.h"
#include "daemon/tokenizer.h"

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
	m->gguf = gguf_open(path, msg, sizeof(msg));
	if (!m->gguf)
		goto fail;
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
	for (int i = 0; i < m->n_uploads; i++)
		m->be->ops->unload(m->be, m->uploads[i]);
	free(m->uploads);
	free(m->layers);
	if (m->tok)
		exl_tokenizer_free(m->tok);
	if (m->gguf)
		gguf_close(m->gguf);
	free(m);
}

const struct exl_hparams *exl_model_hparams(const struct exl_model *m)
{
	return &m->hp;
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

struct exl_kvcache *exl_model_kvcache_create(struct exl_model *m, int n_tokens, int page_size,
					     char *err, size_t errlen)
{
	return exl_kvcache_create(m->be, m->hp.n_layer, m->hp.n_head_kv, m->hp.head_dim,
				  n_tokens, page_size, err, errlen);
}
