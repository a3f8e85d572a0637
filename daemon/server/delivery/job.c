/* A server job's life (job.h). */
#include <pthread.h>
#include <stdlib.h>

#include "daemon/core/generator/generator.h"
#include "daemon/server/delivery/job.h"
#include "daemon/server/delivery/sink.h"

struct exl_uid_stats *exl_uid_stats_get(struct exl_uid_table *t, uid_t uid)
{
	for (struct exl_uid_stats *u = t->head; u; u = u->next)
		if (u->uid == uid)
			return u;
	struct exl_uid_stats *u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->uid = uid;
	atomic_init(&u->jobs, 0);
	u->next = t->head;
	t->head = u;
	return u;
}

void exl_uid_table_free(struct exl_uid_table *t)
{
	while (t->head) {
		struct exl_uid_stats *u = t->head;
		t->head = u->next;
		free(u);
	}
}

struct exl_srv_job *exl_srv_job_create(struct exl_sink *sink, struct exl_uid_stats *uid,
				       int max_jobs, uint64_t id, int *code)
{
	/* Counted first: jobs of other connections of the uid count too,
	 * from their engine threads. */
	if (atomic_fetch_add(&uid->jobs, 1) >= max_jobs) {
		atomic_fetch_sub(&uid->jobs, 1);
		*code = EXL_E_LIMIT;
		return NULL;
	}
	struct exl_srv_job *j = calloc(1, sizeof(*j));
	if (!j) {
		atomic_fetch_sub(&uid->jobs, 1);
		*code = EXL_E_INTERNAL;
		return NULL;
	}
	j->uid = uid;
	j->id = id;
	j->sink = sink;
	exl_sink_ref(sink);
	j->preparing = true;
	/* On the connection's list from now: a cancel finds it while it is
	 * prepared. */
	pthread_mutex_lock(&sink->mu);
	j->sink_next = sink->jobs;
	if (sink->jobs)
		sink->jobs->sink_prev = j;
	sink->jobs = j;
	j->in_sink = true;
	pthread_mutex_unlock(&sink->mu);
	return j;
}

void exl_srv_job_retire(struct exl_srv_job *j)
{
	struct exl_sink *s = j->sink;

	pthread_mutex_lock(&s->mu);
	if (j->in_sink) {
		if (j->sink_prev)
			j->sink_prev->sink_next = j->sink_next;
		else
			s->jobs = j->sink_next;
		if (j->sink_next)
			j->sink_next->sink_prev = j->sink_prev;
		j->in_sink = false;
	}
	pthread_mutex_unlock(&s->mu);
	if (j->uid)
		atomic_fetch_sub(&j->uid->jobs, 1);
	j->uid = NULL;
}

void exl_srv_job_free(struct exl_srv_job *j)
{
	struct exl_sink *s = j->sink;

	exl_srv_job_retire(j);
	if (j->job)
		exl_job_free(j->job);
	exl_sink_unref(s);
	free(j->draft_name);
	free(j->draft_path);
	free(j);
}

struct exl_engine_thread *exl_srv_job_mark_cancel(struct exl_sink *sink, uint64_t id,
						  bool *preparing)
{
	struct exl_engine_thread *et = NULL;

	*preparing = false;
	pthread_mutex_lock(&sink->mu);
	for (struct exl_srv_job *j = sink->jobs; j; j = j->sink_next) {
		if (j->id != id)
			continue;
		et = j->et;
		/* Not on its engine yet: cancelled as it gets there.
		 * preparing is the loop's, as is j until then. */
		if (j->preparing) {
			j->cancel_asked = true;
			*preparing = true;
		}
	}
	pthread_mutex_unlock(&sink->mu);
	return et;
}
