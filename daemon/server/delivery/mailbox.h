/* The event loop's mailbox: how the other daemon threads (engine threads,
 * loaders, the prep pool) hand the loop work.  A mutex-protected list and
 * an eventfd the loop watches; the loop takes the whole list at once and
 * dispatches each mail by kind (server.c).
 *
 * Mail is typed: each kind carries its own payload, posted by its own
 * function.  The mailbox only carries it; whoever posts owns what the
 * payload points at until the loop takes it (a sink reference is the
 * poster's to take and the loop's to drop).
 */
#ifndef EXL_MAILBOX_H
#define EXL_MAILBOX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct exl_sink;
struct exl_model_entry;
struct exl_engine_thread;
struct exl_prep;

enum exl_mail_kind {
	EXL_MAIL_SINK_OUT,       /* sink: socket messages are queued */
	EXL_MAIL_SINK_PENDING,   /* sink: ring records wait for room */
	EXL_MAIL_LOAD_PROGRESS,  /* load: bytes done of total */
	EXL_MAIL_LOAD_DONE,      /* load: the loader thread finished */
	EXL_MAIL_ENGINE_EXITED,  /* engine: its thread ended */
	EXL_MAIL_PREP_DONE,      /* prep: a request the pool prepared (prep.h) */
};

struct exl_mail {
	struct exl_mail *next;
	enum exl_mail_kind kind;
	union {
		struct exl_sink *sink;              /* SINK_*: a reference */
		struct {
			struct exl_model_entry *entry;
			uint64_t done, total;
		} load;                             /* LOAD_* */
		struct exl_engine_thread *engine;   /* ENGINE_EXITED */
		struct exl_prep *prep;              /* PREP_DONE: the loop's from here on */
	} u;
};

struct exl_mailbox {
	pthread_mutex_t mu;
	struct exl_mail *head, *tail;
	int fd;                  /* eventfd: readable while mail waits */
};

/* 0, or -1 with a message. */
int exl_mailbox_init(struct exl_mailbox *mb, char *err, size_t errlen);
/* Frees nothing the mail points at: take what is left first. */
void exl_mailbox_destroy(struct exl_mailbox *mb);

/* Any thread; each is false when out of memory (nothing was posted). */
bool exl_mail_post_sink(struct exl_mailbox *mb, enum exl_mail_kind kind, struct exl_sink *sink);
bool exl_mail_post_load(struct exl_mailbox *mb, enum exl_mail_kind kind,
			struct exl_model_entry *entry, uint64_t done, uint64_t total);
bool exl_mail_post_engine_exited(struct exl_mailbox *mb, struct exl_engine_thread *t);
/* Posting that cannot fail: m was allocated by the poster beforehand
 * (exl_mail_alloc), as the prep pool does for every request. */
struct exl_mail *exl_mail_alloc(void);
void exl_mail_post_prep_done(struct exl_mailbox *mb, struct exl_mail *m, struct exl_prep *p);

/* Loop: everything posted so far, in order (NULL when none), and the
 * eventfd drained.  The caller frees each mail with free(). */
struct exl_mail *exl_mailbox_take(struct exl_mailbox *mb);

#endif
