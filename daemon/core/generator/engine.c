/* Continuous batching: admission by KV pages, one forward pass per step over
 * every job that can advance, then sampling and streaming per job.
 *
 * Admission and clients that stop reading.  A job whose consumer's ring is
 * full is paused: it stays admitted, with its slot, its reservation (the
 * pages it still needs to reach its full length) and its KV pages, so that
 * it goes on at once when its consumer reads.  When the queue's head
 * cannot be admitted, paused jobs give up their slot and their reservation
 * (they are suspended) but keep their pages, longest paused first, until
 * the head fits; only when that is not enough do suspended jobs give their
 * pages back too (reclaimed), longest suspended first.  Reclaimed pages
 * that are full stay registered in the prefix cache, so a reclaimed job
 * that resumes maps back what no one has overwritten since and recomputes
 * the rest.  A suspended job whose consumer reads again queues behind the
 * jobs that never ran, for at most resume_yield seconds (see enqueue).  See
 * docs/configuration.md, "A client that stops reading: admission". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/generator/drafter.h"
#include "daemon/core/generator/engine.h"
#include "daemon/core/generator/generator_internal.h"
#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/model.h"
#include "daemon/core/util/log.h"

#define RATE_WINDOW 64     /* steps remembered for tokens/s */
#define RATE_SECONDS 5.0
/* Steps of at least this many tokens measure the cost of a token, and a
 * step never cuts prompts below it (so they always advance). */
#define STEP_MIN_PREFILL 16
/* Draft models one engine may hold. */
#define MAX_DRAFTERS 8
/* A job whose proposals keep failing stops proposing, and tries one
 * proposal again after this many steps. */
#define DRAFT_PROBE_EVERY 8

struct batch_job {
	struct exl_job *job;
	int row[2];           /* first logits row of seq[0] and seq[1]; -1 when none */
	int n_rows;           /* rows per sequence: 1 + the drafted tokens fed */
	int pos0[2];          /* each sequence's positions before the pass */
	int hrow, n_hrows;    /* an embedding job's hidden rows */
};

struct rate_mark {
	double t;
	uint64_t gen;
	uint64_t prompt;
};

struct exl_engine {
	struct exl_model *m;
	struct exl_kvcache *kv;
	struct exl_engine_config cfg;
	bool encoder;  /* an embedding model's: texts go whole into a step */
	int n_vocab;
	int page_size;
	int n_pages;
	/* The local pool of a model that mixes sliding-window and global
	 * layers (0 pages without one): each sequence holds at most lspan
	 * of its pages (exl_kvcache_local_span of a whole batch ahead). */
	int n_lpages;
	int lspan;

	struct exl_job **queue;
	int n_queue;
	int cap_queue;
	struct exl_job **active;   /* in admission order */
	int n_active;
	/* Jobs whose consumer stopped reading and that gave their slot and
	 * reservation back while others waited; they keep their KV pages until
	 * reclaimed (see make_room). */
	struct exl_job **suspended;
	int n_suspended;
	int cap_suspended;
	/* make_room's scratch: the paused jobs it may suspend, and per page
	 * the references they and the other jobs out of the batch hold (all
	 * zero between calls) */
	struct exl_job **cand;
	int32_t *held_refs;
	int32_t *held_lrefs;       /* the same for the local pool's pages */

	/* the batch being built */
	int32_t *tokens;
	int32_t *seq;
	bool *want;
	bool *want_hidden;
	const float **embd_rows;   /* input embedding rows, or NULL for a token */
	bool any_embd;
	int n_hidden;
	float *hidden;             /* [max_batch_tokens][n_embd], made on first use */
	struct exl_kv_seq **seqs;
	int n_tokens;
	int n_seqs;
	int n_rows;
	struct batch_job *bj;
	int n_bj;
	float *logits;
	int cap_rows;
	int rr;

	double sec_per_token;      /* forward pass seconds per batch token, 0: unknown */

	struct exl_drafter *drafters[MAX_DRAFTERS];
	int n_drafters;
	struct exl_job **dj;       /* propose's scratch: one drafter's jobs */
	uint64_t draft_proposed;
	uint64_t draft_accepted;

	uint64_t prompt_tokens;
	uint64_t generated_tokens;
	uint64_t recomputed_tokens; /* positions computed again after a reclaim */
	uint64_t steps;
	struct rate_mark marks[RATE_WINDOW];
	int n_marks;
	int mark_head;
};

void exl_engine_config_init(struct exl_engine_config *c)
{
	c->max_batch_tokens = 512;
	c->prefill_chunk = 256;
	c->max_jobs = 64;
	c->max_seq_len = 0;
	c->suspend_after = 0.0;
	c->resume_yield = 1.0;
	c->step_target = 0.0;
	c->spec_rows = 0;
}

int exl_engine_max_seq_len(const struct exl_model *m, const struct exl_engine_config *c)
{
	const struct exl_hparams *hp = exl_model_hparams(m);

	if (c->max_seq_len)
		return c->max_seq_len;
	return hp->n_ctx_train > 0 ? hp->n_ctx_train : 4096;
}

struct exl_engine *exl_engine_create(struct exl_model *m, struct exl_kvcache *kv,
				     const struct exl_engine_config *c, char *err, size_t errlen)
{
	struct exl_engine *e;
	const struct exl_hparams *hp = exl_model_hparams(m);

	if (c->max_batch_tokens < 2 || c->max_batch_tokens > 1 << 16) {
		snprintf(err, errlen, "max_batch_tokens must be in [2, 65536] (got %d)",
			 c->max_batch_tokens);
		return NULL;
	}
	if (c->prefill_chunk < 1 || c->prefill_chunk > c->max_batch_tokens) {
		snprintf(err, errlen, "prefill_chunk must be in [1, max_batch_tokens = %d] (got %d)",
			 c->max_batch_tokens, c->prefill_chunk);
		return NULL;
	}
	if (c->max_jobs < 1 || c->max_jobs > c->max_batch_tokens / 2) {
		snprintf(err, errlen, "max_jobs must be in [1, max_batch_tokens / 2 = %d] (got %d)",
			 c->max_batch_tokens / 2, c->max_jobs);
		return NULL;
	}
	if (c->max_seq_len < 0 || c->max_seq_len > 1 << 24) {
		snprintf(err, errlen, "max_seq_len must be in [0, 16777216] (got %d)", c->max_seq_len);
		return NULL;
	}
	if (!(c->step_target >= 0.0 && c->step_target <= 3600.0)) {
		snprintf(err, errlen, "step_target must be in [0, 3600] seconds (got %g)",
			 c->step_target);
		return NULL;
	}
	if (!(c->suspend_after >= 0.0 && c->suspend_after <= 86400.0)) {
		snprintf(err, errlen, "suspend_after must be in [0, 86400] seconds (got %g)",
			 c->suspend_after);
		return NULL;
	}
	if (!(c->resume_yield >= 0.0 && c->resume_yield <= 86400.0)) {
		snprintf(err, errlen, "resume_yield must be in [0, 86400] seconds (got %g)",
			 c->resume_yield);
		return NULL;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		goto oom;
	e->m = m;
	e->kv = kv;
	e->encoder = exl_model_hparams(m)->encoder;
	e->cfg = *c;
	e->cfg.max_seq_len = exl_engine_max_seq_len(m, c);
	/* rope factors that depend on how long a sequence may grow (phi3's
	 * long and short ones) follow the context this engine serves */
	exl_model_set_context(m, e->cfg.max_seq_len);
	/* An encoder reads each text in one pass: its batches grow to its
	 * context (nomic-embed-text's 2048), so that a text the model takes
	 * is never refused or cut for the batch's sake. */
	if (e->encoder && e->cfg.max_batch_tokens < e->cfg.max_seq_len)
		e->cfg.max_batch_tokens = e->cfg.max_seq_len < 1 << 16 ? e->cfg.max_seq_len : 1 << 16;
	c = &e->cfg;
	e->n_vocab = hp->n_vocab;
	e->page_size = exl_kvcache_page_size(kv);
	e->n_pages = exl_kvcache_n_pages(kv);
	e->n_lpages = exl_kvcache_local_n_pages(kv);
	e->lspan = exl_kvcache_local_span(kv, c->max_batch_tokens);
	e->active = calloc((size_t)c->max_jobs, sizeof(*e->active));
	e->tokens = malloc((size_t)c->max_batch_tokens * sizeof(*e->tokens));
	e->seq = malloc((size_t)c->max_batch_tokens * sizeof(*e->seq));
	e->want = malloc((size_t)c->max_batch_tokens * sizeof(*e->want));
	e->want_hidden = malloc((size_t)c->max_batch_tokens * sizeof(*e->want_hidden));
	e->embd_rows = malloc((size_t)c->max_batch_tokens * sizeof(*e->embd_rows));
	/* Every sequence of a pass has a token in it (a job's one or two, a
	 * beam search's live beams, up to 16): at most max_batch_tokens. */
	e->seqs = malloc((size_t)c->max_batch_tokens * sizeof(*e->seqs));
	e->bj = malloc((size_t)c->max_jobs * sizeof(*e->bj));
	e->cand = malloc((size_t)c->max_jobs * sizeof(*e->cand));
	e->held_refs = calloc((size_t)e->n_pages, sizeof(*e->held_refs));
	e->held_lrefs = calloc((size_t)e->n_lpages + 1, sizeof(*e->held_lrefs));
	e->dj = malloc((size_t)c->max_jobs * sizeof(*e->dj));
	if (!e->active || !e->tokens || !e->seq || !e->want || !e->seqs || !e->bj || !e->cand ||
	    !e->held_refs || !e->held_lrefs || !e->dj || !e->want_hidden || !e->embd_rows)
		goto oom;
	return e;
oom:
	snprintf(err, errlen, "out of memory for the engine");
	exl_engine_free(e);
	return NULL;
}

void exl_engine_free(struct exl_engine *e)
{
	if (!e)
		return;
	exl_engine_end_all(e, EXL_STOP_SHUTDOWN);
	free(e->queue);
	free(e->active);
	free(e->suspended);
	free(e->tokens);
	free(e->seq);
	free(e->want);
	free(e->want_hidden);
	free(e->embd_rows);
	free(e->hidden);
	free(e->seqs);
	free(e->bj);
	free(e->cand);
	free(e->held_refs);
	free(e->held_lrefs);
	free(e->logits);
	for (int i = 0; i < e->n_drafters; i++)
		exl_drafter_free(e->drafters[i]);
	free(e->dj);
	free(e);
}

static int pages_for(int positions, int page_size)
{
	return (int)(((int64_t)positions + page_size - 1) / page_size);
}

/* Positions a sequence of prompt p stores for g new tokens: the last
 * token is sampled, never fed back. */
static int seq_positions(int p, int g)
{
	return g > 0 ? p + g - 1 : p;
}

/* Pages a job of g new tokens takes when nothing is shared. */
static int64_t job_pages(const struct exl_job *job, int g, int page_size)
{
	int64_t n = 0;

	if (job->beam)
		return exl_beam_pages(job, g, page_size);
	for (int i = 0; i < job->n_seqs; i++)
		n += pages_for(seq_positions(job->seq[i].prompt_len, g), page_size);
	return n;
}

/* The KV sequences of job: seq[0..n_seqs), then its live beams'; NULL
 * past the last. */
static const struct exl_kv_seq *job_seq(const struct exl_job *job, int k)
{
	if (k < job->n_seqs)
		return &job->seq[k].kv;
	return exl_beam_live_kv(job, k - job->n_seqs);
}

/* Local pages job of g new tokens may hold at once: for each sequence it
 * runs (its beams, once they start, in place of seq[0]) lspan, or the
 * pages of its whole length when fewer. */
static int64_t job_local_bound(const struct exl_engine *e, const struct exl_job *job, int g)
{
	int64_t n = 0;

	if (job->beam) {
		int64_t per = pages_for(seq_positions(job->seq[0].prompt_len, g), e->page_size) + 1;

		return (int64_t)exl_beam_width(job) * (per < e->lspan ? per : e->lspan);
	}
	for (int i = 0; i < job->n_seqs; i++) {
		int64_t per = pages_for(seq_positions(job->seq[i].prompt_len, g), e->page_size);

		n += per < e->lspan ? per : e->lspan;
	}
	return n;
}

/* Queues job by its t_rank, behind every job of the same or an earlier
 * rank; -1 when out of memory.  A fresh job ranks by when it was added.  A
 * suspended job that can go on again ranks resume_yield seconds after that
 * moment (requeue_suspended): jobs that never ran go ahead of it, which is
 * what keeps clients that keep stopping from delaying everyone, but only
 * those that come within resume_yield, so it cannot starve either. */
static int enqueue(struct exl_engine *e, struct exl_job *job)
{
	int at = e->n_queue;

	if (e->n_queue == e->cap_queue) {
		int cap = e->cap_queue * 2 + 16;
		struct exl_job **q = realloc(e->queue, (size_t)cap * sizeof(*q));

		if (!q)
			return -1;
		e->queue = q;
		e->cap_queue = cap;
	}
	while (at > 0 && e->queue[at - 1]->t_rank > job->t_rank)
		at--;
	memmove(e->queue + at + 1, e->queue + at, (size_t)(e->n_queue - at) * sizeof(*e->queue));
	e->queue[at] = job;
	e->n_queue++;
	return 0;
}

static struct exl_drafter *find_drafter(const struct exl_engine *e, const char *name)
{
	for (int i = 0; i < e->n_drafters; i++)
		if (!strcmp(exl_drafter_name(e->drafters[i]), name))
			return e->drafters[i];
	return NULL;
}

bool exl_engine_embeds_only(const struct exl_engine *e)
{
	return e->encoder;
}

int exl_engine_add(struct exl_engine *e, struct exl_job *job, char *err, size_t errlen)
{
	int longest = 0;

	const struct exl_hparams *hp = exl_model_hparams(e->m);

	if (job->state != EXL_JOB_NEW) {
		snprintf(err, errlen, "job was already added to an engine");
		return -1;
	}
	/* an encoder reads a text in one pass: no longer than a batch */
	if (job->truncate)
		exl_gen_truncate(job, e->encoder && e->cfg.max_batch_tokens < e->cfg.max_seq_len ?
				 e->cfg.max_batch_tokens : e->cfg.max_seq_len);
	for (int i = 0; i < job->n_seqs; i++)
		if (job->seq[i].prompt_len > longest)
			longest = job->seq[i].prompt_len;
	/* An encoder reads a text whole, in one pass: its attention sees
	 * every position of it. */
	if (hp->encoder && !job->pooling) {
		snprintf(err, errlen, "%s is an embedding model (%s): it embeds text and "
			 "does not generate", hp->name[0] ? hp->name : "this model", hp->arch_name);
		return -1;
	}
	if (hp->encoder && longest > e->cfg.max_batch_tokens) {
		snprintf(err, errlen, "text of %d tokens is longer than the %d an embedding model "
			 "reads in one pass (max_batch_tokens)", longest, e->cfg.max_batch_tokens);
		return -1;
	}
	if (job->pooling && longest > e->cfg.max_seq_len) {
		snprintf(err, errlen, "text of %d tokens does not fit the context of %d tokens",
			 longest, e->cfg.max_seq_len);
		return -1;
	}
	if (!job->pooling && longest >= e->cfg.max_seq_len) {
		snprintf(err, errlen, "prompt of %d tokens does not fit the context of %d tokens",
			 longest, e->cfg.max_seq_len);
		return -1;
	}
	if (job_pages(job, 1, e->page_size) > e->n_pages) {
		snprintf(err, errlen, "prompt of %d tokens does not fit in the KV cache (it needs "
			 "%lld pages of %d tokens; the cache has %d)", longest,
			 (long long)job_pages(job, 1, e->page_size), e->page_size, e->n_pages);
		return -1;
	}
	if (e->n_lpages && job_local_bound(e, job, 1) > e->n_lpages) {
		snprintf(err, errlen, "the job's sliding windows do not fit the local KV pool (it "
			 "needs %lld pages of %d tokens; the pool has %d)",
			 (long long)job_local_bound(e, job, 1), e->page_size, e->n_lpages);
		return -1;
	}
	/* Room for output: what the context and the whole pool allow. */
	int g = job->max_new_tokens;

	if (g > e->cfg.max_seq_len - longest)
		g = e->cfg.max_seq_len - longest;
	if (job_pages(job, g, e->page_size) > e->n_pages) {
		int lo = 0, hi = g;

		while (lo < hi) {
			int mid = lo + (hi - lo + 1) / 2;

			if (job_pages(job, mid, e->page_size) <= e->n_pages)
				lo = mid;
			else
				hi = mid - 1;
		}
		g = lo;
	}
	if (e->n_lpages && job_local_bound(e, job, g) > e->n_lpages) {
		int lo = 0, hi = g;

		/* a local pool smaller than the job's windows at full length */
		while (lo < hi) {
			int mid = lo + (hi - lo + 1) / 2;

			if (job_local_bound(e, job, mid) <= e->n_lpages)
				lo = mid;
			else
				hi = mid - 1;
		}
		g = lo;
	}
	if (job->draft.model) {
		job->draft.drafter = find_drafter(e, job->draft.model);
		if (!job->draft.drafter) {
			snprintf(err, errlen, "draft model '%s' is not open for this model",
				 job->draft.model);
			return -1;
		}
	}
	job->t_added = exl_now_s();
	job->t_rank = job->t_added;
	if (enqueue(e, job)) {
		snprintf(err, errlen, "out of memory queueing the job");
		return -1;
	}
	job->gen_limit = g;
	job->state = EXL_JOB_QUEUED;
	return 0;
}

/* Pages seq still has to take to reach its full length. */
static int seq_outstanding(const struct exl_engine *e, const struct exl_job *job, int i)
{
	const struct exl_gen_seq *q = &job->seq[i];
	int full = seq_positions(q->prompt_len, job->gen_limit);

	return exl_kv_seq_pages_needed(e->kv, &q->kv, full - q->kv.n_pos);
}

static int64_t job_outstanding(const struct exl_engine *e, const struct exl_job *job)
{
	int64_t n = 0;

	if (job->beam)
		return exl_beam_outstanding(job, e->kv, job->gen_limit, e->held_refs);

	for (int i = 0; i < job->n_seqs; i++)
		n += seq_outstanding(e, job, i);
	return n;
}

/* Local pages job may still take: its bound less the pages only its own
 * sequences reference (a page it shares with another job is that job's
 * too, and may stay when job drops it).  Allocating, copying on write and
 * giving back keep the sum over jobs within the free pages; forking
 * within the job changes nothing. */
static int64_t job_local_outstanding(const struct exl_engine *e, const struct exl_job *job)
{
	const struct exl_kv_seq *s;
	int64_t owned = 0, bound;

	if (!e->n_lpages)
		return 0;
	for (int pass = 0; pass < 2; pass++) {
		for (int k = 0; (s = job_seq(job, k)); k++) {
			for (int i = s->n_ldropped; i < s->n_pages; i++) {
				int32_t p = s->lpages[i];

				if (pass == 0) {
					e->held_lrefs[p]++;
					continue;
				}
				if (e->held_lrefs[p] &&
				    e->held_lrefs[p] == exl_kvcache_local_refcount(e->kv, p))
					owned++;
				e->held_lrefs[p] = 0;
			}
		}
	}
	bound = job_local_bound(e, job, job->gen_limit);
	return bound > owned ? bound - owned : 0;
}

/* The admitted jobs' reservations: what the running ones still have to
 * take, from each pool.  Suspended jobs reserve nothing. */
static int64_t outstanding(const struct exl_engine *e, int64_t *local)
{
	int64_t n = 0;

	*local = 0;
	for (int j = 0; j < e->n_active; j++) {
		const struct exl_job *job = e->active[j];

		if (job->state != EXL_JOB_RUNNING)
			continue;
		n += job_outstanding(e, job);
		*local += job_local_outstanding(e, job);
	}
	return n;
}

/* Whether a job that needs `need` more pages and `lneed` more local ones
 * would be admitted now. */
static bool fits(const struct exl_engine *e, int64_t need, int64_t lneed)
{
	int64_t lout, out;

	if (e->n_active >= e->cfg.max_jobs)
		return false;
	out = outstanding(e, &lout);
	return exl_kvcache_free_pages(e->kv) - out >= need &&
	       exl_kvcache_local_free_pages(e->kv) - lout >= lneed;
}

static bool holds_kv(const struct exl_job *job)
{
	for (int i = 0; i < job->n_seqs; i++)
		if (job->seq[i].kv.n_pages)
			return true;
	return false;
}

/* Gives back every KV page a job holds, its draft sequence's too. */
static void release_kv(struct exl_engine *e, struct exl_job *job)
{
	exl_job_release_kv(job, e->kv);
	if (job->draft.drafter)
		exl_drafter_release(job->draft.drafter, job);
	job->kv = NULL;
}

/* The job leaves the engine: KV back, on_done.  The caller has taken it
 * out of the active, queued or suspended list. */
static void finish(struct exl_engine *e, struct exl_job *job)
{
	release_kv(e, job);
	exl_job_complete(job);
}

static void remove_active(struct exl_engine *e, int j)
{
	memmove(e->active + j, e->active + j + 1, (size_t)(e->n_active - j - 1) * sizeof(*e->active));
	e->n_active--;
	if (e->rr > j)
		e->rr--;
}

static void remove_queued(struct exl_engine *e, int j)
{
	memmove(e->queue + j, e->queue + j + 1, (size_t)(e->n_queue - j - 1) * sizeof(*e->queue));
	e->n_queue--;
}

static void remove_suspended(struct exl_engine *e, int j)
{
	memmove(e->suspended + j, e->suspended + j + 1,
		(size_t)(e->n_suspended - j - 1) * sizeof(*e->suspended));
	e->n_suspended--;
}

static void handle_cancels(struct exl_engine *e)
{
	for (int j = 0; j < e->n_queue;) {
		struct exl_job *job = e->queue[j];

		if (!atomic_load(&job->cancel)) {
			j++;
			continue;
		}
		remove_queued(e, j);
		exl_job_end(job, EXL_STOP_CANCELLED, NULL);
		finish(e, job);
	}
	for (int j = 0; j < e->n_active;) {
		struct exl_job *job = e->active[j];

		if (!atomic_load(&job->cancel)) {
			j++;
			continue;
		}
		remove_active(e, j);
		exl_job_end(job, EXL_STOP_CANCELLED, NULL);
		finish(e, job);
	}
	for (int j = 0; j < e->n_suspended;) {
		struct exl_job *job = e->suspended[j];

		if (!atomic_load(&job->cancel)) {
			j++;
			continue;
		}
		remove_suspended(e, j);
		exl_job_end(job, EXL_STOP_CANCELLED, NULL);
		finish(e, job);
	}
}

/* Streams what jobs have ready (after a resume) and lets finished ones
 * go. */
static void deliver_all(struct exl_engine *e)
{
	for (int j = 0; j < e->n_active;) {
		struct exl_job *job = e->active[j];

		if (!exl_job_deliver(job) || job->state != EXL_JOB_ENDING) {
			j++;
			continue;
		}
		remove_active(e, j);
		finish(e, job);
	}
}

/* Notes when each admitted job was first seen paused (its consumer's ring
 * full), so that make_room can tell how long it has been. */
static void note_paused(struct exl_engine *e, double now)
{
	for (int j = 0; j < e->n_active; j++) {
		struct exl_job *job = e->active[j];

		if (!atomic_load(&job->paused))
			job->t_paused = 0.0;
		else if (job->t_paused == 0.0)
			job->t_paused = now;
	}
}

/* A paused job may give up its slot once its consumer has had no room for
 * suspend_after seconds (0 by default: at once, since it keeps its pages). */
static bool suspendable(const struct exl_engine *e, const struct exl_job *job, double now)
{
	return atomic_load(&job->paused) && job->t_paused != 0.0 &&
	       now - job->t_paused >= e->cfg.suspend_after;
}

/* Suspends active[j]: it gives up its slot and its reservation and keeps
 * its pages (until reclaim).  Its tokens stay; when its consumer reads it
 * queues again (requeue_suspended).  -1 when out of memory (it stays). */
static int suspend(struct exl_engine *e, int j, double now)
{
	struct exl_job *job = e->active[j];

	if (e->n_suspended == e->cap_suspended) {
		int cap = e->cap_suspended * 2 + 8;
		struct exl_job **s = realloc(e->suspended, (size_t)cap * sizeof(*s));

		if (!s)
			return -1;
		e->suspended = s;
		e->cap_suspended = cap;
	}
	remove_active(e, j);
	job->kv = NULL;
	if (job->state == EXL_JOB_RUNNING)
		job->state = EXL_JOB_QUEUED;
	job->t_suspended = now;
	e->suspended[e->n_suspended++] = job;
	return 0;
}

/* A job out of the batch gives its pages back.  Full ones stay in the
 * prefix cache until something else needs them, so once admitted again it
 * maps back what is left of them (try_admit) and recomputes the rest: the
 * forward pass gives every position the same values whatever else is in
 * the batch, so the continuation is the one it would have had. */
static void reclaim(struct exl_engine *e, struct exl_job *job)
{
	for (int i = 0; i < job->n_seqs; i++) {
		struct exl_gen_seq *q = &job->seq[i];

		if (q->kv.n_pos > q->n_had)
			q->n_had = q->kv.n_pos;
	}
	exl_job_release_kv(job, e->kv);
}

/* One pass of reclaimable() over job's pages: pass 0 counts its references
 * in held_refs (held_lrefs for the local pool); pass 1 counts, once each,
 * the pages every reference of which was counted (local ones in *local),
 * and clears the counts. */
static int64_t tally_job(struct exl_engine *e, const struct exl_job *job, int pass,
			 int64_t *local)
{
	int64_t n = 0;

	/* a started beam search's beams are not reclaimed (reclaim_victim
	 * looks at seq[] only), so they are not counted either */
	for (int i = 0; i < job->n_seqs; i++) {
		const struct exl_kv_seq *s = &job->seq[i].kv;

		for (int k = s->n_dropped; k < s->n_pages; k++) {
			int32_t p = s->pages[k];

			if (pass == 0) {
				e->held_refs[p]++;
				continue;
			}
			if (!e->held_refs[p])
				continue;
			if (e->held_refs[p] == exl_kvcache_page_refcount(e->kv, p))
				n++;
			e->held_refs[p] = 0;
		}
		for (int k = s->n_ldropped; e->n_lpages && k < s->n_pages; k++) {
			int32_t p = s->lpages[k];

			if (pass == 0) {
				e->held_lrefs[p]++;
				continue;
			}
			if (!e->held_lrefs[p])
				continue;
			if (e->held_lrefs[p] == exl_kvcache_local_refcount(e->kv, p))
				(*local)++;
			e->held_lrefs[p] = 0;
		}
	}
	return n;
}

/* Pages that would come free if cand[0..n_cand), every suspended job and
 * every queued job but head gave their pages back: those no other
 * sequence (a running job's, head's shared prefix) references too; the
 * local pool's in *local. */
static int64_t reclaimable(struct exl_engine *e, const struct exl_job *head, int n_cand,
			   int64_t *local)
{
	int64_t n = 0;

	*local = 0;
	for (int pass = 0; pass < 2; pass++) {
		for (int k = 0; k < n_cand; k++)
			n += tally_job(e, e->cand[k], pass, local);
		for (int k = 0; k < e->n_suspended; k++)
			n += tally_job(e, e->suspended[k], pass, local);
		for (int k = 0; k < e->n_queue; k++)
			if (e->queue[k] != head)
				n += tally_job(e, e->queue[k], pass, local);
	}
	return n;
}

/* The job whose pages go first: the one suspended longest ago, then the
 * queued ones from the back of the queue (they would run soonest last). */
static struct exl_job *reclaim_victim(const struct exl_engine *e, const struct exl_job *head)
{
	struct exl_job *v = NULL;

	for (int k = 0; k < e->n_suspended; k++) {
		struct exl_job *job = e->suspended[k];

		if (holds_kv(job) && (!v || job->t_suspended < v->t_suspended))
			v = job;
	}
	for (int k = e->n_queue - 1; !v && k >= 0; k--)
		if (e->queue[k] != head && holds_kv(e->queue[k]))
			v = e->queue[k];
	return v;
}

/* head needs a slot and `need` pages more than are free beside the
 * running jobs' reservations.  When suspending the paused jobs and taking
 * back the pages of every job out of the batch would make it fit, does
 * the least of that which does, cheapest first: paused jobs give up their
 * slot and reservation, longest paused first (they keep their pages, so
 * this costs them nothing but their place); then suspended jobs give
 * their pages back, longest suspended first (they recompute what the
 * prefix cache loses meanwhile).  Otherwise changes nothing: head waits
 * for running jobs to pause or end.  Returns whether head fits now. */
static bool make_room(struct exl_engine *e, const struct exl_job *head, int64_t need,
		      int64_t lneed)
{
	double now = exl_now_s();
	int64_t rest = 0, lrest = 0; /* reservations of the jobs that would stay */
	int64_t back, lback;
	int n_cand = 0;

	for (int j = 0; j < e->n_active; j++) {
		struct exl_job *job = e->active[j];

		if (suspendable(e, job, now)) {
			e->cand[n_cand++] = job;
		} else if (job->state == EXL_JOB_RUNNING) {
			rest += job_outstanding(e, job);
			lrest += job_local_outstanding(e, job);
		}
	}
	if (e->n_active - n_cand >= e->cfg.max_jobs)
		return false;
	back = reclaimable(e, head, n_cand, &lback);
	if (exl_kvcache_free_pages(e->kv) + back - rest < need ||
	    exl_kvcache_local_free_pages(e->kv) + lback - lrest < lneed)
		return false;
	while (!fits(e, need, lneed)) {
		int best = -1, j;

		for (int k = 0; k < n_cand; k++)
			if (e->cand[k] && (best < 0 || e->cand[k]->t_paused < e->cand[best]->t_paused))
				best = k;
		if (best < 0)
			break;
		for (j = 0; e->active[j] != e->cand[best]; j++)
			;
		if (suspend(e, j, now))
			return false; /* out of memory: head waits, as before */
		e->cand[best] = NULL;
	}
	while (!fits(e, need, lneed)) {
		struct exl_job *v = reclaim_victim(e, head);

		if (!v)
			break;
		reclaim(e, v);
	}
	return fits(e, need, lneed);
}

/* Admits the queue's head when its slot and its whole remaining length fit
 * (making room as make_room may).  A fresh job, or one whose pages were
 * reclaimed, first maps the longest prefix of its tokens (prompt and
 * output) that the prefix cache still holds. */
static bool try_admit(struct exl_engine *e, struct exl_job *job)
{
	bool kept = holds_kv(job);
	int64_t need = 0, lneed;

	for (int i = 0; i < job->n_seqs; i++) {
		struct exl_gen_seq *q = &job->seq[i];

		/* an embedding job pools every position: it computes them all */
		if (!kept && !job->pooling)
			exl_kv_seq_share_prefix(e->kv, &q->kv, q->tokens, q->n_tokens);
	}
	need = job_outstanding(e, job);
	lneed = job_local_outstanding(e, job);
	if (!fits(e, need, lneed) && !make_room(e, job, need, lneed)) {
		if (!kept)
			exl_job_release_kv(job, e->kv);
		return false;
	}
	for (int i = 0; i < job->n_seqs; i++) {
		struct exl_gen_seq *q = &job->seq[i];

		if (q->n_had > q->kv.n_pos)
			e->recomputed_tokens += (uint64_t)(q->n_had - q->kv.n_pos);
		q->n_had = 0;
	}
	job->kv = e->kv;
	job->state = EXL_JOB_RUNNING;
	if (job->t_started == 0.0) {
		/* the first admission; a suspended job coming back keeps its own */
		job->cached_tokens = job->seq[0].kv.n_pos;
		job->t_started = exl_now_s();
	}
	return true;
}

/* Suspended jobs whose consumer has room again: an ended one delivers its
 * last chunk and leaves; the others queue again, behind the jobs that
 * never ran for at most resume_yield seconds (enqueue). */
static void requeue_suspended(struct exl_engine *e)
{
	for (int j = 0; j < e->n_suspended;) {
		struct exl_job *job = e->suspended[j];

		if (atomic_load(&job->paused) || !exl_job_deliver(job)) {
			j++;
			continue;
		}
		if (job->state == EXL_JOB_ENDING) {
			remove_suspended(e, j);
			finish(e, job);
			continue;
		}
		job->t_rank = exl_now_s() + e->cfg.resume_yield;
		if (enqueue(e, job)) {
			j++;
			continue; /* out of memory: it tries again next step */
		}
		job->t_paused = 0.0;
		remove_suspended(e, j);
	}
}

static void admit(struct exl_engine *e)
{
	requeue_suspended(e);
	note_paused(e, exl_now_s());
	/* In order: the head is not overtaken, so it cannot starve. */
	while (e->n_queue && try_admit(e, e->queue[0])) {
		struct exl_job *job = e->queue[0];

		remove_queued(e, 0);
		e->active[e->n_active++] = job;
	}
}

/* ---- building the batch ---- */

static int ensure_rows(struct exl_engine *e, int rows)
{
	if (rows <= e->cap_rows)
		return 0;
	int cap = e->cap_rows * 2 > rows ? e->cap_rows * 2 : rows;
	float *l = realloc(e->logits, (size_t)cap * (size_t)e->n_vocab * sizeof(*l));

	if (!l)
		return -1;
	e->logits = l;
	e->cap_rows = cap;
	return 0;
}

static int ensure_hidden(struct exl_engine *e)
{
	if (e->hidden)
		return 0;
	e->hidden = malloc((size_t)e->cfg.max_batch_tokens *
			   (size_t)exl_model_hparams(e->m)->n_embd * sizeof(*e->hidden));
	return e->hidden ? 0 : -1;
}

/* An embedding job's rows of this step; once its whole prompt is read it
 * ends with the pooled vector. */
static void pool_step(struct exl_engine *e, const struct batch_job *bj)
{
	struct exl_job *job = bj->job;
	size_t d = (size_t)exl_model_hparams(e->m)->n_embd;

	if (job->pooling == EXL_POOL_MEAN)
		exl_gen_pool_rows(job, e->hidden + (size_t)bj->hrow * d, bj->n_hrows, bj->pos0[0]);
	else if (bj->n_hrows)
		exl_gen_pool_rows(job, e->hidden + (size_t)bj->hrow * d, 1,
				  job->pooling == EXL_POOL_CLS ? 0 : job->seq[0].prompt_len - 1);
	if (job->seq[0].kv.n_pos < job->seq[0].prompt_len)
		return;
	exl_gen_pool_finish(job);
	release_kv(e, job);
}

static bool runnable(const struct exl_job *job)
{
	return job->state == EXL_JOB_RUNNING && !atomic_load(&job->paused);
}

static int pending(const struct exl_job *job, int i)
{
	return job->seq[i].n_tokens - job->seq[i].kv.n_pos;
}

/* Adds take[i] tokens of each of job's sequences; logits for the last one
 * when with_logits.  A decoding job with drafts adds its n_draft proposed
 * tokens after its last one, to every sequence, with logits at each: the
 * rows it verifies them with.  Returns false (the batch unchanged but for
 * reserved pages) when the KV pool cannot take them now. */
static bool add_job(struct exl_engine *e, struct exl_job *job, const int take[2], bool with_logits,
		    int n_draft)
{
	for (int i = 0; i < job->n_seqs; i++)
		if (take[i] && exl_kv_seq_reserve(e->kv, &job->seq[i].kv, take[i] + n_draft))
			return false;

	struct batch_job *b = &e->bj[e->n_bj++];

	b->job = job;
	b->row[0] = b->row[1] = -1;
	b->n_rows = 1 + n_draft;
	b->hrow = e->n_hidden;
	b->n_hrows = 0;
	if (job->pooling)
		with_logits = false;
	for (int i = 0; i < job->n_seqs; i++) {
		struct exl_gen_seq *q = &job->seq[i];

		b->pos0[i] = q->kv.n_pos;
		if (!take[i])
			continue;
		int si = e->n_seqs++;
		int in_prompt = q->prompt_len - q->kv.n_pos;

		if (in_prompt > 0)
			e->prompt_tokens += (uint64_t)(in_prompt < take[i] ? in_prompt : take[i]);
		e->seqs[si] = &q->kv;
		if (with_logits)
			b->row[i] = e->n_rows;
		for (int k = 0; k < take[i] + n_draft; k++) {
			int t = e->n_tokens++;

			int at = q->kv.n_pos + k;
			bool drafted = k >= take[i];
			int32_t row = !drafted && i == 0 && job->embd_at && at < q->prompt_len ?
				      job->embd_at[at] : -1;

			e->tokens[t] = drafted ? job->draft.prop[k - take[i]] : q->tokens[at];
			e->seq[t] = si;
			e->want[t] = with_logits && k >= take[i] - 1;
			e->n_rows += e->want[t];
			e->want_hidden[t] = !drafted &&
					    (job->pooling == EXL_POOL_MEAN ||
					     (job->pooling == EXL_POOL_CLS && at == 0) ||
					     (job->pooling == EXL_POOL_LAST && at == q->prompt_len - 1));
			e->embd_rows[t] = row >= 0 ? job->embd + (size_t)row * (size_t)job->n_embd :
					  NULL;
			e->any_embd |= row >= 0;
			if (e->want_hidden[t]) {
				e->n_hidden++;
				b->n_hrows++;
			}
		}
	}
	return true;
}

/* A started beam search: every live beam's last token, logits for each. */
static bool add_beams(struct exl_engine *e, struct exl_job *job)
{
	int n = exl_beam_n_live(job);
	int32_t next;

	for (int i = 0; i < n; i++)
		if (exl_kv_seq_reserve(e->kv, exl_beam_kv(job, i, &next), 1))
			return false;

	struct batch_job *b = &e->bj[e->n_bj++];

	b->job = job;
	b->row[0] = e->n_rows;
	b->row[1] = -1;
	b->n_rows = n;
	for (int i = 0; i < n; i++) {
		int si = e->n_seqs++;
		int t = e->n_tokens++;

		e->seqs[si] = exl_beam_kv(job, i, &next);
		e->tokens[t] = next;
		e->seq[t] = si;
		e->want[t] = true;
		exl_beam_set_row(job, i, e->n_rows++);
	}
	return true;
}

/* Prompt tokens this step may take after `decoded` decode tokens: what is
 * left of the batch, cut so that the step takes about step_target seconds
 * at the measured cost of a token.  A long prompt then cannot stall the
 * running decodes for long (nor the engine thread's heartbeat: a model
 * that prefills 10 tokens a second would otherwise spend most of a minute
 * on one 512-token step). */
static int prefill_budget(const struct exl_engine *e, int left, int decoded)
{
	if (e->cfg.step_target <= 0.0 || e->sec_per_token <= 0.0)
		return left;
	double fit = e->cfg.step_target / e->sec_per_token - decoded;
	int n = fit < (double)left ? (int)fit : left;

	if (n < STEP_MIN_PREFILL)
		n = STEP_MIN_PREFILL < left ? STEP_MIN_PREFILL : left;
	return n;
}

static void build_batch(struct exl_engine *e)
{
	int budget = e->cfg.max_batch_tokens;
	int n = e->n_active;

	e->n_tokens = e->n_seqs = e->n_rows = e->n_bj = e->n_hidden = 0;
	e->any_embd = false;
	if (!n)
		return;
	/* Decoding jobs first, starting at a rotating position. */
	for (int k = 0; k < n; k++) {
		struct exl_job *job = e->active[(e->rr + k) % n];
		int take[2] = { 0, 0 }, total = 0;

		if (!runnable(job))
			continue;
		if (exl_beam_started(job)) {
			if (exl_beam_n_live(job) <= budget && add_beams(e, job))
				budget -= exl_beam_n_live(job);
			continue;
		}
		for (int i = 0; i < job->n_seqs; i++) {
			take[i] = pending(job, i);
			total += take[i];
		}
		if (total > job->n_seqs || total > budget)
			continue;
		/* Proposals (propose) as fit what is left of the batch. */
		int nd = job->draft.n_prop;

		if (total == job->n_seqs && nd > budget / job->n_seqs - 1)
			nd = budget / job->n_seqs - 1;
		if (total < job->n_seqs || nd < 0)
			nd = 0;
		if (add_job(e, job, take, true, nd))
			budget -= total + nd * job->n_seqs;
	}
	/* an encoder's texts go whole into a step, past the step's target
	 * if they must (exl_engine_add: each fits max_batch_tokens) */
	int room = budget;
	bool enc_first = true;
	budget = prefill_budget(e, budget, e->cfg.max_batch_tokens - budget);
	/* Then prompts, oldest first, a chunk each. */
	for (int j = 0; j < n && budget > 0; j++) {
		struct exl_job *job = e->active[j];
		int take[2] = { 0, 0 }, total = 0;
		bool fits = true;

		if (!runnable(job) || exl_beam_started(job))
			continue;
		for (int i = 0; i < job->n_seqs; i++) {
			take[i] = pending(job, i);
			total += take[i];
			if (take[i] > e->cfg.prefill_chunk)
				fits = false;
		}
		if (e->encoder) {
			/* the first one whatever the step's target */
			if (total <= (enc_first ? room : budget) && add_job(e, job, take, false, 0)) {
				budget -= total;
				room -= total;
				enc_first = false;
			}
			continue;
		}
		if (total <= job->n_seqs)
			continue; /* a decode: handled above */
		if (fits && total <= budget) {
			if (add_job(e, job, take, true, 0))
				budget -= total;
			continue;
		}
		/* Part of the prompt; the last token of each sequence waits so
		 * that all of them reach it in one step. */
		int chunk = e->cfg.prefill_chunk < budget ? e->cfg.prefill_chunk : budget;

		total = 0;
		for (int i = 0; i < job->n_seqs; i++) {
			int t = pending(job, i) - 1;

			if (t > chunk - total)
				t = chunk - total;
			take[i] = t > 0 ? t : 0;
			total += take[i];
		}
		if (total && add_job(e, job, take, false, 0))
			budget -= total;
	}
	e->rr = (e->rr + 1) % n;
}

static void note_rate(struct exl_engine *e)
{
	struct rate_mark *m = &e->marks[e->mark_head];

	m->t = exl_now_s();
	m->gen = e->generated_tokens;
	m->prompt = e->prompt_tokens;
	e->mark_head = (e->mark_head + 1) % RATE_WINDOW;
	if (e->n_marks < RATE_WINDOW)
		e->n_marks++;
}

/* ---- speculative decoding ---- */

int exl_engine_attach_drafter(struct exl_engine *e, struct exl_drafter *d, char *err,
			      size_t errlen)
{
	if (find_drafter(e, exl_drafter_name(d))) {
		snprintf(err, errlen, "a draft model named '%s' is already open for this model",
			 exl_drafter_name(d));
		exl_drafter_free(d);
		return -1;
	}
	if (e->n_drafters == MAX_DRAFTERS) {
		snprintf(err, errlen, "at most %d draft models are open for one model",
			 MAX_DRAFTERS);
		exl_drafter_free(d);
		return -1;
	}
	e->drafters[e->n_drafters++] = d;
	return 0;
}

bool exl_engine_has_drafter(const struct exl_engine *e, const char *name)
{
	return find_drafter(e, name) != NULL;
}

int exl_engine_open_drafter(struct exl_engine *e, const char *name, const char *path,
			    struct exl_backend *be, char *err, size_t errlen)
{
	struct exl_drafter *d = exl_drafter_open(name, path, be, e->m, e->n_pages * e->page_size,
						 e->page_size, e->cfg.max_batch_tokens, err,
						 errlen);

	if (!d)
		return -1;
	return exl_engine_attach_drafter(e, d, err, errlen);
}

static void forget_drafter(struct exl_drafter *d, struct exl_job **jobs, int n)
{
	for (int j = 0; j < n; j++) {
		if (jobs[j]->draft.drafter != d)
			continue;
		exl_drafter_release(d, jobs[j]);
		jobs[j]->draft.drafter = NULL;
		jobs[j]->draft.n_prop = 0;
	}
}

void exl_engine_drop_drafter(struct exl_engine *e, const char *name)
{
	for (int i = 0; i < e->n_drafters; i++) {
		struct exl_drafter *d = e->drafters[i];

		if (strcmp(exl_drafter_name(d), name))
			continue;
		forget_drafter(d, e->active, e->n_active);
		forget_drafter(d, e->queue, e->n_queue);
		forget_drafter(d, e->suspended, e->n_suspended);
		exl_drafter_free(d);
		memmove(e->drafters + i, e->drafters + i + 1,
			(size_t)(e->n_drafters - i - 1) * sizeof(*e->drafters));
		e->n_drafters--;
		return;
	}
}

/* Whether job decodes this step: one pending token in every sequence. */
static bool decodes(const struct exl_job *job)
{
	if (!runnable(job) || job->reason != EXL_STOP_NONE)
		return false;
	for (int i = 0; i < job->n_seqs; i++)
		if (pending(job, i) != 1)
			return false;
	return true;
}

/* Fills draft.prop for every decoding job that drafts: as many tokens as
 * its schedule (next_len), its room and the pass's cheap rows allow (the
 * last token it may generate is never proposed: nothing would verify it).
 * A verification row is worth its price only while the pass stays within
 * the backend's cheap rows (memory-bound): past them every row costs
 * compute, which the batch's other jobs already fill, so a full batch
 * decodes without proposals (docs/design-notes.md, "Speculative
 * decoding").  A drafter that fails is dropped; its jobs go on without
 * proposals, to the same output. */
static void propose(struct exl_engine *e)
{
	int rows = e->cfg.spec_rows > 0 ? e->cfg.spec_rows : exl_model_backend(e->m)->ops->cheap_rows;

	for (int j = 0; j < e->n_active; j++)
		if (decodes(e->active[j]))
			rows -= e->active[j]->n_seqs;
	for (int j = 0; j < e->n_active; j++) {
		struct exl_job *job = e->active[j];
		struct exl_job_draft *d = &job->draft;
		int room = (job->max_new_tokens < job->gen_limit ? job->max_new_tokens :
			    job->gen_limit) - job->n_gen - 1;
		bool decoding = true;

		d->n_prop = d->want = 0;
		/* A draft model cannot read a job's input embedding rows (its
		 * own width, its own weights): such a job goes on undrafted,
		 * to the same output. */
		if (!runnable(job) || !d->prop || (!d->ngram && (!d->drafter || job->embd_at)) ||
		    job->reason != EXL_STOP_NONE)
			continue;
		for (int i = 0; i < job->n_seqs; i++)
			decoding &= pending(job, i) == 1;
		if (!decoding || room <= 0 || rows <= 0)
			continue;
		if (!d->len) {
			if (++d->idle < DRAFT_PROBE_EVERY)
				continue;
			d->idle = 0;
		}
		d->want = d->len ? d->len : 1;
		if (d->want > room)
			d->want = room;
		if (d->want * job->n_seqs > rows)
			d->want = rows / job->n_seqs;
		rows -= d->want * job->n_seqs;
		if (!d->want)
			continue;
		if (d->ngram)
			d->n_prop = exl_draft_ngram(job->seq[0].tokens, job->seq[0].n_tokens, d->ngram,
						    d->prop, d->want);
	}
	for (int k = 0; k < e->n_drafters;) {
		struct exl_drafter *dr = e->drafters[k];
		char err[300];
		int n = 0;

		for (int j = 0; j < e->n_active; j++)
			if (e->active[j]->draft.drafter == dr && e->active[j]->draft.want > 0)
				e->dj[n++] = e->active[j];
		if (n && exl_drafter_propose(dr, e->dj, n, err, sizeof(err))) {
			exl_log(EXL_LOG_ERR, "speculative decoding: %s; its jobs go on without it",
				err);
			exl_engine_drop_drafter(e, exl_drafter_name(dr));
			continue;
		}
		k++;
	}
}

/* How many proposals a job asks for next, after n of them gave m
 * accepted: transformers' "heuristic" schedule (two more after all were
 * accepted, one fewer otherwise, down to 1), taken down to 0 when a
 * single proposal fails: then a probe every DRAFT_PROBE_EVERY steps.  A
 * proposal costs a draft pass and a row of the model's pass; one the
 * model rejects buys nothing, so a job whose proposals keep failing
 * decodes about as fast as without drafting instead of much slower. */
static void next_len(struct exl_job_draft *d, int n, int m)
{
	if (m == n)
		d->len = d->len + 2 < d->max_tokens ? d->len + 2 : d->max_tokens;
	else if (m == 0 && n <= 1)
		d->len = 0;
	else
		d->len = d->len > 2 ? d->len - 1 : 1;
}

/* After a job consumed its rows: its KV keeps the positions whose tokens
 * are its own, and drops the rejected proposals past them (a rewind may
 * have dropped more already). */
static void roll_back(struct exl_engine *e, const struct batch_job *bj)
{
	struct exl_job *job = bj->job;

	for (int i = 0; i < job->n_seqs; i++) {
		struct exl_gen_seq *q = &job->seq[i];
		int lim = q->kv.n_pos < q->n_tokens - 1 ? q->kv.n_pos : q->n_tokens - 1;
		int keep = bj->pos0[i] < lim ? bj->pos0[i] : lim;

		while (keep < lim && q->kv.tokens[keep] == q->tokens[keep])
			keep++;
		if (keep < q->kv.n_pos)
			exl_kv_seq_truncate(e->kv, &q->kv, keep);
	}
}

/* Samples from a job's rows in order, as one step at a time would: row
 * r + 1 only while the token sampled from row r is the proposal fed
 * after it, and the job is still running with nothing rewound. */
static void advance_rows(struct exl_engine *e, const struct batch_job *bj)
{
	struct exl_job *job = bj->job;
	int r = 0;

	for (;; r++) {
		const float *cond = e->logits + (size_t)(bj->row[0] + r) * (size_t)e->n_vocab;
		const float *neg = bj->row[1] >= 0 ?
				   e->logits + (size_t)(bj->row[1] + r) * (size_t)e->n_vocab : NULL;
		int before = job->n_gen;

		exl_job_advance(job, cond, neg);
		if (job->n_gen > before)
			e->generated_tokens += (uint64_t)(job->n_gen - before);
		if (r + 1 == bj->n_rows || job->reason != EXL_STOP_NONE ||
		    job->n_gen != before + 1 || job->gen[before] != job->draft.prop[r])
			break;
	}
	if (bj->n_rows > 1) {
		job->draft.proposed += bj->n_rows - 1;
		job->draft.accepted += r;
		next_len(&job->draft, bj->n_rows - 1, r);
		e->draft_proposed += (uint64_t)(bj->n_rows - 1);
		e->draft_accepted += (uint64_t)r;
		if (job->state != EXL_JOB_ENDING)
			roll_back(e, bj);
	}
}

int exl_engine_step(struct exl_engine *e, char *err, size_t errlen)
{
	handle_cancels(e);
	deliver_all(e);
	admit(e);
	propose(e);
	build_batch(e);
	if (!e->n_tokens)
		return 0;
	if (ensure_rows(e, e->n_rows)) {
		snprintf(err, errlen, "out of memory for %d rows of logits", e->n_rows);
		goto fail;
	}
	if (e->n_hidden && ensure_hidden(e)) {
		snprintf(err, errlen, "out of memory for %d hidden states", e->cfg.max_batch_tokens);
		goto fail;
	}
	struct exl_batch b = {
		.n_tokens = e->n_tokens, .tokens = e->tokens, .seq = e->seq,
		.want_logits = e->want, .n_seqs = e->n_seqs, .seqs = e->seqs,
	};
	struct exl_batch_io io = {
		.embd_rows = e->any_embd ? e->embd_rows : NULL,
		.want_hidden = e->n_hidden ? e->want_hidden : NULL,
		.hidden = e->hidden,
	};

	double t0 = exl_now_s();

	if (exl_model_forward_io(e->m, e->kv, &b, &io, e->logits, err, errlen))
		goto fail;
	/* A big step's time is mostly per-token work (a small one's is the
	 * weights read once), so only big steps teach the cost of a token. */
	if (b.n_tokens >= STEP_MIN_PREFILL) {
		double x = (exl_now_s() - t0) / b.n_tokens;

		e->sec_per_token = e->sec_per_token > 0.0 ? 0.7 * e->sec_per_token + 0.3 * x : x;
	}
	e->steps++;
	for (int k = 0; k < e->n_bj; k++) {
		struct batch_job *bj = &e->bj[k];
		struct exl_job *job = bj->job;

		if (job->pooling) {
			pool_step(e, bj);
			continue;
		}
		if (bj->row[0] < 0)
			continue;
		if (job->beam) {
			exl_beam_step(job, e->kv, e->logits, e->n_vocab, bj->row[0]);
			e->generated_tokens++;
		} else {
			advance_rows(e, bj);
			/* Its tokens go out now, not after every other job's
			 * sampling: deliver_all below only lets finished jobs go. */
			exl_job_deliver(job);
		}
		if (job->state == EXL_JOB_ENDING)
			release_kv(e, job);
	}
	deliver_all(e);
	note_rate(e);
	return b.n_tokens;
fail:
	/* The pass failed: its jobs cannot go on. */
	for (int k = 0; k < e->n_bj; k++) {
		struct exl_job *job = e->bj[k].job;

		for (int j = 0; j < e->n_active; j++) {
			if (e->active[j] == job) {
				remove_active(e, j);
				break;
			}
		}
		exl_job_end(job, EXL_STOP_ERROR, err);
		finish(e, job);
	}
	return -1;
}

bool exl_engine_has_work(const struct exl_engine *e)
{
	if (e->n_queue)
		return true;
	for (int j = 0; j < e->n_active; j++) {
		const struct exl_job *job = e->active[j];

		if (!atomic_load(&job->paused) || atomic_load(&job->cancel))
			return true;
	}
	for (int j = 0; j < e->n_suspended; j++) {
		const struct exl_job *job = e->suspended[j];

		if (!atomic_load(&job->paused) || atomic_load(&job->cancel))
			return true;
	}
	return false;
}

void exl_engine_end_all(struct exl_engine *e, enum exl_stop_reason reason)
{
	while (e->n_active) {
		struct exl_job *job = e->active[e->n_active - 1];

		e->n_active--;
		exl_job_end(job, reason, NULL);
		finish(e, job);
	}
	while (e->n_suspended) {
		struct exl_job *job = e->suspended[e->n_suspended - 1];

		e->n_suspended--;
		exl_job_end(job, reason, NULL);
		finish(e, job);
	}
	while (e->n_queue) {
		struct exl_job *job = e->queue[e->n_queue - 1];

		e->n_queue--;
		exl_job_end(job, reason, NULL);
		finish(e, job);
	}
	e->rr = 0;
}

void exl_engine_stats(const struct exl_engine *e, struct exl_engine_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->active = e->n_active;
	for (int j = 0; j < e->n_active; j++)
		st->paused += atomic_load(&e->active[j]->paused);
	/* A suspended job is, to its client, a paused one. */
	st->active += e->n_suspended;
	st->paused += e->n_suspended;
	st->suspended = e->n_suspended;
	st->queued = e->n_queue;
	st->prompt_tokens = e->prompt_tokens;
	st->generated_tokens = e->generated_tokens;
	st->recomputed_tokens = e->recomputed_tokens;
	st->steps = e->steps;
	st->draft_proposed = e->draft_proposed;
	st->draft_accepted = e->draft_accepted;
	st->kv_pages_free = exl_kvcache_free_pages(e->kv);
	st->kv_pages_total = e->n_pages;
	st->kv_local_pages_free = exl_kvcache_local_free_pages(e->kv);
	st->kv_local_pages_total = e->n_lpages;
	if (e->n_marks >= 2) {
		int newest = (e->mark_head + RATE_WINDOW - 1) % RATE_WINDOW;
		int oldest = (e->mark_head + RATE_WINDOW - e->n_marks) % RATE_WINDOW;
		double now = exl_now_s();

		/* the oldest mark inside the window */
		for (int k = 0; k < e->n_marks - 1; k++) {
			if (now - e->marks[oldest].t <= RATE_SECONDS)
				break;
			oldest = (oldest + 1) % RATE_WINDOW;
		}
		double dt = e->marks[newest].t - e->marks[oldest].t;

		if (dt > 0.0 && now - e->marks[newest].t <= RATE_SECONDS) {
			st->tokens_per_s = (double)(e->marks[newest].gen - e->marks[oldest].gen) / dt;
			st->prompt_tokens_per_s =
				(double)(e->marks[newest].prompt - e->marks[oldest].prompt) / dt;
		}
	}
}
