/* Embedding jobs: the prompt's final hidden states (after the output norm,
 * as llama.cpp pools them) pooled into one vector: the mean over every
 * position, the first (cls) or the last, optionally scaled to unit L2
 * norm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/generator/generator_internal.h"

void exl_gen_pool_rows(struct exl_job *job, const float *rows, int n, int pos)
{
	int d = job->n_embd, last = job->seq[0].prompt_len - 1;

	for (int r = 0; r < n; r++) {
		const float *x = rows + (size_t)r * (size_t)d;
		int at = pos + r;

		if (job->pooling == EXL_POOL_MEAN) {
			for (int k = 0; k < d; k++)
				job->pool_acc[k] += x[k];
		} else if ((job->pooling == EXL_POOL_CLS && at == 0) ||
			   (job->pooling == EXL_POOL_LAST && at == last)) {
			for (int k = 0; k < d; k++)
				job->pool_acc[k] = x[k];
		}
	}
}

void exl_gen_pool_finish(struct exl_job *job)
{
	int d = job->n_embd;
	double div = job->pooling == EXL_POOL_MEAN ? job->seq[0].prompt_len : 1.0, ss = 0.0;

	for (int k = 0; k < d; k++) {
		double v = job->pool_acc[k] / div;

		job->pooled[k] = (float)v;
		ss += v * v;
	}
	if (!isfinite(ss)) {
		exl_job_end(job, EXL_STOP_ERROR, "the embedding is not finite");
		return;
	}
	if (job->normalize && ss > 0.0) {
		double inv = 1.0 / sqrt(ss);

		for (int k = 0; k < d; k++)
			job->pooled[k] = (float)(job->pool_acc[k] / div * inv);
	}
	exl_job_end(job, EXL_STOP_MAX_NEW_TOKENS, NULL);
}
