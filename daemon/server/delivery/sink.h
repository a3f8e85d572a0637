/* A connection's delivery end: what the engine threads write a job's
 * stream and result into.  Shared by the event loop (which owns the
 * connection) and every engine thread with a job of the connection, so it
 * is reference counted and outlives the connection until its last job has
 * ended.  Once the connection is gone (closed), deliveries are dropped.
 */
#ifndef EXL_SINK_H
#define EXL_SINK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct exl_mailbox;
struct exl_conn;
struct exl_http_req;
struct exl_ring;
struct exl_srv_job;

/* Socket-streamed bytes a connection may have queued before its jobs pause. */
#define EXL_SINK_SOCKET_LIMIT (1u << 20)

/* A queued message: a socket message, or a ring record waiting for room. */
struct exl_outmsg {
	struct exl_outmsg *next;
	uint16_t type;      /* ring record type (pending records) */
	uint64_t job;
	size_t len;
	uint8_t data[];
};

struct exl_sink {
	atomic_int refs;
	atomic_bool closed;          /* the connection is gone */
	struct exl_mailbox *mail;    /* the loop's: tells it of queued output */
	struct exl_conn *conn;       /* loop thread only; NULL once closed */
	struct exl_http_req *http;   /* the same for an HTTP request's sink (server/http/) */
	struct exl_ring *ring;       /* set by hello, before any job uses it */
	uid_t uid;
	pid_t pid;
	uint64_t conn_id;

	pthread_mutex_t mu;          /* guards everything below */
	struct exl_outmsg *out_head, *out_tail;
	size_t out_bytes;
	bool out_posted;             /* the loop has been told about out */
	bool wake_wanted;            /* a poll-mode reader is owed a wake */
	struct exl_outmsg *pend_head, *pend_tail;
	bool pend_posted;
	struct exl_srv_job *jobs;    /* live jobs (for cancel by id) */

	atomic_size_t loop_buffered; /* bytes waiting in the connection's output */
};

struct exl_sink *exl_sink_create(struct exl_mailbox *mail, uid_t uid, pid_t pid, uint64_t conn_id);
void exl_sink_ref(struct exl_sink *s);
/* Frees the sink (and its ring) with the last reference; any thread. */
void exl_sink_unref(struct exl_sink *s);

/* Any thread: queues a copy of a complete msgpack message for the socket
 * and tells the loop.  -1 when out of memory. */
int exl_sink_send(struct exl_sink *s, const void *data, size_t len);
/* Socket bytes queued and not yet sent. */
size_t exl_sink_backlog(struct exl_sink *s);
/* Loop: takes the queued socket messages, in order, and (when wake is not
 * NULL) whether a wake was asked for since the last take. */
struct exl_outmsg *exl_sink_take_out(struct exl_sink *s, bool *wake);

/* Any thread: a ring record that found no room waits here, in order, and
 * the loop retries it.  -1 when out of memory. */
int exl_sink_defer_record(struct exl_sink *s, uint16_t type, uint64_t job, const void *data,
			  size_t len);
/* Loop: writes waiting records while they fit; true when some still wait. */
bool exl_sink_retry_pending(struct exl_sink *s);

/* Any thread: writes a ring record, or defers it when the ring is full;
 * sends the socket wake a poll-mode reader asked for.  -1 when the record
 * can never fit the ring (the caller sends it on the socket instead) or
 * memory ran out. */
int exl_sink_ring_record(struct exl_sink *s, uint16_t type, uint64_t job, const void *data,
			 size_t len);

/* Any thread: asks the loop to send a poll-mode reader its {op: "wake"}
 * message.  Asks made before the loop looks are one; the loop sends it only
 * when the client has read everything sent so far (exl_conn_flush_sink), so
 * a client that never reads its socket has at most one wake waiting. */
void exl_sink_wake(struct exl_sink *s);

#endif
