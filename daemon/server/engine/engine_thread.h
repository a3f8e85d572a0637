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

struct exl_backend;
struct exl_mailbox;
struct exl_sink;
struct exl_srv_job;

struct exl_engine_thread {
	pthread_t th;
	bool started;
	struct exl_mailbox *mail;    /* the loop's: EXL_MAIL_ENGINE_EXITED */
	struct exl_engine *eng;
	struct exl_backend *be;      /* eng's model's: draft models open on it */
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

/* Starts a thread running eng (which it does not own), whose model is on
 * be.  NULL with a message on failure. */
struct exl_engine_thread *exl_engine_thread_start(struct exl_mailbox *mail, struct exl_engine *eng,
						  struct exl_backend *be, const char *name,
						  char *err, size_t errlen);
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
/* Closes the thread's copy of the draft model name, if it has one (that
 * model was unloaded); jobs drafting with it go on without. */
int exl_engine_thread_drop_drafter(struct exl_engine_thread *t, const char *name);
/* Loop: a request counted in n_preparing is done with the model; the
 * thread may exit after this (do not touch t again unless it has jobs). */
void exl_engine_thread_prep_done(struct exl_engine_thread *t);
void exl_engine_thread_wake(struct exl_engine_thread *t);

void exl_engine_thread_stats(struct exl_engine_thread *t, struct exl_engine_stats *st);

/* The callbacks of every server job's generator job (user: its
 * exl_srv_job): its stream and result to its connection (deliver.h), and
 * at its end off the thread's live list and freed. */
extern const struct exl_job_callbacks exl_engine_thread_callbacks;

#endif
