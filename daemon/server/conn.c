/* A client connection: framing, request dispatch, replies. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <linux/sockios.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "daemon/core/model/model.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "daemon/core/util/log.h"
#include "daemon/server/conn.h"
#include "daemon/server/delivery/job.h"
#include "daemon/server/delivery/ring.h"
#include "daemon/server/delivery/sink.h"
#include "daemon/server/engine/engine_thread.h"
#include "daemon/server/engine/models_registry.h"
#include "daemon/server/engine/prep.h"
#include "daemon/server/loop.h"

#define READ_CHUNK (64u << 10)
/* Replies queued for a client that does not read: past this, the daemon
 * stops reading its requests until the output drains. */
#define OUT_LIMIT (8u << 20)

static void on_read(evutil_socket_t fd, short what, void *arg);
static void on_write(evutil_socket_t fd, short what, void *arg);
static void try_write(struct exl_conn *c);
static void send_error(struct exl_conn *c, const struct exl_packed_id *id, int code,
		       const char *msg);
static void process_input(struct exl_conn *c);

/* Ring records wait for room: the loop retries them soon (server.c). */
static void want_retry(struct exl_loop *lp)
{
	struct timeval tv = { 0, EXL_LOOP_RETRY_MS * 1000 };

	if (!lp->retry_armed) {
		evtimer_add(lp->retry_ev, &tv);
		lp->retry_armed = true;
	}
}

/* The budget of input buffered for unfinished messages (max_pending_bytes):
 * whether bytes more fit, and moving the count (negative gives back). */
static bool pending_fits(const struct exl_loop *lp, size_t bytes)
{
	return bytes <= lp->cfg.max_pending_bytes &&
	       lp->pending_bytes <= lp->cfg.max_pending_bytes - bytes;
}

static void pending_add(struct exl_loop *lp, int64_t bytes)
{
	lp->pending_bytes += (uint64_t)bytes;
}

/* The pool took a result: connections waiting for room read again. */
void exl_conn_prep_room(struct exl_loop *lp)
{
	for (struct exl_conn *c = lp->conns; c; c = c->next)
		if (c->prep_blocked)
			exl_conn_prep_unblock(c);
}

void exl_conn_peer_cred(int fd, uid_t *uid, pid_t *pid)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	*uid = (uid_t)-1;
	*pid = 0;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0) {
		*uid = cr.uid;
		*pid = cr.pid;
	}
}

struct exl_conn *exl_conn_create(struct exl_loop *lp, int fd, uint64_t conn_id, char *err,
				 size_t errlen)
{
	struct exl_conn *c = calloc(1, sizeof(*c));

	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	c->lp = lp;
	c->fd = fd;
	c->id = conn_id;
	c->pass_fds[0] = c->pass_fds[1] = -1;
	exl_conn_peer_cred(fd, &c->uid, &c->pid);
	if (c->uid == (uid_t)-1) {
		snprintf(err, errlen, "SO_PEERCRED: %s", strerror(errno));
		goto fail;
	}
	c->uidst = exl_uid_stats_get(&lp->uids, c->uid);
	c->sink = exl_sink_create(&lp->mail, c->uid, c->pid, conn_id);
	c->out = evbuffer_new();
	c->rev = event_new(lp->base, fd, EV_READ | EV_PERSIST, on_read, c);
	c->wev = event_new(lp->base, fd, EV_WRITE | EV_PERSIST, on_write, c);
	if (!c->uidst || !c->sink || !c->out || !c->rev || !c->wev) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	c->sink->conn = c;
	c->uidst->conns++;
	c->counted = true;
	c->partial_since_ns = exl_now_ns(); /* the first request is due */
	if (event_add(c->rev, NULL)) {
		snprintf(err, errlen, "event_add failed");
		goto fail;
	}
	c->reading = true;
	c->next = lp->conns;
	if (lp->conns)
		lp->conns->prev = c;
	lp->conns = c;
	lp->n_conns++;
	return c;
fail:
	if (c->rev)
		event_free(c->rev);
	if (c->wev)
		event_free(c->wev);
	if (c->out)
		evbuffer_free(c->out);
	if (c->sink)
		exl_sink_unref(c->sink);
	free(c);
	return NULL;
}

/* Input buffer capacity past the first IN_BASE bytes counts against the
 * server's max_pending_bytes. */
#define IN_BASE (2 * (size_t)READ_CHUNK)

static size_t over_base(size_t cap)
{
	return cap > IN_BASE ? cap - IN_BASE : 0;
}

/* Resizes c's input buffer to cap bytes (0 frees it) and moves the budget.
 * The buffer is a mapping of its own, not the heap: a freed one goes back
 * to the system at once (glibc raises its mmap threshold past a freed
 * large block and then keeps such blocks in the heap, so buffers that
 * hostile clients made the daemon grow would stay in its RSS), and mremap
 * grows it without copying.  -1 when it cannot be had (c unchanged). */
static int set_in_buffer(struct exl_conn *c, size_t cap)
{
	void *p = NULL;

	if (cap && c->in)
		p = mremap(c->in, c->in_cap, cap, MREMAP_MAYMOVE);
	else if (cap)
		p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (cap && p == MAP_FAILED)
		return -1;
	if (!cap && c->in)
		munmap(c->in, c->in_cap);
	pending_add(c->lp, (int64_t)over_base(cap) - (int64_t)over_base(c->in_cap));
	c->in = p;
	c->in_cap = cap;
	return 0;
}

void exl_conn_refuse(int fd, int code, const char *msg)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	uint8_t sink[4096];

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	exl_pack_error(&pk, &sb, NULL, code, msg);
	if (sb.data && send(fd, sb.data, sb.size, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		exl_log(EXL_LOG_DEBUG, "refusing a connection: send: %s", strerror(errno));
	msgpack_sbuffer_destroy(&sb);
	/* A Unix socket closed with unread input resets the peer, which may
	 * then lose the error before reading it: take what the client sent
	 * (its hello, as a rule) first. */
	for (int i = 0; i < 16 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
		;
	close(fd);
}

/* Logs msg, sends it as a connection-level limit error, drops the input
 * and closes c once the error is written (c may be gone on return). */
static void close_with_limit(struct exl_conn *c, const char *msg)
{
	exl_log(EXL_LOG_WARN, "conn %llu (uid %u pid %d): %s", (unsigned long long)c->id,
		(unsigned)c->uid, (int)c->pid, msg);
	send_error(c, NULL, EXL_E_LIMIT, msg);
	c->closing = true;
	event_del(c->rev);
	c->reading = false;
	c->in_len = 0;
	set_in_buffer(c, 0);
	try_write(c);
}

bool exl_conn_timed_out(struct exl_conn *c, uint64_t now_ns, uint64_t timeout_ns)
{
	char msg[160];

	/* Not reading: complete requests wait for the client to take its
	 * replies, which is not this timeout's business. */
	if (c->closing || !c->reading || !c->partial_since_ns ||
	    now_ns - c->partial_since_ns < timeout_ns)
		return false;
	snprintf(msg, sizeof(msg), "%s within request_timeout_ms (%llu); closing the connection",
		 c->n_requests ? "the rest of a started message did not arrive" :
				 "no request arrived",
		 (unsigned long long)(timeout_ns / 1000000));
	close_with_limit(c, msg);
	return true;
}

void exl_conn_close(struct exl_conn *c)
{
	struct exl_sink *s = c->sink;

	exl_log(EXL_LOG_DEBUG, "conn %llu: closed", (unsigned long long)c->id);
	if (c->counted)
		c->uidst->conns--;
	atomic_store(&s->closed, true);
	s->conn = NULL;
	exl_registry_cancel_sink(c->lp->reg, s);
	if (c->prev)
		c->prev->next = c->next;
	else
		c->lp->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->lp->n_conns--;
	/* a descriptor is free again */
	event_active(c->lp->closed_ev, EV_TIMEOUT, 0);
	event_free(c->rev);
	event_free(c->wev);
	evbuffer_free(c->out);
	close(c->fd);
	set_in_buffer(c, 0);
	exl_sink_unref(s);
	free(c);
}

bool exl_conn_output_empty(const struct exl_conn *c)
{
	return evbuffer_get_length(c->out) == 0;
}

/* ---- output ---- */

static void set_reading(struct exl_conn *c, bool on)
{
	if (on == c->reading || c->closing)
		return;
	if (on)
		event_add(c->rev, NULL);
	else
		event_del(c->rev);
	c->reading = on;
}

static void queue(struct exl_conn *c, const void *data, size_t len)
{
	if (evbuffer_add(c->out, data, len)) {
		exl_log(EXL_LOG_ERR, "conn %llu: out of memory queueing %zu bytes; closing",
			(unsigned long long)c->id, len);
		c->closing = true;
		return;
	}
	c->out_added += len;
}

static void queue_sbuf(struct exl_conn *c, msgpack_sbuffer *sb)
{
	if (sb->data)
		queue(c, sb->data, sb->size);
}

/* Returns -1 when the connection was closed. */
static int write_some(struct exl_conn *c)
{
	while (evbuffer_get_length(c->out)) {
		struct evbuffer_iovec v[16];
		struct iovec iov[16];
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(2 * sizeof(int))];
		} cm;
		struct msghdr mh = { .msg_iov = iov };
		size_t limit = SIZE_MAX;
		bool attach = false;

		if (c->fds_pending) {
			if (c->out_sent < c->fds_at)
				limit = (size_t)(c->fds_at - c->out_sent);
			else
				attach = true;
		}
		int n = evbuffer_peek(c->out, -1, NULL, v, 16);
		if (n > 16)
			n = 16;
		size_t total = 0;
		int k = 0;
		for (; k < n && total < limit; k++) {
			size_t len = v[k].iov_len;
			if (len > limit - total)
				len = limit - total;
			iov[k].iov_base = v[k].iov_base;
			iov[k].iov_len = len;
			total += len;
		}
		mh.msg_iovlen = (size_t)k;
		if (attach) {
			memset(&cm, 0, sizeof(cm));
			mh.msg_control = cm.buf;
			mh.msg_controllen = sizeof(cm.buf);
			struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
			h->cmsg_level = SOL_SOCKET;
			h->cmsg_type = SCM_RIGHTS;
			h->cmsg_len = CMSG_LEN(2 * sizeof(int));
			memcpy(CMSG_DATA(h), c->pass_fds, 2 * sizeof(int));
		}
		ssize_t sent = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (sent < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				event_add(c->wev, NULL);
				return 0;
			}
			exl_log(EXL_LOG_DEBUG, "conn %llu: write: %s", (unsigned long long)c->id,
				strerror(errno));
			exl_conn_close(c);
			return -1;
		}
		if (attach) {
			c->fds_pending = false;
			exl_ring_close_fds(c->sink->ring);
		}
		evbuffer_drain(c->out, (size_t)sent);
		c->out_sent += (uint64_t)sent;
	}
	event_del(c->wev);
	return 0;
}

static void try_write(struct exl_conn *c)
{
	size_t before = evbuffer_get_length(c->out);

	if (write_some(c))
		return;
	size_t after = evbuffer_get_length(c->out);
	atomic_store(&c->sink->loop_buffered, after);
	/* Socket-streamed jobs pause on a backlog; tell them it shrank. */
	if (before >= EXL_SINK_SOCKET_LIMIT / 2 && after < EXL_SINK_SOCKET_LIMIT / 2)
		exl_registry_wake_all(c->lp->reg);
	if (after == 0 && c->closing) {
		exl_conn_close(c);
		return;
	}
	if (after < OUT_LIMIT && !c->reading && !c->closing && !c->prep_blocked) {
		/* Requests already buffered are handled from on_read, not
		 * from here, so this never recurses. */
		set_reading(c, true);
		event_active(c->rev, EV_READ, 0);
	}
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	try_write(arg);
}

/* Whether the client has bytes from us it has not read: still queued here,
 * or sent and waiting in its socket (SIOCOUTQ on a Unix socket counts the
 * bytes the peer has not read yet). */
static bool client_has_unread(const struct exl_conn *c)
{
	int n = 0;

	if (evbuffer_get_length(c->out))
		return true;
	return ioctl(c->fd, SIOCOUTQ, &n) == 0 && n > 0;
}

void exl_conn_flush_sink(struct exl_conn *c)
{
	/* {op: "wake"} in msgpack */
	static const uint8_t wake_msg[] = { 0x81, 0xa2, 'o', 'p', 0xa4, 'w', 'a', 'k', 'e' };
	bool wake = false;
	struct exl_outmsg *m = exl_sink_take_out(c->sink, &wake);

	while (m) {
		struct exl_outmsg *next = m->next;
		queue(c, m->data, m->len);
		free(m);
		m = next;
	}
	/* A reader sleeping in poll() wakes for any unread byte and then
	 * looks at its ring (the record that asked for this wake is already
	 * there), so a wake is owed only when it has read everything.  That
	 * keeps at most one wake waiting for a client that never reads its
	 * socket, however often it bumps poll_epoch. */
	if (wake && !client_has_unread(c))
		queue(c, wake_msg, sizeof(wake_msg));
	try_write(c);
}

bool exl_conn_retry_pending(struct exl_conn *c)
{
	return exl_sink_retry_pending(c->sink);
}

/* ---- replies ---- */

struct reply {
	msgpack_sbuffer sb;
	msgpack_packer pk;
};

static void reply_init(struct reply *r)
{
	msgpack_sbuffer_init(&r->sb);
	msgpack_packer_init(&r->pk, &r->sb, msgpack_sbuffer_write);
}

static void reply_send(struct exl_conn *c, struct reply *r)
{
	queue_sbuf(c, &r->sb);
	msgpack_sbuffer_destroy(&r->sb);
}

static void send_error(struct exl_conn *c, const struct exl_packed_id *id, int code,
		       const char *msg)
{
	struct reply r;

	reply_init(&r);
	exl_pack_error(&r.pk, &r.sb, id, code, msg);
	reply_send(c, &r);
}

/* ---- ops ---- */

static void op_hello(struct exl_conn *c, const struct exl_req *req, const struct exl_packed_id *id)
{
	const struct exl_config *cfg = &c->lp->cfg;
	struct reply r;
	char err[256];
	uint32_t ring_size = req->u.hello.ring_size ? req->u.hello.ring_size : cfg->ring_size;

	if (c->said_hello) {
		send_error(c, id, EXL_E_BAD_REQUEST, "hello: this connection already said hello");
		return;
	}
	if (req->u.hello.ring) {
		struct exl_ring *ring = exl_ring_create(ring_size, err, sizeof(err));
		if (!ring) {
			send_error(c, id, EXL_E_INTERNAL, err);
			return;
		}
		c->sink->ring = ring;
	}
	c->said_hello = true;
	reply_init(&r);
	exl_pack_reply(&r.pk, &r.sb, EXL_OP_HELLO, id, c->sink->ring ? 9 : 7);
	exl_pack_key(&r.pk, "version");
	msgpack_pack_int(&r.pk, EXL_PROTOCOL_VERSION);
	exl_pack_key(&r.pk, "server");
	exl_pack_cstr(&r.pk, "exld " EXL_VERSION);
	exl_pack_key(&r.pk, "max_message");
	msgpack_pack_uint32(&r.pk, cfg->max_message);
	exl_pack_key(&r.pk, "uid");
	msgpack_pack_uint32(&r.pk, (uint32_t)c->uid);
	exl_pack_key(&r.pk, "pid");
	msgpack_pack_int32(&r.pk, (int32_t)c->pid);
	/* what a client may ask for: it sends no option of a group not here */
	exl_pack_key(&r.pk, "features");
	msgpack_pack_array(&r.pk, exl_daemon_n_features);
	for (size_t i = 0; i < exl_daemon_n_features; i++)
		exl_pack_cstr(&r.pk, exl_daemon_features[i]);
	exl_pack_key(&r.pk, "ring");
	if (c->sink->ring) {
		msgpack_pack_true(&r.pk);
		exl_pack_key(&r.pk, "ring_size");
		msgpack_pack_uint32(&r.pk, c->sink->ring->size);
		exl_pack_key(&r.pk, "max_record");
		msgpack_pack_uint32(&r.pk, c->sink->ring->max_record);
		c->pass_fds[0] = c->sink->ring->data_fd;
		c->pass_fds[1] = c->sink->ring->ctrl_fd;
		c->fds_pending = true;
		c->fds_at = c->out_added;
	} else {
		msgpack_pack_false(&r.pk);
	}
	reply_send(c, &r);
	exl_log(EXL_LOG_DEBUG, "conn %llu: hello (uid %u pid %d)%s", (unsigned long long)c->id,
		(unsigned)c->uid, (int)c->pid, c->sink->ring ? ", ring" : "");
}

static void op_models(struct exl_conn *c, const struct exl_packed_id *id)
{
	struct reply r;

	reply_init(&r);
	exl_pack_reply(&r.pk, &r.sb, EXL_OP_MODELS, id, 1);
	exl_pack_key(&r.pk, "models");
	exl_registry_pack_models(c->lp->reg, &r.pk);
	reply_send(c, &r);
}

static bool admin(struct exl_conn *c, const char *op, const struct exl_packed_id *id)
{
	char msg[128];

	if (exl_config_is_admin(&c->lp->cfg, c->uid))
		return true;
	snprintf(msg, sizeof(msg), "%s: uid %u is not an admin", op, (unsigned)c->uid);
	send_error(c, id, EXL_E_FORBIDDEN, msg);
	return false;
}

static void op_load(struct exl_conn *c, const struct exl_req *req, const struct exl_packed_id *id)
{
	char err[512];

	if (!admin(c, "load", id))
		return;
	if (c->lp->draining) {
		send_error(c, id, EXL_E_SHUTDOWN, "load: the daemon is shutting down");
		return;
	}
	exl_log(EXL_LOG_INFO, "conn %llu (uid %u pid %d): load '%s'", (unsigned long long)c->id,
		(unsigned)c->uid, (int)c->pid, req->model);
	int code = exl_registry_load(c->lp->reg, req->model, c->sink, id, false,
				     err, sizeof(err));
	if (code)
		send_error(c, id, code, err);
}

static void op_unload(struct exl_conn *c, const struct exl_req *req, const struct exl_packed_id *id)
{
	char err[512];

	if (!admin(c, "unload", id))
		return;
	exl_log(EXL_LOG_INFO, "conn %llu (uid %u pid %d): unload '%s'", (unsigned long long)c->id,
		(unsigned)c->uid, (int)c->pid, req->model);
	int code = exl_registry_unload(c->lp->reg, req->model, req->u.unload.cancel,
				       c->sink, id, err, sizeof(err));
	if (code)
		send_error(c, id, code, err);
}

static struct exl_model_entry *pick(struct exl_conn *c, const struct exl_req *req,
				    const struct exl_packed_id *id)
{
	char err[256];
	int code;

	struct exl_model_entry *e = exl_registry_pick(c->lp->reg, req->model,
						      &code, err, sizeof(err));
	if (!e)
		send_error(c, id, code, err);
	return e;
}

/* ---- requests prepared off the loop (prep.h) ---- */

/* What handle_message does with the bytes of a message. */
enum { MSG_DONE, MSG_CLOSE, MSG_WAIT };

static void free_reference(const void *data, size_t len, void *arg)
{
	(void)len;
	(void)arg;
	free((void *)data);
}

/* Queues a reply the pool packed, without copying it (a tokenize reply
 * may be tens of MiB). */
static void queue_packed(struct exl_conn *c, msgpack_sbuffer *sb)
{
	size_t len = sb->size;
	char *data = msgpack_sbuffer_release(sb);

	if (!data)
		return;
	if (evbuffer_add_reference(c->out, data, len, free_reference, NULL)) {
		free(data);
		exl_log(EXL_LOG_ERR, "conn %llu: out of memory queueing %zu bytes; closing",
			(unsigned long long)c->id, len);
		c->closing = true;
		return;
	}
	c->out_added += len;
}

/* Where p is prepared: 1 on the loop now (cheap, and nothing of the
 * connection is in the pool to keep order with), 0 in the pool, -1 not
 * yet (the pool is full: the message waits in the input buffer). */
static int prep_place(struct exl_conn *c, const struct exl_prep *p)
{
	if (c->n_preps == 0 && exl_prep_cheap(p))
		return 1;
	return exl_prep_pool_room(c->lp->prep, c->n_preps, p->msg_len) ? 0 : -1;
}

static void prep_generate_done(struct exl_conn *c, struct exl_prep *p)
{
	struct exl_srv_job *j = p->job;

	j->preparing = false;
	if (p->code != EXL_OK) {
		if (c && p->code > 0)
			send_error(c, &p->id, p->code, p->err);
		return; /* the job goes with p */
	}
	if (!c)
		return; /* its connection closed meanwhile */
	if (j->cancel_asked)
		exl_job_cancel(j->job);
	p->job = NULL;
	/* j counts in n_jobs before p lets go of n_preparing (engine_thread.c) */
	if (exl_engine_thread_add(p->et, j)) {
		send_error(c, &p->id, EXL_E_INTERNAL, "generate: out of memory");
		exl_srv_job_free(j);
	}
}

/* p's result: the reply, an error, or the job handed to its engine; frees
 * p.  The connection, or NULL when it closed meanwhile. */
static struct exl_conn *prep_finish(struct exl_loop *lp, struct exl_prep *p)
{
	struct exl_conn *c = p->sink->conn;
	struct exl_engine_thread *et = p->et;
	bool pooled = p->pooled;

	if (pooled) {
		exl_prep_pool_done(lp->prep, p);
		if (c)
			c->n_preps--;
	}
	if (p->req.op == EXL_OPC_GENERATE || p->req.op == EXL_OPC_EMBED)
		prep_generate_done(c, p);
	else if (c && p->code > 0)
		send_error(c, &p->id, p->code, p->err);
	else if (c && p->code == EXL_OK)
		queue_packed(c, &p->reply);
	exl_prep_free(p);
	/* the model may go only now (the job, if any, holds its engine) */
	exl_engine_thread_prep_done(et);
	if (pooled)
		exl_conn_prep_room(lp);
	return c;
}

void exl_conn_prep_done(struct exl_loop *lp, struct exl_prep *p)
{
	struct exl_conn *c = prep_finish(lp, p);

	if (c)
		try_write(c);
}

void exl_conn_prep_unblock(struct exl_conn *c)
{
	c->prep_blocked = false;
	/* The message that waited is whole: the wait was the daemon's, and
	 * request_timeout_ms must not close the connection for it. */
	if (c->in_len)
		c->partial_since_ns = exl_now_ns();
	/* a client behind on its replies is read again by try_write */
	if (c->closing || c->reading || evbuffer_get_length(c->out) >= OUT_LIMIT)
		return;
	set_reading(c, true);
	event_active(c->rev, EV_READ, 0);
}

/* Runs p now (place 1) or queues it in the pool (0); takes p. */
static void prep_launch(struct exl_conn *c, struct exl_prep **pp, int place)
{
	struct exl_prep *p = *pp;

	if (place == 0) {
		/* the result's mail, so that posting it cannot fail */
		p->mail = calloc(1, sizeof(*p->mail));
		if (!p->mail) {
			send_error(c, &p->id, EXL_E_INTERNAL, "out of memory");
			return;
		}
	}
	p->sink = c->sink;
	exl_sink_ref(c->sink);
	atomic_fetch_add(&p->et->n_preparing, 1);
	*pp = NULL;
	if (place == 1) {
		exl_prep_run(p);
		/* handle_message's caller writes (try_write may close c) */
		prep_finish(c->lp, p);
		return;
	}
	c->n_preps++;
	exl_prep_pool_submit(c->lp->prep, p);
}

/* tokenize, detokenize */
static int op_prepared(struct exl_conn *c, struct exl_prep **pp)
{
	struct exl_prep *p = *pp;
	struct exl_model_entry *e = pick(c, &p->req, &p->id);

	if (!e)
		return MSG_DONE;
	int place = prep_place(c, p);
	if (place < 0)
		return MSG_WAIT;
	p->model = e->model;
	p->et = e->et;
	prep_launch(c, pp, place);
	return MSG_DONE;
}

static int op_generate(struct exl_conn *c, struct exl_prep **pp)
{
	const struct exl_config *cfg = &c->lp->cfg;
	struct exl_prep *p = *pp;
	const struct exl_packed_id *id = &p->id;
	struct exl_req_generate *g = &p->req.u.gen;
	char err[512];
	int max_jobs, max_tokens;

	if (c->lp->draining) {
		send_error(c, id, EXL_E_SHUTDOWN, "generate: the daemon is shutting down");
		return MSG_DONE;
	}
	struct exl_model_entry *e = pick(c, &p->req, id);
	if (!e)
		return MSG_DONE;
	if (g->stream == EXL_STREAM_DEFAULT)
		g->stream = c->sink->ring ? EXL_STREAM_RING : EXL_STREAM_SOCKET;
	if (g->stream == EXL_STREAM_RING && !c->sink->ring) {
		send_error(c, id, EXL_E_BAD_REQUEST,
			   "generate: stream: \"ring\" needs a ring (say hello with ring: true first)");
		return MSG_DONE;
	}
	if (g->s.return_logits && g->stream != EXL_STREAM_SOCKET) {
		send_error(c, id, EXL_E_BAD_REQUEST,
			   "generate: return_logits: logits are streamed over the socket only "
			   "(stream: \"socket\")");
		return MSG_DONE;
	}
	exl_config_uid_limits(cfg, c->uid, &max_jobs, &max_tokens);
	/* The default length gives way to a lower limit; a length asked for
	 * does not. */
	if (!g->max_new_tokens_set && g->s.max_new_tokens > max_tokens)
		g->s.max_new_tokens = max_tokens;
	if (g->s.max_new_tokens > max_tokens) {
		snprintf(err, sizeof(err), "generate: max_new_tokens %d is over uid %u's limit of %d",
			 g->s.max_new_tokens, (unsigned)c->uid, max_tokens);
		send_error(c, id, EXL_E_LIMIT, err);
		return MSG_DONE;
	}
	char draft_path[EXL_CONFIG_MAX_PATH + EXL_MAX_NAME + 8];

	if (g->s.draft_model) {
		int code = exl_registry_draft_path(c->lp->reg, e, g->s.draft_model, draft_path,
						   sizeof(draft_path), err, sizeof(err));

		if (code != EXL_OK) {
			send_error(c, id, code, err);
			return MSG_DONE;
		}
	}
	int place = prep_place(c, p);
	if (place < 0)
		return MSG_WAIT;
	/* The job counts from here, while it is prepared too. */
	int code;
	struct exl_srv_job *j = exl_srv_job_create(c->sink, c->uidst, max_jobs,
						   ++c->lp->next_job_id, &code);
	if (!j) {
		if (code == EXL_E_LIMIT)
			snprintf(err, sizeof(err), "generate: uid %u already has %d jobs running "
				 "(its limit)", (unsigned)c->uid, max_jobs);
		else
			snprintf(err, sizeof(err), "generate: out of memory");
		send_error(c, id, code, err);
		return MSG_DONE;
	}
	j->et = e->et;
	j->model = e->et->name;
	j->req_id = *id;
	j->stream = g->stream;
	j->return_text = g->return_text < 0 ? g->stream == EXL_STREAM_NONE : g->return_text;
	if (g->s.draft_model) {
		j->draft_name = strdup(g->s.draft_model);
		j->draft_path = strdup(draft_path);
		if (!j->draft_name || !j->draft_path) {
			send_error(c, id, EXL_E_INTERNAL, "generate: out of memory");
			exl_srv_job_free(j);
			return MSG_DONE;
		}
	}
	j->embed = p->req.op == EXL_OPC_EMBED;
	p->job = j;
	p->model = e->model;
	p->et = e->et;
	prep_launch(c, pp, place);
	return MSG_DONE;
}

static void op_cancel(struct exl_conn *c, const struct exl_req *req, const struct exl_packed_id *id)
{
	bool preparing;
	struct exl_engine_thread *et = exl_srv_job_mark_cancel(c->sink, req->u.cancel.job,
								&preparing);
	struct reply r;
	char msg[128];

	/* et stays valid: engine threads are freed on this (the loop) thread,
	 * and only after their last job ended. */
	if (!et) {
		snprintf(msg, sizeof(msg), "cancel: this connection has no running job %llu",
			 (unsigned long long)req->u.cancel.job);
		send_error(c, id, EXL_E_UNKNOWN_JOB, msg);
		return;
	}
	if (!preparing && exl_engine_thread_cancel_job(et, req->u.cancel.job)) {
		send_error(c, id, EXL_E_INTERNAL, "cancel: out of memory");
		return;
	}
	reply_init(&r);
	exl_pack_reply(&r.pk, &r.sb, EXL_OP_CANCEL, id, 1);
	exl_pack_key(&r.pk, "job");
	msgpack_pack_uint64(&r.pk, req->u.cancel.job);
	reply_send(c, &r);
}

/* The daemon's resident memory in bytes (0 when /proc is not readable). */
static uint64_t rss_bytes(void)
{
	unsigned long long pages_total = 0, pages_rss = 0;
	long page = sysconf(_SC_PAGESIZE);
	FILE *f = fopen("/proc/self/statm", "re");

	if (!f)
		return 0;
	if (fscanf(f, "%llu %llu", &pages_total, &pages_rss) != 2)
		pages_rss = 0;
	fclose(f);
	return page > 0 ? (uint64_t)pages_rss * (uint64_t)page : 0;
}

static void op_status(struct exl_conn *c, const struct exl_packed_id *id)
{
	const struct exl_config *cfg = &c->lp->cfg;
	int n_models, jobs, max_jobs, max_tokens;
	double tok_s;
	struct reply r;

	exl_registry_totals(c->lp->reg, &n_models, &jobs, &tok_s);
	exl_config_uid_limits(cfg, c->uid, &max_jobs, &max_tokens);
	reply_init(&r);
	exl_pack_reply(&r.pk, &r.sb, EXL_OP_STATUS, id, 13);
	exl_pack_key(&r.pk, "version");
	exl_pack_cstr(&r.pk, EXL_VERSION);
	exl_pack_key(&r.pk, "pid");
	msgpack_pack_int32(&r.pk, (int32_t)getpid());
	exl_pack_key(&r.pk, "uptime");
	msgpack_pack_double(&r.pk, (double)(exl_now_ns() - c->lp->start_ns) / 1e9);
	exl_pack_key(&r.pk, "connections");
	msgpack_pack_int(&r.pk, c->lp->n_conns);
	exl_pack_key(&r.pk, "jobs");
	msgpack_pack_int(&r.pk, jobs);
	exl_pack_key(&r.pk, "tok_s");
	msgpack_pack_double(&r.pk, tok_s);
	exl_pack_key(&r.pk, "draining");
	if (c->lp->draining)
		msgpack_pack_true(&r.pk);
	else
		msgpack_pack_false(&r.pk);
	exl_pack_key(&r.pk, "models");
	exl_registry_pack_status(c->lp->reg, &r.pk);
	exl_pack_key(&r.pk, "uid");
	msgpack_pack_uint32(&r.pk, (uint32_t)c->uid);
	exl_pack_key(&r.pk, "uid_jobs");
	msgpack_pack_int(&r.pk, atomic_load(&c->uidst->jobs));
	exl_pack_key(&r.pk, "uid_max_jobs");
	msgpack_pack_int(&r.pk, max_jobs);
	exl_pack_key(&r.pk, "max_new_tokens");
	msgpack_pack_int(&r.pk, max_tokens);
	exl_pack_key(&r.pk, "rss_bytes");
	msgpack_pack_uint64(&r.pk, rss_bytes());
	reply_send(c, &r);
}

static void op_resume(struct exl_conn *c)
{
	if (exl_sink_retry_pending(c->sink))
		want_retry(c->lp);
	exl_registry_wake_all(c->lp->reg);
}

/* ---- input ---- */

/* Handles one complete message: MSG_DONE, MSG_CLOSE (the connection must
 * close) or MSG_WAIT (not handled: it waits for room in the prep pool).
 * The message is copied out of the input buffer first, so a request the
 * pool prepares keeps its bytes however the buffer moves. */
static int handle_message(struct exl_conn *c, const uint8_t *data, size_t len)
{
	struct exl_prep *p = exl_prep_new(data, len);
	char err[512];
	size_t off = 0;
	int rc = MSG_DONE;

	if (!p) {
		send_error(c, NULL, EXL_E_INTERNAL, "out of memory reading the request");
		return MSG_DONE;
	}
	msgpack_unpack_return ret = msgpack_unpack_next(&p->up, (const char *)p->msg, len, &off);
	if (ret == MSGPACK_UNPACK_NOMEM_ERROR) {
		exl_prep_free(p);
		send_error(c, NULL, EXL_E_INTERNAL, "out of memory decoding the request");
		return MSG_DONE;
	}
	if (ret != MSGPACK_UNPACK_SUCCESS || off != len) {
		exl_prep_free(p);
		exl_log(EXL_LOG_INFO, "conn %llu (uid %u pid %d): not msgpack; closing",
			(unsigned long long)c->id, (unsigned)c->uid, (int)c->pid);
		return MSG_CLOSE;
	}
	int code = exl_req_decode(&p->up.data, p->up.zone, &p->req, err, sizeof(err));
	exl_packed_id_set(&p->id, p->req.id);
	if (code) {
		send_error(c, &p->id, code, err);
	} else {
		struct exl_req *req = &p->req;
		const struct exl_packed_id *id = &p->id;

		switch (req->op) {
		case EXL_OPC_HELLO: op_hello(c, req, id); break;
		case EXL_OPC_MODELS: op_models(c, id); break;
		case EXL_OPC_LOAD: op_load(c, req, id); break;
		case EXL_OPC_UNLOAD: op_unload(c, req, id); break;
		case EXL_OPC_TOKENIZE: rc = op_prepared(c, &p); break;
		case EXL_OPC_DETOKENIZE: rc = op_prepared(c, &p); break;
		case EXL_OPC_GENERATE: rc = op_generate(c, &p); break;
		case EXL_OPC_EMBED: rc = op_generate(c, &p); break;
		case EXL_OPC_CANCEL: op_cancel(c, req, id); break;
		case EXL_OPC_STATUS: op_status(c, id); break;
		case EXL_OPC_RESUME: op_resume(c); break;
		}
	}
	if (rc != MSG_WAIT)
		c->n_requests++;
	exl_prep_free(p); /* NULL when the pool took it */
	return rc;
}

static void process_input(struct exl_conn *c)
{
	size_t max = c->lp->cfg.max_message;
	size_t off = 0;

	while (!c->closing && off < c->in_len) {
		size_t mlen = 0;
		enum exl_scan_result r = exl_scan(&c->scan, c->in + off, c->in_len - off, max, &mlen);
		if (r == EXL_SCAN_NEED)
			break;
		if (r == EXL_SCAN_INVALID) {
			exl_log(EXL_LOG_INFO, "conn %llu (uid %u pid %d): bytes that are not msgpack; "
				"closing", (unsigned long long)c->id, (unsigned)c->uid, (int)c->pid);
			exl_conn_close(c);
			return;
		}
		if (r == EXL_SCAN_TOO_LARGE) {
			char msg[160];
			snprintf(msg, sizeof(msg), "message over max_message (%zu bytes), %u values or "
				 "nesting depth %d; closing the connection", max, EXL_MAX_VALUES,
				 EXL_MAX_DEPTH);
			send_error(c, NULL, EXL_E_TOO_LARGE, msg);
			c->closing = true;
			break;
		}
		int rc = handle_message(c, c->in + off, mlen);
		if (rc == MSG_CLOSE) {
			exl_conn_close(c);
			return;
		}
		if (rc == MSG_WAIT) {
			/* read again when the pool takes a result
			 * (exl_conn_prep_unblock); the message is scanned
			 * again from its start then */
			c->prep_blocked = true;
			set_reading(c, false);
			break;
		}
		off += mlen;
		if (evbuffer_get_length(c->out) >= OUT_LIMIT) {
			set_reading(c, false);
			break;
		}
	}
	if (off) {
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= off;
		/* what is left is the start of the next message, from now */
		c->partial_since_ns = c->in_len ? exl_now_ns() : 0;
	}
	if (c->closing) {
		event_del(c->rev);
		c->reading = false;
		c->in_len = 0;
	}
	/* An idle connection holds no input buffer. */
	if (!c->in_len)
		set_in_buffer(c, 0);
	try_write(c);
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
	struct exl_conn *c = arg;
	size_t max = c->lp->cfg.max_message + (size_t)READ_CHUNK;
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(16 * sizeof(int))];
	} cm;

	(void)what;
	if (c->in_cap - c->in_len < READ_CHUNK && c->in_cap < max) {
		size_t cap = c->in_cap ? c->in_cap * 2 : IN_BASE;
		if (cap > max)
			cap = max;
		/* Unfinished messages of all connections share one budget;
		 * the first IN_BASE bytes of each are always there, so small
		 * requests are read whatever others hold. */
		if (over_base(cap) > over_base(c->in_cap) &&
		    !pending_fits(c->lp, over_base(cap) - over_base(c->in_cap))) {
			char msg[200];

			snprintf(msg, sizeof(msg), "the daemon already holds max_pending_bytes "
				 "(%llu) of unfinished requests; closing this connection, try again",
				 (unsigned long long)c->lp->cfg.max_pending_bytes);
			close_with_limit(c, msg);
			return;
		}
		if (set_in_buffer(c, cap)) {
			exl_log(EXL_LOG_ERR, "conn %llu: out of memory for input; closing",
				(unsigned long long)c->id);
			exl_conn_close(c);
			return;
		}
	}
	if (c->in_len == c->in_cap) {
		/* Full of complete requests waiting for the output to drain. */
		process_input(c);
		return;
	}
	struct iovec iov = { c->in + c->in_len, c->in_cap - c->in_len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
			     .msg_controllen = sizeof(cm.buf) };
	ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	/* The protocol has no client-sent fds: close any, so they cannot pile up. */
	if (n >= 0) {
		for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h)) {
			if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
				continue;
			size_t nfd = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < nfd; i++) {
				int f;
				memcpy(&f, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
				close(f);
			}
		}
	}
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
			if (c->in_len)
				process_input(c);
			return;
		}
		exl_log(EXL_LOG_DEBUG, "conn %llu: read: %s", (unsigned long long)c->id,
			strerror(errno));
		exl_conn_close(c);
		return;
	}
	if (n == 0) {
		exl_conn_close(c);
		return;
	}
	if (!c->in_len)
		c->partial_since_ns = exl_now_ns();
	c->in_len += (size_t)n;
	process_input(c);
}
