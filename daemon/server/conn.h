/* One client connection, on the loop thread: reads and frames requests,
 * answers them, writes replies (with the ring fds on hello), and owns the
 * connection's sink. */
#ifndef EXL_CONN_H
#define EXL_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/server/wire/protocol.h"

struct event;
struct evbuffer;
struct exl_loop;
struct exl_prep;
struct exl_sink;
struct exl_uid_stats;

struct exl_conn {
	struct exl_conn *next, *prev;   /* the loop's list */
	struct exl_loop *lp;
	int fd;
	uint64_t id;
	uid_t uid;
	pid_t pid;
	struct event *rev, *wev;
	struct exl_sink *sink;
	struct exl_uid_stats *uidst;

	uint8_t *in;                    /* bytes read, not yet handled */
	size_t in_len, in_cap;
	struct exl_scan scan;

	struct evbuffer *out;
	uint64_t out_sent;              /* bytes written since the start */
	uint64_t out_added;             /* bytes ever queued */
	int pass_fds[2];                /* sent with the byte at fds_at */
	bool fds_pending;
	uint64_t fds_at;

	uint64_t n_requests;            /* complete messages read */
	uint64_t partial_since_ns;      /* a message (or the first) is due since; 0: none */

	bool said_hello;
	bool counted;                   /* in uidst->conns */
	bool closing;                   /* close once the output is written */
	bool reading;                   /* rev is active */
	bool retry_wanted;              /* ring records wait for room */
	int n_preps;                    /* its requests in the prep pool (prep.h) */
	bool prep_blocked;              /* a request waits for room in the pool: not reading */
};

/* A connection on fd (accepted, non-blocking), on lp's list; NULL with a
 * message when it cannot be had (fd is the caller's then). */
struct exl_conn *exl_conn_create(struct exl_loop *lp, int fd, uint64_t conn_id, char *err,
				 size_t errlen);
/* Cancels its jobs, unlinks and frees it; closes its socket. */
void exl_conn_close(struct exl_conn *c);

/* Moves the sink's queued socket messages into the connection's output. */
void exl_conn_flush_sink(struct exl_conn *c);
/* Retries ring records that waited for room; true when some still wait. */
bool exl_conn_retry_pending(struct exl_conn *c);
bool exl_conn_output_empty(const struct exl_conn *c);
/* EXL_MAIL_PREP_DONE: replies, or hands the job to its engine; frees p. */
void exl_conn_prep_done(struct exl_loop *lp, struct exl_prep *p);
/* The pool took a result of someone else's (the HTTP front's):
 * connections waiting for room read again. */
void exl_conn_prep_room(struct exl_loop *lp);
/* Reads c again if it waited for room in the pool. */
void exl_conn_prep_unblock(struct exl_conn *c);

/* SO_PEERCRED of fd; uid (uid_t)-1 when it cannot be had. */
void exl_conn_peer_cred(int fd, uid_t *uid, pid_t *pid);

/* Sends a connection-level error (no id) on a fresh socket, reads what the
 * client already sent and closes fd: a refusal at accept. */
void exl_conn_refuse(int fd, int code, const char *msg);

/* Closes c with a limit error when its first request, or the rest of a
 * started message, is older than timeout_ns.  True when it did (c may be
 * gone). */
bool exl_conn_timed_out(struct exl_conn *c, uint64_t now_ns, uint64_t timeout_ns);

#endif
