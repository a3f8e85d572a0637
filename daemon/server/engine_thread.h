/* One engine thread per loaded model: it owns the model's engine (and so
 * the model, its KV cache and every job on it), runs the continuous
 * batching step loop, delivers each job's stream and result to its
 * connection's sink, and keeps a heartbeat for the systemd watchdog.
 *
 * Other threads talk to it only through its command queue (a mutex and an
 * eventfd): add a job, cancel a job or a connection's jobs, wake up
 * (a client freed ring room), unload, shut down.  A job arrives made: its
 * prompt tokenized and its constraint compiled off the loop and off this
 * thread (prep.h), so a huge prompt never stalls the model's streams.
 */
#ifndef EXL_ENGINE_THREAD_H
#define EXL_ENGINE_THREAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/clock.h"

#include "daemon/core/generator/engine.h"
#include "daemon/server/wire/protocol.h"

struct exl_server;
struct exl_sink;
struct exl_uid_stats;
struct exl_engine_thread;

/* A generate request's job, as the daemon tracks it. */
struct exl_srv_job {
	struct exl_srv_job *next, *prev;           /* the engine thread's live list */
	struct exl_srv_job *sink_next, *sink_prev; /* the sink's live list (sink->mu) */
	bool in_sink;                              /* on that list (sink->mu) */
	struct exl_job *job;
	uint64_t id;                 /* the wire job id */
	struct exl_sink *sink;       /* a reference */
	struct exl_engine_thread *et;
	struct exl_uid_stats *uid;   /* its jobs count includes this job */
	struct exl_packed_id req_id;
	enum exl_stream stream;      /* RING, SOCKET or NONE */
	bool return_text;
	int n_vocab;
	/* loop thread only: job is still being made (prep.h), not yet on
	 * the engine; a cancel that came meanwhile */
	bool preparing;
	bool cancel_asked;
	/* engine thread only */
	bool paused;
	uint64_t pause_need;         /* payload bytes of the chunk that did not fit */
	char fail[256];              /* why the daemon ended it, when it did */
};

struct exl_engine_thread {
	pthread_t th;
	bool started;
	struct exl_server *srv;
	struct exl_engine *eng;
	char name[EXL_MAX_NAME + 1];
	int efd;                     /* wakes the thread */

	pthread_mutex_t mu;          /* guards the queue and stats */
	struct exl_cmd *head, *tail;
	struct exl_engine_stats stats;

	atomic_uint_fast64_t heartbeat_ns; /* CLOCK_MONOTONIC of the last loop turn */
	atomic_int n_jobs;           /* live jobs, and jobs posted but not yet run_add'ed */
	/* Requests of this model being prepared (prep.h): while any is, the
	 * thread does not exit, so the model and its tokenizer, which they
	 * use, are not freed under them.  The loop counts them in and out. */
	atomic_int n_preparing;
	/* 0, or EXL_E_BUSY / EXL_E_SHUTDOWN once an unload / shutdown was
	 * posted: requests not yet prepared are refused with it. */
	atomic_int refusing;

	/* engine thread only */
	struct exl_srv_job *jobs;
	bool unloading, stopping;
	bool unload_cancel;
};

/* Starts a thread running eng (which it does not own).  NULL with a
 * message on failure. */
struct exl_engine_thread *exl_engine_thread_start(struct exl_server *srv, struct exl_engine *eng,
						  const char *name, char *err, size_t errlen);
/* Waits for the thread (after it posted EXL_MAIL_ENGINE_EXITED) and frees it. */
void exl_engine_thread_join(struct exl_engine_thread *t);

/* Any thread.  Each returns -1 when out of memory. */
int exl_engine_thread_add(struct exl_engine_thread *t, struct exl_srv_job *j);
int exl_engine_thread_cancel_job(struct exl_engine_thread *t, uint64_t job_id);
int exl_engine_thread_cancel_sink(struct exl_engine_thread *t, struct exl_sink *sink);
/* Ends the jobs (cancel) or lets them finish, then the thread exits. */
int exl_engine_thread_unload(struct exl_engine_thread *t, bool cancel);
/* Ends every job with reason shutdown; the thread exits. */
int exl_engine_thread_shutdown(struct exl_engine_thread *t);
/* Loop: a request counted in n_preparing is done with the model; the
 * thread may exit after this (do not touch t again unless it has jobs). */
void exl_engine_thread_prep_done(struct exl_engine_thread *t);
void exl_engine_thread_wake(struct exl_engine_thread *t);

/* Engine thread: drops an ended job from the live list. */
void exl_engine_thread_forget(struct exl_engine_thread *t, struct exl_srv_job *j);

void exl_engine_thread_stats(struct exl_engine_thread *t, struct exl_engine_stats *st);

/* deliver.c: the job callbacks (engine thread). */
extern const struct exl_job_callbacks exl_deliver_callbacks;
/* Frees a job that never reached an engine (loop thread or engine thread). */
void exl_srv_job_free(struct exl_srv_job *j);
/* Whether a paused job's consumer has room again (engine thread). */
bool exl_deliver_has_room(struct exl_srv_job *j);
/* Queues the generate reply for j (accepted). */
void exl_deliver_accepted(struct exl_srv_job *j);
/* Sends an error reply for j's request (not accepted). */
void exl_deliver_refused(struct exl_srv_job *j, int code, const char *message);

#endif
