/* What the model offers embeddings: how the file says to pool them, and
 * the input embedding row of a token (what `exld embed --token-rows` dumps
 * and what an input embedding block stands in for). */
#include <stdio.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/model/model_internal.h"
#include "kernels/backend_select.h"

enum exl_pooling exl_model_pooling(const struct exl_model *m)
{
	char key[96];
	uint32_t v;

	snprintf(key, sizeof(key), "%s.pooling_type", m->hp.arch_name);
	if (exl_gguf_get_u32(m->gguf, key, &v) && v >= EXL_POOL_MEAN && v <= EXL_POOL_LAST)
		return (enum exl_pooling)v;
	return EXL_POOL_MEAN;
}

int exl_model_token_row(struct exl_model *m, int32_t id, float *out, char *err, size_t errlen)
{
	const struct exl_backend_ops *ops = m->be->ops;
	size_t bytes = (size_t)m->hp.n_embd * sizeof(float);
	float *row;
	int rc = 0;

	if (id < 0 || id >= m->hp.n_vocab) {
		snprintf(err, errlen, "token %d out of range (vocabulary has %d tokens)", (int)id,
			 m->hp.n_vocab);
		return -1;
	}
	row = ops->alloc(m->be, bytes);
	if (!row) {
		snprintf(err, errlen, "cannot allocate a row on backend %s", ops->name);
		return -1;
	}
	ops->embed(m->be, &m->tok_embd, &id, row, 1);
	if (ops->download(m->be, out, row, bytes)) {
		const char *msg = exl_backend_error(m->be);

		snprintf(err, errlen, "backend %s: %s", ops->name,
			 msg && *msg ? msg : "cannot read back the embedding row");
		rc = -1;
	}
	ops->free(m->be, row);
	return rc;
}
