/* The HTTP front: OpenAI- and Ollama-compatible endpoints on libevent's
 * evhttp, on the event loop's thread and base (docs/http.md).  Off unless
 * `http` listeners are configured.  Its requests become the same server
 * jobs as the msgpack protocol's (delivery/job.h), on the same engine
 * threads, prepared by the same pool (engine/prep.h).
 *
 * Each generate request owns a sink (delivery/sink.h) without a ring:
 * its jobs stream over the sink's socket queue as msgpack messages, as
 * they would to a connection, and the loop hands each EXL_MAIL_SINK_OUT
 * of such a sink (sink->http set) to exl_http_flush_sink, which turns the
 * messages into SSE events, NDJSON lines or the final JSON reply.
 *
 * Loop thread only.
 */
#ifndef EXL_HTTP_H
#define EXL_HTTP_H

#include <stdbool.h>
#include <stddef.h>

struct exl_http;
struct exl_http_req;
struct exl_loop;
struct exl_prep;

/* Binds every configured listener (lp->cfg.http) on lp's base.  *out is
 * NULL when none is configured.  0, or -1 with a message (nothing bound). */
int exl_http_start(struct exl_loop *lp, struct exl_http **out, char *err, size_t errlen);
/* Draining: closes the listeners; requests already taken finish, new
 * ones on open connections get 503. */
void exl_http_stop_listening(struct exl_http *h);
/* Requests still being answered (their replies not yet all written). */
int exl_http_busy(struct exl_http *h);
/* Ends every request (their jobs cancelled) and closes every connection. */
void exl_http_free(struct exl_http *h);

/* EXL_MAIL_SINK_OUT of a request's sink: its queued messages to the client. */
void exl_http_flush_sink(struct exl_http_req *r);
/* EXL_MAIL_PREP_DONE of a request's prep (p->sink->http set): the job to
 * its engine, or the reply; frees p. */
void exl_http_prep_done(struct exl_http *h, struct exl_prep *p);
/* The prep pool took a result: requests waiting for room go on. */
void exl_http_prep_room(struct exl_http *h);

#endif
