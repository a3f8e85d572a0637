/* The event loop's mailbox (mailbox.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "daemon/core/util/log.h"
#include "daemon/server/delivery/mailbox.h"

int exl_mailbox_init(struct exl_mailbox *mb, char *err, size_t errlen)
{
	mb->head = mb->tail = NULL;
	mb->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (mb->fd < 0) {
		snprintf(err, errlen, "mailbox eventfd: %s", strerror(errno));
		return -1;
	}
	pthread_mutex_init(&mb->mu, NULL);
	return 0;
}

void exl_mailbox_destroy(struct exl_mailbox *mb)
{
	if (mb->fd < 0)
		return;
	close(mb->fd);
	mb->fd = -1;
	pthread_mutex_destroy(&mb->mu);
}

static void post(struct exl_mailbox *mb, struct exl_mail *m)
{
	uint64_t one = 1;

	m->next = NULL;
	pthread_mutex_lock(&mb->mu);
	if (mb->tail)
		mb->tail->next = m;
	else
		mb->head = m;
	mb->tail = m;
	pthread_mutex_unlock(&mb->mu);
	/* A full counter (never in practice) still leaves the fd readable. */
	if (write(mb->fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		exl_log(EXL_LOG_ERR, "mailbox eventfd: %s", strerror(errno));
}

struct exl_mail *exl_mail_alloc(void)
{
	return calloc(1, sizeof(struct exl_mail));
}

bool exl_mail_post_sink(struct exl_mailbox *mb, enum exl_mail_kind kind, struct exl_sink *sink)
{
	struct exl_mail *m = exl_mail_alloc();

	if (!m)
		return false;
	m->kind = kind;
	m->u.sink = sink;
	post(mb, m);
	return true;
}

bool exl_mail_post_load(struct exl_mailbox *mb, enum exl_mail_kind kind,
			struct exl_model_entry *entry, uint64_t done, uint64_t total)
{
	struct exl_mail *m = exl_mail_alloc();

	if (!m)
		return false;
	m->kind = kind;
	m->u.load.entry = entry;
	m->u.load.done = done;
	m->u.load.total = total;
	post(mb, m);
	return true;
}

bool exl_mail_post_engine_exited(struct exl_mailbox *mb, struct exl_engine_thread *t)
{
	struct exl_mail *m = exl_mail_alloc();

	if (!m)
		return false;
	m->kind = EXL_MAIL_ENGINE_EXITED;
	m->u.engine = t;
	post(mb, m);
	return true;
}

void exl_mail_post_prep_done(struct exl_mailbox *mb, struct exl_mail *m, struct exl_prep *p)
{
	m->kind = EXL_MAIL_PREP_DONE;
	m->u.prep = p;
	post(mb, m);
}

struct exl_mail *exl_mailbox_take(struct exl_mailbox *mb)
{
	uint64_t v;

	/* Drained before the take: mail posted after it makes the fd
	 * readable again, so none is left unnoticed. */
	if (read(mb->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		exl_log(EXL_LOG_ERR, "mailbox eventfd: %s", strerror(errno));
	pthread_mutex_lock(&mb->mu);
	struct exl_mail *m = mb->head;
	mb->head = mb->tail = NULL;
	pthread_mutex_unlock(&mb->mu);
	return m;
}
