/* Preparing requests off the event loop: tokenize and detokenize, and a
 * generate's job creation (tokenizing its prompts, compiling its grammar,
 * JSON schema or regex).  Each costs time in proportion to what the client
 * sent, up to seconds for a 16 MiB text or a 1 MiB schema; on the loop
 * thread that was a stall of every other connection.
 *
 * A request becomes a struct exl_prep on the loop: the message's bytes
 * (copied out of the connection's input buffer), the msgpack zone and the
 * decoded request, which points into both.  A small pool of threads runs
 * exl_prep_run() on it and posts it back to the loop (EXL_MAIL_PREP_DONE in
 * the server's mailbox), where conn.c sends the reply or hands the job to
 * the engine thread.  A request whose preparation is bounded small
 * (exl_prep_cheap) is run on the loop at once instead, when its
 * connection has nothing in the pool: a round trip through the pool costs
 * more than it, and it never waits behind other clients' large ones.
 *
 * Order: the pool runs at most one request of a connection at a time, in
 * the order they came, so a connection's jobs reach the engine in the
 * order it sent them and its tokenize / detokenize replies keep their
 * order; other connections' requests run beside them.
 *
 * Lifetimes: an exl_prep holds a reference on its connection's sink (the
 * connection may close meanwhile; its requests are then skipped or their
 * results dropped) and counts in its model's engine thread's n_preparing,
 * which keeps that thread, and so the model and its tokenizer, alive until
 * the loop has taken the result (engine_thread.c).
 */
#ifndef EXL_PREP_H
#define EXL_PREP_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/server/wire/protocol.h"

struct exl_mailbox;
struct exl_sink;
struct exl_model;
struct exl_engine_thread;
struct exl_srv_job;
struct exl_mail;

/* Threads of the pool.  Two: one connection's huge request (its requests
 * run one at a time) leaves the other thread to everyone else. */
#define EXL_PREP_THREADS 2
/* Requests of one connection in the pool; past it the connection's next
 * tokenize / detokenize / generate waits (its input is not read). */
#define EXL_PREP_PER_CONN 4
/* Requests, and message bytes, in the pool over all connections; past
 * either, new ones wait the same way.  One request is always taken. */
#define EXL_PREP_MAX_ITEMS 64
#define EXL_PREP_MAX_BYTES ((size_t)64 << 20)
/* A request is cheap (prepared on the loop) with at most this much text
 * or this many ids, and no grammar, JSON schema or regex: well under a
 * millisecond of tokenizing. */
#define EXL_PREP_CHEAP_BYTES 4096
#define EXL_PREP_CHEAP_IDS 4096

struct exl_prep {
	struct exl_prep *next;            /* the pool's queue */
	/* the request */
	uint8_t *msg;                     /* its bytes (malloc'ed or mapped, see prep.c) */
	size_t msg_len;
	msgpack_unpacked up;              /* decoded from msg */
	struct exl_req req;               /* decoded from up; points into msg and up's zone */
	struct exl_packed_id id;
	/* set by the loop before it runs */
	struct exl_sink *sink;            /* a reference */
	struct exl_engine_thread *et;     /* n_preparing counts this request */
	const struct exl_model *model;
	struct exl_srv_job *job;          /* generate: the job (its exl_job made here) */
	struct exl_mail *mail;            /* allocated up front: posting cannot fail */
	bool pooled;                      /* in the pool (not run on the loop) */
	/* the outcome (exl_prep_run) */
	int code;                         /* EXL_OK, an error code, or -1: the connection closed */
	char err[600];
	msgpack_sbuffer reply;            /* tokenize / detokenize: the packed reply */
};

/* A request holding a copy of the message's len bytes (the caller unpacks
 * p->msg into p->up); NULL when out of memory. */
struct exl_prep *exl_prep_new(const uint8_t *data, size_t len);
/* A request decoded by its caller rather than from msgpack (the HTTP
 * front): no message bytes; p->up.zone is a fresh zone for everything the
 * caller makes p->req point at, freed with p.  NULL when out of memory. */
struct exl_prep *exl_prep_new_decoded(void);
/* Frees p and everything it holds (its job too, when it still has one). */
void exl_prep_free(struct exl_prep *p);

/* Whether p (decoded, model chosen) is cheap enough to run on the loop. */
bool exl_prep_cheap(const struct exl_prep *p);
/* Does the work: a reply in p->reply, or p->job->job made, or an error in
 * p->code / p->err.  Skips the work (code -1, or busy / shutdown) when the
 * connection closed or the model stopped taking jobs.  Any thread. */
void exl_prep_run(struct exl_prep *p);

/* The pool.  Loop thread, but for the workers inside. */
struct exl_prep_pool;
struct exl_prep_pool *exl_prep_pool_create(struct exl_mailbox *mail, char *err, size_t errlen);
/* Stops the threads and frees what is still queued (the daemon is done). */
void exl_prep_pool_free(struct exl_prep_pool *pool);
/* Whether a request of len message bytes, from a connection with n_conn
 * requests in the pool, may go in now. */
bool exl_prep_pool_room(const struct exl_prep_pool *pool, int n_conn, size_t len);
/* Queues p (pooled set, counted); the result comes as EXL_MAIL_PREP_DONE. */
void exl_prep_pool_submit(struct exl_prep_pool *pool, struct exl_prep *p);
/* The loop took p's result: it no longer counts. */
void exl_prep_pool_done(struct exl_prep_pool *pool, const struct exl_prep *p);
/* Requests in the pool (queued or running). */
int exl_prep_pool_count(const struct exl_prep_pool *pool);

#endif
