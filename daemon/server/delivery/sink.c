/* A connection's delivery end, shared by the loop and the engine threads. */
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "daemon/server/delivery/mailbox.h"
#include "daemon/server/delivery/ring.h"
#include "daemon/server/delivery/sink.h"

struct exl_sink *exl_sink_create(struct exl_mailbox *mail, uid_t uid, pid_t pid, uint64_t conn_id)
{
	struct exl_sink *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	atomic_init(&s->refs, 1);
	atomic_init(&s->closed, false);
	atomic_init(&s->loop_buffered, 0);
	pthread_mutex_init(&s->mu, NULL);
	s->mail = mail;
	s->uid = uid;
	s->pid = pid;
	s->conn_id = conn_id;
	return s;
}

void exl_sink_ref(struct exl_sink *s)
{
	atomic_fetch_add(&s->refs, 1);
}

static void free_list(struct exl_outmsg *m)
{
	while (m) {
		struct exl_outmsg *next = m->next;
		free(m);
		m = next;
	}
}

void exl_sink_unref(struct exl_sink *s)
{
	if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	free_list(s->out_head);
	free_list(s->pend_head);
	exl_ring_free(s->ring);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

/* Tells the loop, with a reference it drops. */
static bool post_loop(struct exl_sink *s, enum exl_mail_kind kind)
{
	exl_sink_ref(s);
	if (exl_mail_post_sink(s->mail, kind, s))
		return true;
	exl_sink_unref(s);
	return false;
}

static struct exl_outmsg *new_msg(uint16_t type, uint64_t job, const void *data, size_t len)
{
	struct exl_outmsg *m = malloc(sizeof(*m) + len);

	if (!m)
		return NULL;
	m->next = NULL;
	m->type = type;
	m->job = job;
	m->len = len;
	memcpy(m->data, data, len);
	return m;
}

int exl_sink_send(struct exl_sink *s, const void *data, size_t len)
{
	bool post;

	if (atomic_load(&s->closed))
		return 0;
	struct exl_outmsg *m = new_msg(0, 0, data, len);
	if (!m)
		return -1;
	pthread_mutex_lock(&s->mu);
	if (s->out_tail)
		s->out_tail->next = m;
	else
		s->out_head = m;
	s->out_tail = m;
	s->out_bytes += len;
	post = !s->out_posted;
	s->out_posted = true;
	pthread_mutex_unlock(&s->mu);
	if (post && !post_loop(s, EXL_MAIL_SINK_OUT)) {
		pthread_mutex_lock(&s->mu);
		s->out_posted = false;
		pthread_mutex_unlock(&s->mu);
		return -1;
	}
	return 0;
}

size_t exl_sink_backlog(struct exl_sink *s)
{
	pthread_mutex_lock(&s->mu);
	size_t n = s->out_bytes;
	pthread_mutex_unlock(&s->mu);
	return n + atomic_load(&s->loop_buffered);
}

struct exl_outmsg *exl_sink_take_out(struct exl_sink *s, bool *wake)
{
	pthread_mutex_lock(&s->mu);
	struct exl_outmsg *m = s->out_head;
	s->out_head = s->out_tail = NULL;
	s->out_bytes = 0;
	s->out_posted = false;
	if (wake)
		*wake = s->wake_wanted;
	s->wake_wanted = false;
	pthread_mutex_unlock(&s->mu);
	return m;
}

int exl_sink_defer_record(struct exl_sink *s, uint16_t type, uint64_t job, const void *data,
			  size_t len)
{
	bool post;

	struct exl_outmsg *m = new_msg(type, job, data, len);
	if (!m)
		return -1;
	pthread_mutex_lock(&s->mu);
	if (s->pend_tail)
		s->pend_tail->next = m;
	else
		s->pend_head = m;
	s->pend_tail = m;
	post = !s->pend_posted;
	s->pend_posted = true;
	pthread_mutex_unlock(&s->mu);
	if (post && !post_loop(s, EXL_MAIL_SINK_PENDING)) {
		pthread_mutex_lock(&s->mu);
		s->pend_posted = false;
		pthread_mutex_unlock(&s->mu);
	}
	return 0;
}

static enum exl_ring_result write_record(struct exl_sink *s, uint16_t type, uint64_t job,
					 const void *data, size_t len, bool *wake)
{
	struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
	bool w = false;

	enum exl_ring_result r = exl_ring_write(s->ring, type, job, &iov, 1, &w);
	*wake |= w;
	return r;
}

bool exl_sink_retry_pending(struct exl_sink *s)
{
	bool left, wake = false;

	pthread_mutex_lock(&s->mu);
	while (s->pend_head) {
		struct exl_outmsg *m = s->pend_head;
		if (!atomic_load(&s->closed)) {
			/* Lock order: sink, then ring. */
			enum exl_ring_result r = write_record(s, m->type, m->job, m->data, m->len,
							      &wake);
			if (r == EXL_RING_FULL)
				break;
		}
		s->pend_head = m->next;
		if (!s->pend_head)
			s->pend_tail = NULL;
		free(m);
	}
	left = s->pend_head != NULL;
	if (!left)
		s->pend_posted = false;
	pthread_mutex_unlock(&s->mu);
	if (wake)
		exl_sink_wake(s);
	return left;
}

void exl_sink_wake(struct exl_sink *s)
{
	bool post;

	if (atomic_load(&s->closed))
		return;
	/* Not a queued message: a reader that re-arms poll mode for every
	 * record without reading its socket would make that queue grow
	 * without bound.  The loop decides whether the wake is still owed. */
	pthread_mutex_lock(&s->mu);
	s->wake_wanted = true;
	post = !s->out_posted;
	s->out_posted = true;
	pthread_mutex_unlock(&s->mu);
	if (post && !post_loop(s, EXL_MAIL_SINK_OUT)) {
		pthread_mutex_lock(&s->mu);
		s->out_posted = false;
		pthread_mutex_unlock(&s->mu);
	}
}

int exl_sink_ring_record(struct exl_sink *s, uint16_t type, uint64_t job, const void *data,
			 size_t len)
{
	if (atomic_load(&s->closed))
		return 0;
	pthread_mutex_lock(&s->mu);
	bool queued = s->pend_head != NULL;
	pthread_mutex_unlock(&s->mu);
	if (exl_ring_need(s->ring, len) > s->ring->size)
		return -1;
	/* Behind records already waiting, so results keep their order. */
	if (!queued) {
		bool wake = false;
		enum exl_ring_result r = write_record(s, type, job, data, len, &wake);
		if (wake)
			exl_sink_wake(s);
		if (r == EXL_RING_WRITTEN)
			return 0;
	}
	return exl_sink_defer_record(s, type, job, data, len);
}
