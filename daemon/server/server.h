/* The daemon's event loop (server.c) and what the other daemon threads
 * share with it.
 *
 * Threads: the event loop thread owns the sockets, the connections and the
 * model registry; each loaded model has an engine thread
 * (engine_thread.c); a load runs on a loader thread (models_registry.c);
 * a small pool prepares requests whose cost grows with what the client
 * sent (tokenize, detokenize, a generate's prompt and constraint: prep.h),
 * so the loop never spends seconds on one client.  They talk through
 * mutex-protected queues with an eventfd each way: the loop's mailbox
 * (exl_server_post) and each engine thread's command queue.  A
 * connection's sink (sink.h) is the one object both sides hold.
 */
#ifndef EXL_SERVER_H
#define EXL_SERVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/server/wire/config.h"

struct event_base;
struct exl_server;
struct exl_sink;
struct exl_engine_thread;
struct exl_model_entry;
struct exl_registry;

/* Jobs of one uid, over all its connections (never freed while the server
 * lives, so a job may hold a pointer). */
struct exl_uid_stats {
	struct exl_uid_stats *next;
	uid_t uid;
	atomic_int jobs;
	int conns;                /* open connections (loop thread only) */
};

/* What other threads post to the loop. */
enum exl_mail_kind {
	EXL_MAIL_SINK_OUT,       /* sink has socket messages queued */
	EXL_MAIL_SINK_PENDING,   /* sink has ring records waiting for room */
	EXL_MAIL_LOAD_PROGRESS,  /* entry: a = bytes done, b = total */
	EXL_MAIL_LOAD_DONE,      /* entry: the loader thread finished */
	EXL_MAIL_ENGINE_EXITED,  /* entry: its engine thread ended */
	EXL_MAIL_PREP_DONE,      /* prep: a request the pool prepared (prep.h) */
};

struct exl_prep;

struct exl_mail {
	struct exl_mail *next;
	enum exl_mail_kind kind;
	struct exl_sink *sink;          /* a reference, dropped by the loop */
	struct exl_model_entry *entry;
	struct exl_prep *prep;          /* the loop's from here on */
	uint64_t a, b;
};

/* Any thread.  Takes ownership of m (malloc'ed). */
void exl_server_post(struct exl_server *s, struct exl_mail *m);
/* Any thread: allocates and posts; false when out of memory. */
bool exl_server_post_sink(struct exl_server *s, enum exl_mail_kind kind, struct exl_sink *sink);

/* Loop thread only. */
const struct exl_config *exl_server_config(const struct exl_server *s);
struct exl_registry *exl_server_registry(struct exl_server *s);
struct event_base *exl_server_base(struct exl_server *s);
struct exl_uid_stats *exl_server_uid_stats(struct exl_server *s, uid_t uid);
bool exl_server_draining(const struct exl_server *s);
uint64_t exl_server_next_job_id(struct exl_server *s);
int exl_server_n_connections(const struct exl_server *s);
/* The budget of input buffered for unfinished messages (max_pending_bytes):
 * whether bytes more fit, and moving the count (negative gives back). */
bool exl_server_pending_fits(const struct exl_server *s, size_t bytes);
void exl_server_pending_add(struct exl_server *s, int64_t bytes);
double exl_server_uptime(const struct exl_server *s);
/* Wakes every engine thread (a client freed room in its ring). */
void exl_server_nudge_engines(struct exl_server *s);
/* A connection closed: cancel its jobs on every engine. */
void exl_server_cancel_sink(struct exl_server *s, struct exl_sink *sink);
struct exl_prep_pool *exl_server_prep_pool(struct exl_server *s);
/* The pool took a result: connections waiting for room read again. */
void exl_server_prep_room(struct exl_server *s);

/* server.c <-> conn.c */
struct exl_conn;
struct exl_conn *exl_conn_create(struct exl_server *s, int fd, uint64_t conn_id, char *err,
				 size_t errlen);
void exl_conn_close(struct exl_conn *c);
/* Moves the sink's queued socket messages into the connection's output. */
void exl_conn_flush_sink(struct exl_conn *c);
/* Retries ring records that waited for room; true when some still wait. */
bool exl_conn_retry_pending(struct exl_conn *c);
bool exl_conn_output_empty(const struct exl_conn *c);
/* EXL_MAIL_PREP_DONE: replies, or hands the job to its engine; frees p. */
void exl_conn_prep_done(struct exl_server *s, struct exl_prep *p);
/* Reads c again if it waited for room in the pool. */
void exl_conn_prep_unblock(struct exl_conn *c);
struct exl_conn *exl_sink_conn(struct exl_sink *sink);
void exl_server_conn_closed(struct exl_server *s, struct exl_conn *c);
void exl_server_want_retry(struct exl_server *s);

/* The daemon's main: runs until SIGTERM / SIGINT (returns 0 after the
 * drain) or a fatal start-up error (returns 1 with a message logged). */
int exl_server_run(const struct exl_config *cfg);

#endif
