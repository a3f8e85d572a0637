/* A job's LoRA adapters: checked against its model, referenced for the
 * job's life, and named by its KV sequences (generator_internal.h). */
#include <math.h>
#include <stdio.h>

#include "daemon/core/generator/generator_internal.h"

int exl_job_lora_attach(struct exl_job *job, const struct exl_model *m,
			const struct exl_lora_set *set, char *err, size_t errlen)
{
	job->lora.n = 0;
	job->lora.key = 0;
	if (!set || set->n == 0)
		return 0;
	if (set->n < 0 || set->n > EXL_LORA_MAX_PER_JOB) {
		snprintf(err, errlen, "%d adapters; a job takes at most %d", set->n,
			 EXL_LORA_MAX_PER_JOB);
		return -1;
	}
	for (int i = 0; i < set->n; i++) {
		const struct exl_lora_use *u = &set->use[i];

		if (!u->lora || u->lora->base != m) {
			snprintf(err, errlen, "adapter %d is not loaded for this model", i);
			return -1;
		}
		if (!isfinite(u->scale) || fabsf(u->scale) > 1000.0f) {
			snprintf(err, errlen, "adapter %d: scale %g out of range [-1000, 1000]", i,
				 (double)u->scale);
			return -1;
		}
	}
	for (int i = 0; i < set->n; i++) {
		job->lora.use[i] = set->use[i];
		exl_lora_ref(set->use[i].lora);
	}
	job->lora.n = set->n;
	job->lora.key = exl_lora_set_key(&job->lora);
	return 0;
}

void exl_job_lora_bind_seqs(struct exl_job *job)
{
	for (int i = 0; i < job->n_seqs; i++)
		job->seq[i].kv.lora = job->lora.n ? &job->lora : NULL;
}

void exl_job_lora_detach(struct exl_job *job)
{
	for (int i = 0; i < job->lora.n; i++)
		exl_lora_unref(job->lora.use[i].lora);
	job->lora.n = 0;
}
