/* One client connection, on the loop thread: reads and frames requests,
 * answers them, writes replies (with the ring fds on hello), and owns the
 * connection's sink. */
#ifndef EXL_CONN_H
#define EXL_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/protocol.h"

struct event;
struct evbuffer;
struct exl_server;
struct exl_sink;
struct exl_uid_stats;

struct exl_conn {
	struct exl_conn *next, *prev;   /* the server's list */
	struct exl_server *srv;
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

	bool said_hello;
	bool counted;                   /* in uidst->conns */
	bool over_limit;                /* the uid has max_connections_per_uid already */
	bool closing;                   /* close once the output is written */
	bool reading;                   /* rev is active */
	bool retry_wanted;              /* ring records wait for room */
};

#endif
