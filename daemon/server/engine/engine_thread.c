/* The engine thread of one model: command queue, step loop, heartbeat. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "daemon/core/util/log.h"
#include "daemon/server/delivery/deliver.h"
#include "daemon/server/delivery/job.h"
#include "daemon/server/delivery/mailbox.h"
#include "daemon/server/delivery/sink.h"
#include "daemon/server/engine/engine_thread.h"

/* How long an idle engine thread sleeps between heartbeats, and how often
 * it looks at the rings of paused jobs when nothing else wakes it. */
#define IDLE_WAIT_MS 250
#define PAUSED_POLL_MS 2

enum cmd_kind { CMD_ADD, CMD_CANCEL_JOB, CMD_CANCEL_SINK, CMD_UNLOAD, CMD_SHUTDOWN,
		CMD_DROP_DRAFTER };

struct exl_cmd {
	struct exl_cmd *next;
	enum cmd_kind kind;
	struct exl_srv_job *job;
	struct exl_sink *sink;   /* a reference (CMD_CANCEL_SINK) */
	uint64_t job_id;
	bool cancel;
	char name[EXL_MAX_NAME + 1]; /* CMD_DROP_DRAFTER */
};

void exl_engine_thread_wake(struct exl_engine_thread *t)
{
	uint64_t one = 1;

	/* A full counter (never in practice) still leaves the fd readable. */
	if (write(t->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		exl_log(EXL_LOG_WARN, "%s: waking the engine thread: %s", t->name, strerror(errno));
}

static struct exl_cmd *new_cmd(void)
{
	return calloc(1, sizeof(struct exl_cmd));
}

static void enqueue_cmd(struct exl_engine_thread *t, struct exl_cmd *c)
{
	pthread_mutex_lock(&t->mu);
	if (t->tail)
		t->tail->next = c;
	else
		t->head = c;
	t->tail = c;
	pthread_mutex_unlock(&t->mu);
	exl_engine_thread_wake(t);
}

static int post(struct exl_engine_thread *t, enum cmd_kind kind, struct exl_srv_job *job,
		struct exl_sink *sink, uint64_t job_id, bool cancel)
{
	struct exl_cmd *c = new_cmd();

	if (!c)
		return -1;
	c->kind = kind;
	c->job = job;
	c->sink = sink;
	if (sink)
		exl_sink_ref(sink);
	c->job_id = job_id;
	c->cancel = cancel;
	enqueue_cmd(t, c);
	return 0;
}

int exl_engine_thread_drop_drafter(struct exl_engine_thread *t, const char *name)
{
	struct exl_cmd *c = new_cmd();

	if (!c)
		return -1;
	c->kind = CMD_DROP_DRAFTER;
	snprintf(c->name, sizeof(c->name), "%s", name);
	enqueue_cmd(t, c);
	return 0;
}

int exl_engine_thread_add(struct exl_engine_thread *t, struct exl_srv_job *j)
{
	atomic_fetch_add(&t->n_jobs, 1);
	if (post(t, CMD_ADD, j, NULL, 0, false)) {
		atomic_fetch_sub(&t->n_jobs, 1);
		return -1;
	}
	return 0;
}

int exl_engine_thread_cancel_job(struct exl_engine_thread *t, uint64_t job_id)
{
	return post(t, CMD_CANCEL_JOB, NULL, NULL, job_id, false);
}

int exl_engine_thread_cancel_sink(struct exl_engine_thread *t, struct exl_sink *sink)
{
	return post(t, CMD_CANCEL_SINK, NULL, sink, 0, false);
}

int exl_engine_thread_unload(struct exl_engine_thread *t, bool cancel)
{
	if (post(t, CMD_UNLOAD, NULL, NULL, 0, cancel))
		return -1;
	int none = 0;
	atomic_compare_exchange_strong(&t->refusing, &none, EXL_E_BUSY);
	return 0;
}

int exl_engine_thread_shutdown(struct exl_engine_thread *t)
{
	if (post(t, CMD_SHUTDOWN, NULL, NULL, 0, false))
		return -1;
	atomic_store(&t->refusing, EXL_E_SHUTDOWN);
	return 0;
}

void exl_engine_thread_prep_done(struct exl_engine_thread *t)
{
	/* the last one lets an unloading thread exit: wake it to see */
	if (atomic_fetch_sub(&t->n_preparing, 1) == 1)
		exl_engine_thread_wake(t);
}

void exl_engine_thread_stats(struct exl_engine_thread *t, struct exl_engine_stats *st)
{
	pthread_mutex_lock(&t->mu);
	*st = t->stats;
	pthread_mutex_unlock(&t->mu);
}

/* ---- on the engine thread ---- */

static void link_job(struct exl_engine_thread *t, struct exl_srv_job *j)
{
	j->prev = NULL;
	j->next = t->jobs;
	if (t->jobs)
		t->jobs->prev = j;
	t->jobs = j;
}

/* Drops an ended job from the live list. */
static void forget(struct exl_engine_thread *t, struct exl_srv_job *j)
{
	if (j->prev)
		j->prev->next = j->next;
	else if (t->jobs == j)
		t->jobs = j->next;
	if (j->next)
		j->next->prev = j->prev;
	j->next = j->prev = NULL;
	atomic_fetch_sub(&t->n_jobs, 1);
}

static void cancel(struct exl_srv_job *j)
{
	exl_job_cancel(j->job);
	if (j->paused) {
		/* A paused job is skipped by steps; let it run to its end. */
		j->paused = false;
		exl_job_resume(j->job);
	}
}

static int on_chunk(struct exl_job *job, const struct exl_chunk *c, void *user)
{
	struct exl_srv_job *j = user;

	(void)job;
	return exl_deliver_chunk(j, c);
}

static void on_done(struct exl_job *job, const struct exl_gen_result *r, void *user)
{
	struct exl_srv_job *j = user;

	(void)job;
	forget(j->et, j);
	exl_deliver_result(j, r);
	exl_srv_job_free(j);
}

const struct exl_job_callbacks exl_engine_thread_callbacks = {
	.on_chunk = on_chunk,
	.on_done = on_done,
};

/* The first job drafting with a model opens the thread's own copy of it
 * (the loaded one belongs to its own engine thread; drafter.h): a stall
 * of this thread as long as mapping the file and reading its vocabulary,
 * once per draft model.  Refuses the job when that fails; 0 when the job
 * may go on. */
static int open_drafter(struct exl_engine_thread *t, struct exl_srv_job *j)
{
	char err[512];
	uint64_t t0 = exl_now_ns();

	if (exl_engine_has_drafter(t->eng, j->draft_name))
		return 0;
	if (exl_engine_open_drafter(t->eng, j->draft_name, j->draft_path, t->be, err,
				    sizeof(err))) {
		exl_log(EXL_LOG_ERR, "%s: %s", t->name, err);
		exl_deliver_refused(j, EXL_E_LOAD_FAILED, err);
		atomic_fetch_sub(&t->n_jobs, 1);
		exl_srv_job_free(j);
		return -1;
	}
	exl_log(EXL_LOG_INFO, "%s: draft model '%s' opened for speculative decoding in %.0f ms",
		t->name, j->draft_name, (double)(exl_now_ns() - t0) / 1e6);
	return 0;
}

static void run_add(struct exl_engine_thread *t, struct exl_srv_job *j)
{
	char err[256];

	if (t->stopping || t->unloading) {
		exl_deliver_refused(j, t->stopping ? EXL_E_SHUTDOWN : EXL_E_BUSY,
				    t->stopping ? "the daemon is shutting down" :
				    "the model is being unloaded");
		atomic_fetch_sub(&t->n_jobs, 1);
		exl_srv_job_free(j);
		return;
	}
	if (j->draft_path && open_drafter(t, j))
		return;
	if (exl_engine_add(t->eng, j->job, err, sizeof(err))) {
		/* a generation on an embedding model is the request's fault,
		 * not its size */
		exl_deliver_refused(j, !j->embed && exl_engine_embeds_only(t->eng) ?
				    EXL_E_BAD_REQUEST : EXL_E_TOO_LARGE, err);
		atomic_fetch_sub(&t->n_jobs, 1);
		exl_srv_job_free(j);
		return;
	}
	/* Callbacks come only from steps on this thread, so the reply is
	 * queued before anything the job streams. */
	if (!j->embed)
		exl_deliver_accepted(j);
	link_job(t, j);
}

static void run_commands(struct exl_engine_thread *t)
{
	pthread_mutex_lock(&t->mu);
	struct exl_cmd *c = t->head;
	t->head = t->tail = NULL;
	pthread_mutex_unlock(&t->mu);

	while (c) {
		struct exl_cmd *next = c->next;
		switch (c->kind) {
		case CMD_ADD:
			run_add(t, c->job);
			break;
		case CMD_CANCEL_JOB:
			for (struct exl_srv_job *j = t->jobs; j; j = j->next)
				if (j->id == c->job_id)
					cancel(j);
			break;
		case CMD_CANCEL_SINK:
			for (struct exl_srv_job *j = t->jobs; j; j = j->next)
				if (j->sink == c->sink)
					cancel(j);
			break;
		case CMD_UNLOAD:
			t->unloading = true;
			if (c->cancel)
				exl_engine_end_all(t->eng, EXL_STOP_UNLOADED);
			break;
		case CMD_SHUTDOWN:
			t->stopping = true;
			exl_engine_end_all(t->eng, EXL_STOP_SHUTDOWN);
			break;
		case CMD_DROP_DRAFTER:
			exl_engine_drop_drafter(t->eng, c->name);
			break;
		}
		if (c->sink)
			exl_sink_unref(c->sink);
		free(c);
		c = next;
	}
}

/* Resumes the paused jobs whose consumer has room; returns how many are
 * still paused. */
static int resume_paused(struct exl_engine_thread *t)
{
	int n = 0;

	for (struct exl_srv_job *j = t->jobs; j; j = j->next) {
		if (!j->paused)
			continue;
		if (atomic_load(&j->sink->closed)) {
			cancel(j);
			continue;
		}
		if (exl_deliver_has_room(j)) {
			j->paused = false;
			exl_job_resume(j->job);
		} else {
			n++;
		}
	}
	return n;
}

static void snapshot_stats(struct exl_engine_thread *t)
{
	struct exl_engine_stats st;

	exl_engine_stats(t->eng, &st);
	pthread_mutex_lock(&t->mu);
	t->stats = st;
	pthread_mutex_unlock(&t->mu);
}

static void wait_wake(struct exl_engine_thread *t, int timeout_ms)
{
	struct pollfd p = { .fd = t->efd, .events = POLLIN };
	uint64_t v;

	if (poll(&p, 1, timeout_ms) > 0 && read(t->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		exl_log(EXL_LOG_WARN, "%s: engine eventfd: %s", t->name, strerror(errno));
}

static void *thread_main(void *arg)
{
	struct exl_engine_thread *t = arg;
	char err[256];
	uint64_t last_stats = 0;

	for (;;) {
		atomic_store(&t->heartbeat_ns, exl_now_ns());
		run_commands(t);
		int paused = resume_paused(t);
		/* n_jobs also counts adds still in the queue; n_preparing the
		 * requests that use the model off this thread (prep.h).  The
		 * loop counts a prepared job in n_jobs before it lets go of
		 * n_preparing, so no job falls between the two. */
		if ((t->unloading || t->stopping) && !t->jobs && atomic_load(&t->n_jobs) == 0 &&
		    atomic_load(&t->n_preparing) == 0)
			break;
		int n = 0;
		if (exl_engine_has_work(t->eng)) {
			n = exl_engine_step(t->eng, err, sizeof(err));
			if (n < 0)
				exl_log(EXL_LOG_ERR, "%s: forward pass failed, its jobs ended: %s",
					t->name, err);
		}
		uint64_t now = exl_now_ns();
		if (now - last_stats > 100000000ull || n <= 0) {
			snapshot_stats(t);
			last_stats = now;
		}
		if (n > 0)
			continue;
		/* Nothing ran: every job paused, waiting for KV pages, or none. */
		wait_wake(t, paused || exl_engine_has_work(t->eng) ? PAUSED_POLL_MS : IDLE_WAIT_MS);
	}
	snapshot_stats(t);
	if (!exl_mail_post_engine_exited(t->mail, t))
		exl_log(EXL_LOG_ERR, "%s: out of memory telling the loop the engine stopped", t->name);
	return NULL;
}

struct exl_engine_thread *exl_engine_thread_start(struct exl_mailbox *mail, struct exl_engine *eng,
						  struct exl_backend *be, const char *name,
						  char *err, size_t errlen)
{
	struct exl_engine_thread *t = calloc(1, sizeof(*t));

	if (!t) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	t->mail = mail;
	t->eng = eng;
	t->be = be;
	snprintf(t->name, sizeof(t->name), "%s", name);
	pthread_mutex_init(&t->mu, NULL);
	atomic_init(&t->heartbeat_ns, exl_now_ns());
	atomic_init(&t->n_jobs, 0);
	atomic_init(&t->n_preparing, 0);
	atomic_init(&t->refusing, 0);
	t->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (t->efd < 0) {
		snprintf(err, errlen, "eventfd: %s", strerror(errno));
		goto fail;
	}
	exl_engine_stats(eng, &t->stats);
	int rc = pthread_create(&t->th, NULL, thread_main, t);
	if (rc) {
		snprintf(err, errlen, "starting the engine thread: %s", strerror(rc));
		goto fail;
	}
	t->started = true;
	return t;
fail:
	if (t->efd >= 0)
		close(t->efd);
	pthread_mutex_destroy(&t->mu);
	free(t);
	return NULL;
}

void exl_engine_thread_join(struct exl_engine_thread *t)
{
	if (!t)
		return;
	if (t->started)
		pthread_join(t->th, NULL);
	/* Commands that came after the thread left (none are posted once the
	 * loop knows it is unloading, but be exact). */
	struct exl_cmd *c = t->head;
	while (c) {
		struct exl_cmd *next = c->next;
		if (c->kind == CMD_ADD) {
			exl_deliver_refused(c->job, EXL_E_BUSY, "the model was unloaded");
			exl_srv_job_free(c->job);
		}
		if (c->sink)
			exl_sink_unref(c->sink);
		free(c);
		c = next;
	}
	close(t->efd);
	pthread_mutex_destroy(&t->mu);
	free(t);
}
