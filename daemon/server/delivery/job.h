/* A generate request's job as the server tracks it, from the request to
 * its result: one owner for its whole life.
 *
 *   conn.c        exl_srv_job_create: counted in its uid's jobs, on its
 *                 connection's live list (so a cancel finds it), while
 *                 the prep pool makes its exl_job (prep.h);
 *   engine thread queued, stepped, its stream delivered (deliver.c);
 *   deliver.c     exl_srv_job_retire before its result goes out: off the
 *                 connection's list, its uid's count lowered;
 *   whoever holds it last: exl_srv_job_free.
 *
 * The uid table counts each uid's connections and jobs over all its
 * connections; an entry lives as long as the table, so a job may point at
 * its uid's.
 */
#ifndef EXL_SRV_JOB_H
#define EXL_SRV_JOB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/server/wire/protocol.h"

struct exl_job;
struct exl_sink;
struct exl_engine_thread;

struct exl_uid_stats {
	struct exl_uid_stats *next;
	uid_t uid;
	atomic_int jobs;          /* any thread */
	int conns;                /* open connections (loop thread only) */
};

struct exl_uid_table {
	struct exl_uid_stats *head;
};

/* Loop thread.  uid's entry, made on first use; NULL when out of memory. */
struct exl_uid_stats *exl_uid_stats_get(struct exl_uid_table *t, uid_t uid);
void exl_uid_table_free(struct exl_uid_table *t);

struct exl_srv_job {
	struct exl_srv_job *next, *prev;           /* the engine thread's live list */
	struct exl_srv_job *sink_next, *sink_prev; /* the sink's live list (sink->mu) */
	bool in_sink;                              /* on that list (sink->mu) */
	struct exl_job *job;         /* the generator's job, once prepared */
	uint64_t id;                 /* the wire job id */
	struct exl_sink *sink;       /* a reference */
	struct exl_engine_thread *et;
	const char *model;           /* its engine thread's name (outlives the job) */
	struct exl_uid_stats *uid;   /* its jobs count includes this job */
	struct exl_packed_id req_id;
	enum exl_stream stream;      /* RING, SOCKET or NONE */
	bool return_text;
	char *draft_name;            /* draft_model: its name and file (conn.c checked */
	char *draft_path;            /* it is loaded); NULL when none */
	bool embed;                  /* an embed request's: no accepted reply; the
				      * result is the embed reply */
	/* loop thread only: job is still being made (prep.h), not yet on
	 * the engine; a cancel that came meanwhile */
	bool preparing;
	bool cancel_asked;
	/* engine thread only */
	bool paused;
	uint64_t pause_need;         /* payload bytes of the chunk that did not fit */
	char fail[256];              /* why the daemon ended it, when it did */
};

/* Loop thread.  A job of sink's connection, counted in uid's jobs (up to
 * max_jobs) and on the sink's live list, preparing.  NULL with *code
 * EXL_E_LIMIT (uid has max_jobs) or EXL_E_INTERNAL (out of memory). */
struct exl_srv_job *exl_srv_job_create(struct exl_sink *sink, struct exl_uid_stats *uid,
				       int max_jobs, uint64_t id, int *code);
/* Off the sink's list and out of its uid's count; idempotent, any thread. */
void exl_srv_job_retire(struct exl_srv_job *j);
/* Retires j and frees it with its generator job and sink reference. */
void exl_srv_job_free(struct exl_srv_job *j);

/* Loop thread: the engine thread running (or to run) sink's job id, NULL
 * when the connection has no such job.  A job still being prepared is
 * marked to be cancelled as it reaches its engine (*preparing set). */
struct exl_engine_thread *exl_srv_job_mark_cancel(struct exl_sink *sink, uint64_t id,
						  bool *preparing);

#endif
