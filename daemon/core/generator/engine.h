/* The continuous batching engine: every job on one model, advanced together
 * one batched forward pass at a time.
 *
 * Each exl_engine_step() builds one batch: one token (two with CFG) for
 * every running job, then chunks of waiting prompts (at most prefill_chunk
 * tokens of one prompt per step) while the batch has room
 * (max_batch_tokens).  New jobs join between steps; a job that ends leaves
 * at once, gets its on_done and gives its KV pages back.  A job is admitted
 * only when the KV pool can hold its whole length (prompt + max_new_tokens,
 * less what prefix sharing reuses) beside the running jobs' remaining
 * needs, and, for a model with a local pool (kvcache.h), when that pool
 * can hold the window of each of its sequences beside theirs; until then
 * it stays queued, in order.  A job whose prompt leaves
 * no room in the context (max_seq_len) or does not fit the whole pool is
 * refused by exl_engine_add; one whose prompt + max_new_tokens is longer
 * gets what fits and ends with reason max_context.  A job whose consumer is
 * full (paused) gives up its slot and reservation as soon as the queue's
 * head needs them, keeping its pages until the head needs those too; it
 * queues again when its consumer reads, behind fresh jobs for at most
 * resume_yield seconds (make_room and enqueue in engine.c).
 *
 * The engine uses a model and a KV cache it does not own.  Everything here
 * runs on the one engine thread (the model, the cache and the jobs belong
 * to it); only exl_job_cancel() and exl_job_resume() may be called from
 * other threads.
 */
#ifndef EXL_ENGINE_H
#define EXL_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/core/generator/generator.h"

struct exl_model;
struct exl_kvcache;
struct exl_engine;
struct exl_drafter;
struct exl_backend;

struct exl_engine_config {
	int max_batch_tokens; /* 512: tokens in one forward pass */
	int prefill_chunk;    /* 256: prompt tokens of one job per step */
	int max_jobs;         /* 64: running (admitted) jobs; more wait queued */
	int max_seq_len;      /* 0: the model's training context; prompt + output bound */
	double suspend_after; /* 0: seconds a paused job keeps its slot and reservation
			       * while the queue's head waits for them */
	double resume_yield;  /* 1.0: seconds a suspended job that can go on again lets
			       * jobs that never ran go ahead of it */
	double step_target;   /* 0 (off): seconds a step should take; prompt chunks are cut
			       * to fit at the measured cost of a token */
	int spec_rows;        /* 0: the backend's cheap_rows; speculative proposals are
			       * verified only while a pass's decode rows stay within it */
};

void exl_engine_config_init(struct exl_engine_config *c);

/* The context a job of an engine on m with config c has: c->max_seq_len,
 * or when 0 the model's training context (4096 when the file gives none).
 * A prompt this long or longer is refused; prompt + output never pass it. */
int exl_engine_max_seq_len(const struct exl_model *m, const struct exl_engine_config *c);

struct exl_engine *exl_engine_create(struct exl_model *m, struct exl_kvcache *kv,
				     const struct exl_engine_config *c, char *err, size_t errlen);
/* Ends every remaining job with reason shutdown, then frees the engine. */
void exl_engine_free(struct exl_engine *e);

/* Queues job.  Returns 0, or -1 with a message when the job can never run
 * here: its prompt (the longer one, with CFG) has max_seq_len tokens or
 * more, or does not fit the whole KV pool.  The job is then not the
 * engine's and gets no callbacks.  max_new_tokens is never a reason: the
 * output is cut to what the context and the pool hold.  An embedding
 * model's engine (exl_engine_embeds_only) takes embedding jobs only, each
 * text no longer than a batch. */
int exl_engine_add(struct exl_engine *e, struct exl_job *job, char *err, size_t errlen);

/* Whether e's model is an encoder (bert, nomic-bert): it embeds and
 * cannot generate. */
bool exl_engine_embeds_only(const struct exl_engine *e);

/* Runs one step: ends cancelled jobs, admits queued ones, runs one forward
 * pass over every job that can advance and samples.  Returns the number of
 * tokens in the forward pass (0 when nothing could run: no jobs, or every
 * job paused or waiting for KV pages), or -1 with a message when the
 * forward pass failed (the jobs in that batch then ended with reason
 * error). */
int exl_engine_step(struct exl_engine *e, char *err, size_t errlen);

/* True when a step would do something (a job is queued or running and not
 * paused, or a cancel is pending). */
bool exl_engine_has_work(const struct exl_engine *e);

/* Ends every job, running or queued, with reason (e.g. EXL_STOP_UNLOADED,
 * EXL_STOP_SHUTDOWN). */
void exl_engine_end_all(struct exl_engine *e, enum exl_stop_reason reason);

struct exl_engine_stats {
	int active;               /* admitted jobs (running, prefilling or paused) */
	int paused;               /* of active: consumer full (suspended ones included) */
	int suspended;            /* of paused: gave their slot back (their pages go when needed) */
	int queued;               /* waiting for admission */
	uint64_t prompt_tokens;   /* totals since creation */
	uint64_t generated_tokens;
	uint64_t recomputed_tokens; /* positions computed again after their pages were reclaimed */
	uint64_t steps;
	uint64_t draft_proposed;  /* speculative decoding: tokens proposed, */
	uint64_t draft_accepted;  /* and of them taken as the model's own */
	double tokens_per_s;      /* generated tokens per second over the last few seconds */
	double prompt_tokens_per_s;
	int kv_pages_free;
	int kv_pages_total;
	/* the local pool of a model that mixes sliding-window and global
	 * layers (kvcache.h, exl_kvcache_create_mixed); 0 and 0 without one */
	int kv_local_pages_free;
	int kv_local_pages_total;
};

void exl_engine_stats(const struct exl_engine *e, struct exl_engine_stats *st);

/* Speculative decoding with a draft model (drafter.h).  The engine owns d
 * from this call on, also when it fails (-1 with a message: a drafter of
 * that name is open already, or there are MAX_DRAFTERS).  Jobs name it by
 * its name (draft_model); exl_engine_add refuses a job naming one that is
 * not open. */
int exl_engine_attach_drafter(struct exl_engine *e, struct exl_drafter *d, char *err,
			      size_t errlen);
bool exl_engine_has_drafter(const struct exl_engine *e, const char *name);
/* Opens the GGUF at path on be (the engine's model's backend) as the
 * drafter name and attaches it: its KV pool as large as the engine's,
 * its passes at most max_batch_tokens.  -1 with a message. */
int exl_engine_open_drafter(struct exl_engine *e, const char *name, const char *path,
			    struct exl_backend *be, char *err, size_t errlen);
/* Closes the drafter name if open; its jobs go on without proposals (their
 * output is the same, only slower). */
void exl_engine_drop_drafter(struct exl_engine *e, const char *name);

#endif
