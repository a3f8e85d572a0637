/* What the event loop's parts share: the state server.c owns and conn.c
 * reads and updates.  Loop thread only, except the mailbox.
 *
 * Threads: the event loop thread owns the sockets, the connections and the
 * model registry; each loaded model has an engine thread
 * (engine/engine_thread.h); a load runs on a loader thread
 * (engine/models_registry.h); a small pool prepares requests whose cost
 * grows with what the client sent (engine/prep.h), so the loop never
 * spends seconds on one client.  They talk through mutex-protected queues
 * with an eventfd each way: the loop's mailbox (delivery/mailbox.h) and
 * each engine thread's command queue.  A connection's sink
 * (delivery/sink.h) is the one object both sides hold.
 */
#ifndef EXL_LOOP_H
#define EXL_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/server/delivery/job.h"
#include "daemon/server/delivery/mailbox.h"
#include "daemon/server/wire/config.h"

struct event;
struct event_base;
struct exl_conn;
struct exl_registry;
struct exl_prep_pool;

/* Ring records waiting for room are retried this often. */
#define EXL_LOOP_RETRY_MS 2

struct exl_loop {
	struct exl_config cfg;
	struct event_base *base;
	struct exl_mailbox mail;      /* any thread posts */
	struct exl_registry *reg;
	struct exl_prep_pool *prep;
	struct exl_uid_table uids;

	struct exl_conn *conns;       /* linked by exl_conn_create, unlinked by exl_conn_close */
	int n_conns;
	uint64_t next_job_id;
	uint64_t pending_bytes;       /* input buffered for unfinished messages */
	bool draining;
	uint64_t start_ns;

	/* Activated by conn.c, handled by server.c: */
	struct event *retry_ev;       /* ring records wait for room (armed once) */
	bool retry_armed;
	struct event *closed_ev;      /* a connection closed: a descriptor is free */
};

#endif
