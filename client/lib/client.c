/* libexlclient: connection, requests and replies. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "client/lib/client_internal.h"

#define READ_CHUNK (64u << 10)

const char *exl_version(void)
{
	return EXLCLIENT_LIB_VERSION;
}

const char *exl_status_name(int status)
{
	switch (status) {
	case EXL_E_IO: return "io";
	case EXL_E_CLOSED: return "closed";
	case EXL_E_PROTOCOL: return "protocol";
	case EXL_E_TIMEOUT: return "timeout";
	case EXL_E_NOMEM: return "nomem";
	case EXL_E_INVALID: return "invalid";
	case EXL_E_NO_RING: return "no_ring";
	case EXL_E_UNSUPPORTED: return "unsupported";
	default: return exl_code_name(status);
	}
}

int exl_cl_fail(struct exl_client *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return code;
}

const char *exl_errmsg(const struct exl_client *c)
{
	return c ? c->err : "no connection";
}

const struct exl_server_info *exl_server_info(const struct exl_client *c)
{
	return &c->info;
}

bool exl_server_feature(const struct exl_client *c, const char *name)
{
	for (size_t i = 0; c->features && i < c->features_len; i += strlen(c->features + i) + 1)
		if (!strcmp(c->features + i, name))
			return true;
	return false;
}

int exl_fd(const struct exl_client *c)
{
	return c->fd;
}

/* ---- messages ---- */

void exl_cl_msg_init(struct exl_cl_msg *m)
{
	msgpack_sbuffer_init(&m->sb);
	msgpack_packer_init(&m->pk, &m->sb, msgpack_sbuffer_write);
}

void exl_cl_msg_free(struct exl_cl_msg *m)
{
	msgpack_sbuffer_destroy(&m->sb);
}

void exl_cl_str(struct exl_cl_msg *m, const char *s)
{
	size_t n = strlen(s);

	msgpack_pack_str(&m->pk, n);
	msgpack_pack_str_body(&m->pk, s, n);
}

void exl_cl_key(struct exl_cl_msg *m, const char *key)
{
	exl_cl_str(m, key);
}

uint64_t exl_cl_request(struct exl_client *c, struct exl_cl_msg *m, const char *op,
			uint32_t n_fields)
{
	uint64_t id = ++c->next_id;

	msgpack_pack_map(&m->pk, n_fields + 2);
	exl_cl_key(m, "op");
	exl_cl_str(m, op);
	exl_cl_key(m, "id");
	msgpack_pack_uint64(&m->pk, id);
	return id;
}

int exl_cl_send(struct exl_client *c, const void *data, size_t len)
{
	const uint8_t *p = data;

	if (!data)
		return exl_cl_fail(c, EXL_E_NOMEM, "out of memory encoding a request");
	while (len) {
		ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return exl_cl_fail(c, errno == EPIPE || errno == ECONNRESET ? EXL_E_CLOSED : EXL_E_IO,
					   "sending to exld: %s", strerror(errno));
		p += n;
		len -= (size_t)n;
	}
	return EXL_OK;
}

/* Reads what the socket has into the unpacker; keeps fds that come along
 * (the hello reply's).  0, or a status. */
static int fill(struct exl_client *c, int timeout_ms)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(8 * sizeof(int))];
	} cm;

	for (;;) {
		int r = poll(&p, 1, timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return exl_cl_fail(c, EXL_E_IO, "poll: %s", strerror(errno));
		if (r == 0)
			return exl_cl_fail(c, EXL_E_TIMEOUT, "no reply from exld within %d ms", timeout_ms);
		break;
	}
	if (!msgpack_unpacker_reserve_buffer(&c->unp, READ_CHUNK))
		return exl_cl_fail(c, EXL_E_NOMEM, "out of memory reading from exld");
	struct iovec iov = { msgpack_unpacker_buffer(&c->unp), msgpack_unpacker_buffer_capacity(&c->unp) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
			     .msg_controllen = sizeof(cm.buf) };
	ssize_t n;
	do {
		n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	} while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return EXL_OK;
	if (n < 0)
		return exl_cl_fail(c, EXL_E_IO, "reading from exld: %s", strerror(errno));
	for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h)) {
		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
			continue;
		size_t nfd = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfd; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
			if (c->n_recv_fds < 2)
				c->recv_fds[c->n_recv_fds++] = fd;
			else
				close(fd);
		}
	}
	if (n == 0)
		return exl_cl_fail(c, EXL_E_CLOSED, "exld closed the connection");
	msgpack_unpacker_buffer_consumed(&c->unp, (size_t)n);
	return EXL_OK;
}

int exl_cl_read_msg(struct exl_client *c, int timeout_ms, msgpack_unpacked *up)
{
	int64_t deadline = timeout_ms > 0 ? exl_now_ms() + timeout_ms : 0;

	for (;;) {
		/* Unpacked only once all of it is here: msgpack-c allocates
		 * for a container as soon as it reads its declared count, so a
		 * few bytes claiming 2^32 entries would have it ask for
		 * hundreds of GiB (found by fuzz_ring; client/msgscan.h). */
		size_t len = 0;
		enum exl_scan_result sr =
			exl_scan_limits(&c->scan, (const uint8_t *)c->unp.buffer + c->unp.off,
					c->unp.used - c->unp.off, SIZE_MAX, UINT32_MAX, &len);
		if (sr == EXL_SCAN_INVALID)
			return exl_cl_fail(c, EXL_E_PROTOCOL,
					   "exld sent bytes that are not msgpack");
		if (sr == EXL_SCAN_TOO_LARGE)
			return exl_cl_fail(c, EXL_E_PROTOCOL, "exld sent a message nested deeper "
					   "than %d or of 2^32 values", EXL_MAX_DEPTH);
		if (sr == EXL_SCAN_DONE) {
			/* An unpacker that failed is left inside a message: it
			 * must not go on from there, through bytes the scan
			 * never framed. */
			if (c->unp_broken)
				return exl_cl_fail(c, EXL_E_PROTOCOL, "a message from exld could not "
						   "be read earlier: the stream is lost");
			msgpack_unpack_return r = msgpack_unpacker_next(&c->unp, up);
			if (r != MSGPACK_UNPACK_SUCCESS)
				c->unp_broken = true;
			if (r == MSGPACK_UNPACK_NOMEM_ERROR)
				return exl_cl_fail(c, EXL_E_NOMEM, "out of memory reading a message of "
						   "%zu bytes", len);
			if (r != MSGPACK_UNPACK_SUCCESS)
				return exl_cl_fail(c, EXL_E_PROTOCOL,
						   "exld sent bytes that are not msgpack");
			if (up->data.type != MSGPACK_OBJECT_MAP)
				return exl_cl_fail(c, EXL_E_PROTOCOL,
						   "exld sent a message that is not a map");
			return EXL_OK;
		}
		int wait = timeout_ms;
		if (timeout_ms > 0) {
			int64_t left = deadline - exl_now_ms();
			wait = left > 0 ? (int)left : 0;
		}
		int rc = fill(c, wait);
		if (rc)
			return rc;
	}
}

/* ---- lookups ---- */

const msgpack_object *exl_cl_get(const msgpack_object *map, const char *key)
{
	size_t n = strlen(key);

	if (map->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (uint32_t i = 0; i < map->via.map.size; i++) {
		const msgpack_object *k = &map->via.map.ptr[i].key;
		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
		    !memcmp(k->via.str.ptr, key, n))
			return &map->via.map.ptr[i].val;
	}
	return NULL;
}

bool exl_cl_get_u64(const msgpack_object *map, const char *key, uint64_t *v)
{
	const msgpack_object *o = exl_cl_get(map, key);

	if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return false;
	*v = o->via.u64;
	return true;
}

bool exl_cl_get_i64(const msgpack_object *map, const char *key, int64_t *v)
{
	const msgpack_object *o = exl_cl_get(map, key);

	if (!o)
		return false;
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
		*v = (int64_t)o->via.u64;
	else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		*v = o->via.i64;
	else
		return false;
	return true;
}

bool exl_cl_get_f64(const msgpack_object *map, const char *key, double *v)
{
	const msgpack_object *o = exl_cl_get(map, key);
	int64_t i;

	if (!o)
		return false;
	if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64) {
		*v = o->via.f64;
		return true;
	}
	if (exl_cl_get_i64(map, key, &i)) {
		*v = (double)i;
		return true;
	}
	return false;
}

bool exl_cl_get_bool(const msgpack_object *map, const char *key, bool *v)
{
	const msgpack_object *o = exl_cl_get(map, key);

	if (!o || o->type != MSGPACK_OBJECT_BOOLEAN)
		return false;
	*v = o->via.boolean;
	return true;
}

bool exl_cl_get_str(const msgpack_object *map, const char *key, char *buf, size_t size)
{
	const msgpack_object *o = exl_cl_get(map, key);

	if (!o || o->type != MSGPACK_OBJECT_STR || !size)
		return false;
	size_t n = o->via.str.size < size - 1 ? o->via.str.size : size - 1;
	memcpy(buf, o->via.str.ptr, n);
	buf[n] = 0;
	return true;
}

bool exl_cl_op_is(const msgpack_object *map, const char *op)
{
	const msgpack_object *o = exl_cl_get(map, "op");
	size_t n = strlen(op);

	return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
	       !memcmp(o->via.str.ptr, op, n);
}

/* ---- calls ---- */

static int error_reply(struct exl_client *c, const msgpack_object *map)
{
	char code[32] = "", msg[400] = "";

	exl_cl_get_str(map, "code", code, sizeof(code));
	exl_cl_get_str(map, "message", msg, sizeof(msg));
	return exl_cl_fail(c, exl_code_from_name(code, strlen(code)), "%s", msg[0] ? msg : code);
}

void exl_cl_queue(struct exl_client *c, msgpack_unpacked *up)
{
	struct exl_qmsg *q = malloc(sizeof(*q));

	if (!q) {
		/* Out of memory: the event is lost; say so on the next failure. */
		exl_cl_fail(c, EXL_E_NOMEM, "out of memory queueing a stream message");
		msgpack_unpacked_destroy(up);
		msgpack_unpacked_init(up);
		return;
	}
	q->up = *up;
	q->next = NULL;
	msgpack_unpacked_init(up); /* its zone now belongs to q */
	if (c->q_tail)
		c->q_tail->next = q;
	else
		c->q_head = q;
	c->q_tail = q;
}

int exl_cl_call(struct exl_client *c, struct exl_cl_msg *m, uint64_t id, msgpack_unpacked *reply,
		void (*progress)(uint64_t done, uint64_t total, void *user), void *user)
{
	int rc = exl_cl_send(c, m->sb.data, m->sb.size);

	if (rc == EXL_E_CLOSED) {
		/* exld may have refused the connection (a limit) and closed it
		 * before this request went out: its reason is waiting unread. */
		if (!exl_cl_read_msg(c, 100, reply) && exl_cl_op_is(&reply->data, EXL_OP_ERROR) &&
		    !exl_cl_get(&reply->data, "id"))
			return error_reply(c, &reply->data);
		return exl_cl_fail(c, EXL_E_CLOSED, "exld closed the connection");
	}
	if (rc)
		return rc;
	for (;;) {
		uint64_t rid = 0;
		rc = exl_cl_read_msg(c, c->timeout_ms, reply);
		if (rc)
			return rc;
		const msgpack_object *map = &reply->data;
		bool has_id = exl_cl_get_u64(map, "id", &rid);
		if (exl_cl_op_is(map, EXL_OP_WAKE))
			continue;
		if (exl_cl_op_is(map, EXL_OP_TOKEN) || exl_cl_op_is(map, EXL_OP_DONE)) {
			exl_cl_queue(c, reply);
			continue;
		}
		if (exl_cl_op_is(map, EXL_OP_ERROR) && !exl_cl_get(map, "id"))
			return error_reply(c, map); /* about the connection itself */
		if (!has_id || rid != id)
			continue; /* a late reply to a request that timed out */
		if (exl_cl_op_is(map, EXL_OP_PROGRESS)) {
			uint64_t done = 0, total = 0;
			exl_cl_get_u64(map, "done", &done);
			exl_cl_get_u64(map, "total", &total);
			if (progress)
				progress(done, total, user);
			continue;
		}
		if (exl_cl_op_is(map, EXL_OP_ERROR))
			return error_reply(c, map);
		return EXL_OK;
	}
}

/* ---- connect ---- */

/* The hello's "features": an array of names, kept NUL-separated. */
static int take_features(struct exl_client *c, const msgpack_object *map)
{
	const msgpack_object *o = exl_cl_get(map, "features");
	size_t len = 0;

	if (!o)
		return EXL_OK;  /* an exld from before the list: no optional feature */
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return exl_cl_fail(c, EXL_E_PROTOCOL, "hello reply: features is not an array");
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		if (o->via.array.ptr[i].type != MSGPACK_OBJECT_STR)
			return exl_cl_fail(c, EXL_E_PROTOCOL, "hello reply: feature %u is not a string",
					   i);
		len += o->via.array.ptr[i].via.str.size + 1;
	}
	c->features = malloc(len + 1);
	if (!c->features)
		return exl_cl_fail(c, EXL_E_NOMEM, "out of memory");
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *s = &o->via.array.ptr[i];

		memcpy(c->features + c->features_len, s->via.str.ptr, s->via.str.size);
		c->features_len += s->via.str.size;
		c->features[c->features_len++] = 0;
	}
	c->features_listed = true;
	return EXL_OK;
}

static int say_hello(struct exl_client *c, const struct exl_connect_opts *o)
{
	struct exl_cl_msg m;
	msgpack_unpacked up;
	uint64_t v;
	bool b = false;

	exl_cl_msg_init(&m);
	uint64_t id = exl_cl_request(c, &m, EXL_OP_HELLO, 2 + (o->ring_size ? 1 : 0));
	exl_cl_key(&m, "client");
	exl_cl_str(&m, o->client_name ? o->client_name : "libexlclient");
	exl_cl_key(&m, "ring");
	if (o->no_ring)
		msgpack_pack_false(&m.pk);
	else
		msgpack_pack_true(&m.pk);
	if (o->ring_size) {
		exl_cl_key(&m, "ring_size");
		msgpack_pack_uint32(&m.pk, o->ring_size);
	}
	msgpack_unpacked_init(&up);
	int rc = exl_cl_call(c, &m, id, &up, NULL, NULL);
	exl_cl_msg_free(&m);
	if (rc)
		goto out;
	const msgpack_object *map = &up.data;
	if (!exl_cl_get_u64(map, "version", &v)) {
		rc = exl_cl_fail(c, EXL_E_PROTOCOL, "hello reply without a version");
		goto out;
	}
	c->info.version = (uint32_t)v;
	if (v != EXL_PROTOCOL_VERSION) {
		rc = exl_cl_fail(c, EXL_E_PROTOCOL, "exld speaks protocol %llu, this library %d",
				 (unsigned long long)v, EXL_PROTOCOL_VERSION);
		goto out;
	}
	exl_cl_get_str(map, "server", c->info.server, sizeof(c->info.server));
	rc = take_features(c, map);
	if (rc)
		goto out;
	if (exl_cl_get_u64(map, "max_message", &v))
		c->info.max_message = (uint32_t)v;
	if (exl_cl_get_u64(map, "uid", &v))
		c->info.uid = (uint32_t)v;
	int64_t pid = 0;
	if (exl_cl_get_i64(map, "pid", &pid))
		c->info.pid = (int32_t)pid;
	exl_cl_get_bool(map, "ring", &b);
	c->info.ring = b;
	if (b) {
		if (exl_cl_get_u64(map, "ring_size", &v))
			c->info.ring_size = (uint32_t)v;
		if (exl_cl_get_u64(map, "max_record", &v))
			c->info.max_record = (uint32_t)v;
		if (c->n_recv_fds != 2) {
			rc = exl_cl_fail(c, EXL_E_PROTOCOL, "hello reply came with %d fds, not 2",
					 c->n_recv_fds);
			goto out;
		}
		rc = exl_cl_ring_map(c, c->recv_fds[0], c->recv_fds[1]);
	}
out:
	for (int i = 0; i < c->n_recv_fds; i++)
		close(c->recv_fds[i]);
	c->n_recv_fds = 0;
	msgpack_unpacked_destroy(&up);
	return rc;
}

int exl_connect(struct exl_client **out, const char *path, const struct exl_connect_opts *opts,
		char *err, size_t errlen)
{
	struct exl_connect_opts none = { .timeout_ms = -1 };
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct exl_client *c;

	*out = NULL;
	if (!opts)
		opts = &none;
	if (!path)
		path = getenv(EXL_SOCKET_ENV);
	if (!path || !*path)
		path = EXL_DEFAULT_SOCKET;
	if (strlen(path) >= sizeof(addr.sun_path)) {
		snprintf(err, errlen, "socket path %s is too long", path);
		return EXL_E_INVALID;
	}
	memcpy(addr.sun_path, path, strlen(path) + 1);
	c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return EXL_E_NOMEM;
	}
	c->timeout_ms = opts->timeout_ms ? opts->timeout_ms : -1;
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		free(c);
		return EXL_E_IO;
	}
	if (!msgpack_unpacker_init(&c->unp, READ_CHUNK)) {
		snprintf(err, errlen, "out of memory");
		close(c->fd);
		free(c);
		return EXL_E_NOMEM;
	}
	if (connect(c->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		snprintf(err, errlen, "connecting to %s: %s", path, strerror(errno));
		exl_close(c);
		return errno == ENOENT || errno == ECONNREFUSED ? EXL_E_CLOSED : EXL_E_IO;
	}
	int rc = say_hello(c, opts);
	if (rc) {
		snprintf(err, errlen, "%s", c->err);
		exl_close(c);
		return rc;
	}
	*out = c;
	return EXL_OK;
}

static void free_queue(struct exl_qmsg *q)
{
	while (q) {
		struct exl_qmsg *next = q->next;
		msgpack_unpacked_destroy(&q->up);
		free(q);
		q = next;
	}
}

void exl_close(struct exl_client *c)
{
	if (!c)
		return;
	exl_cl_ring_unmap(c);
	free_queue(c->q_head);
	free_queue(c->cur_msg);
	exl_cl_held_free_all(c);
	if (c->cur_result_set)
		exl_result_free(&c->cur_result);
	free(c->frag);
	free(c->tmp_i32);
	free(c->tmp_f32);
	free(c->tmp_logits);
	free(c->features);
	free(c->sock_jobs);
	msgpack_unpacker_destroy(&c->unp);
	if (c->fd >= 0)
		close(c->fd);
	free(c);
}

/* ---- simple requests ---- */

static void pack_model(struct exl_cl_msg *m, const char *model)
{
	exl_cl_key(m, "model");
	exl_cl_str(m, model);
}

int exl_models(struct exl_client *c, struct exl_model_info **list, size_t *n)
{
	struct exl_cl_msg m;
	msgpack_unpacked up;

	*list = NULL;
	*n = 0;
	exl_cl_msg_init(&m);
	uint64_t id = exl_cl_request(c, &m, EXL_OP_MODELS, 0);
	msgpack_unpacked_init(&up);
	int rc = exl_cl_call(c, &m, id, &up, NULL, NULL);
	exl_cl_msg_free(&m);
	if (rc)
		goto out;
	const msgpack_object *arr = exl_cl_get(&up.data, "models");
	if (!arr || arr->type != MSGPACK_OBJECT_ARRAY) {
		rc = exl_cl_fail(c, EXL_E_PROTOCOL, "models reply without a models array");
		goto out;
	}
	*list = calloc(arr->via.array.size + 1, sizeof(**list));
	if (!*list) {
		rc = exl_cl_fail(c, EXL_E_NOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < arr->via.array.size; i++) {
		const msgpack_object *e = &arr->via.array.ptr[i];
		struct exl_model_info *mi = &(*list)[i];
		uint64_t v = 0;
		int64_t x = 0;
		exl_cl_get_str(e, "name", mi->name, sizeof(mi->name));
		exl_cl_get_str(e, "state", mi->state, sizeof(mi->state));
		exl_cl_get_str(e, "arch", mi->arch, sizeof(mi->arch));
		if (exl_cl_get_u64(e, "size", &v))
			mi->size = v;
		if (exl_cl_get_i64(e, "n_vocab", &x))
			mi->n_vocab = (int)x;
		if (exl_cl_get_i64(e, "n_ctx_train", &x))
			mi->n_ctx_train = (int)x;
		if (exl_cl_get_i64(e, "jobs", &x))
			mi->jobs = (int)x;
		if (exl_cl_get_u64(e, "weight_bytes", &v))
			mi->weight_bytes = v;
	}
	*n = arr->via.array.size;
out:
	msgpack_unpacked_destroy(&up);
	return rc;
}

static bool str_is(const msgpack_object *o, const char *s)
{
	size_t n = strlen(s);

	return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
	       !memcmp(o->via.str.ptr, s, n);
}

/* A copy of a str field of a models entry, NULL when absent: 0, or -1
 * out of memory. */
static int dup_str_field(const msgpack_object *e, const char *key, char **out)
{
	const msgpack_object *t = exl_cl_get(e, key);

	*out = NULL;
	if (!t || t->type != MSGPACK_OBJECT_STR)
		return 0;
	*out = malloc(t->via.str.size + 1);
	if (!*out)
		return -1;
	memcpy(*out, t->via.str.ptr, t->via.str.size);
	(*out)[t->via.str.size] = 0;
	return 0;
}

int exl_chat_template_ex(struct exl_client *c, const char *model, char **tmpl, char **bos_token,
			 char **eos_token)
{
	struct exl_cl_msg m;
	msgpack_unpacked up;
	const msgpack_object *found = NULL;
	int n_loaded = 0;

	*tmpl = NULL;
	if (bos_token)
		*bos_token = NULL;
	if (eos_token)
		*eos_token = NULL;
	exl_cl_msg_init(&m);
	uint64_t id = exl_cl_request(c, &m, EXL_OP_MODELS, 0);
	msgpack_unpacked_init(&up);
	int rc = exl_cl_call(c, &m, id, &up, NULL, NULL);
	exl_cl_msg_free(&m);
	if (rc)
		goto out;
	const msgpack_object *arr = exl_cl_get(&up.data, "models");
	if (!arr || arr->type != MSGPACK_OBJECT_ARRAY) {
		rc = exl_cl_fail(c, EXL_E_PROTOCOL, "models reply without a models array");
		goto out;
	}
	for (uint32_t i = 0; i < arr->via.array.size; i++) {
		const msgpack_object *e = &arr->via.array.ptr[i];
		if (!str_is(exl_cl_get(e, "state"), "loaded"))
			continue;
		n_loaded++;
		if (!model || str_is(exl_cl_get(e, "name"), model))
			found = e;
	}
	if (!found || (!model && n_loaded != 1)) {
		if (model)
			rc = exl_cl_fail(c, EXL_E_UNKNOWN_MODEL, "no loaded model named '%s'", model);
		else
			rc = exl_cl_fail(c, EXL_E_UNKNOWN_MODEL, "no model named and %d models loaded",
					 n_loaded);
		goto out;
	}
	if (dup_str_field(found, "chat_template", tmpl) ||
	    (bos_token && dup_str_field(found, "bos_token", bos_token)) ||
	    (eos_token && dup_str_field(found, "eos_token", eos_token))) {
		free(*tmpl);
		*tmpl = NULL;
		if (bos_token) {
			free(*bos_token);
			*bos_token = NULL;
		}
		rc = exl_cl_fail(c, EXL_E_NOMEM, "out of memory");
	}
out:
	msgpack_unpacked_destroy(&up);
	return rc;
}

int exl_chat_template(struct exl_client *c, const char *model, char **tmpl)
{
	return exl_chat_template_ex(c, model, tmpl, NULL, NULL);
}

int exl_load(struct exl_client *c, const char *name,
	     void (*progress)(uint64_t done, uint64_t total, void *user), void *user)
{
	struct exl_cl_msg m;
	msgpack_unpacked up;

	if (!name)
		return exl_cl_fail(c, EXL_E_INVALID, "exl_load: no model name");
	exl_cl_msg_init(&m);
	uint64_t id = exl_cl_request(c, &m, EXL_OP_LOAD, 1);
	pack_model(&m, name);
	msgpack_unpacked_init(&up);
	int rc = exl_cl_call(c, &m, id, &up, progress, user);
	exl_cl_msg_free(&m);
	msgpack_unpacked_destroy(&up);
	return rc;
}

int exl_unload(struct exl_client *c, const char *name, bool cancel)
{
	struct exl_cl_msg m;
	msgpack_unpacked up;

	if (!name)
		return exl_cl_fail(c, EXL_E_INVALID, "exl_unload: no model name");
	exl_cl_msg_init(&m);
	uint64_t id = exl_cl_request(c, &m, EXL_OP_UNLOAD, 2);
	pack_model(&m, name);
	exl_cl_key(&m, "cancel");
	if (cancel)
		msgpack_pack_true(&m.pk);
	else
		msgpack_pack_false(&m.pk);
	msgpack_unpacked_init(&up);
	int rc = exl_cl_call(c, &m, id, &up, NULL, NULL);
	exl_cl_msg_free(&m);
	msgpack_unpacked_destroy(&up);
	return rc;
}

int exl_status(struct exl_client *c, struct exl_daemon_status *st)
{
	struct exl_cl_msg m;
	msgpack_unpacked up;
	int64_t x;
	double d;
	uint64_t u;

	memset(st, 0, sizeof(*st));
	exl_cl_msg_init(&m);
	uint64_t id = exl_cl_request(c, &m, EXL_OP_STATUS, 0);
	msgpack_unpacked_init(&up);
	int rc = exl_cl_call(c, &m, id, &up, NULL, NULL);
	exl_cl_msg_free(&m);
	if (rc)
		goto out;
	const msgpack_object *map = &up.data;
	exl_cl_get_str(map, "version", st->version, sizeof(st->version));
	if (exl_cl_get_i64(map, "pid", &x))
		st->pid = (int32_t)x;
	if (exl_cl_get_f64(map, "uptime", &d))
		st->uptime = d;
	if (exl_cl_get_i64(map, "connections", &x))
		st->connections = (int)x;
	if (exl_cl_get_i64(map, "jobs", &x))
		st->jobs = (int)x;
	if (exl_cl_get_f64(map, "tok_s", &d))
		st->tok_s = d;
	exl_cl_get_bool(map, "draining", &st->draining);
	if (exl_cl_get_u64(map, "uid", &u))
		st->uid = (uint32_t)u;
	if (exl_cl_get_i64(map, "uid_jobs", &x))
		st->uid_jobs = (int)x;
	if (exl_cl_get_i64(map, "uid_max_jobs", &x))
		st->uid_max_jobs = (int)x;
	if (exl_cl_get_i64(map, "max_new_tokens", &x))
		st->max_new_tokens = (int)x;
	if (exl_cl_get_u64(map, "rss_bytes", &u))
		st->rss_bytes = u;
	const msgpack_object *arr = exl_cl_get(map, "models");
	if (arr && arr->type == MSGPACK_OBJECT_ARRAY && arr->via.array.size) {
		st->models = calloc(arr->via.array.size, sizeof(*st->models));
		if (!st->models) {
			rc = exl_cl_fail(c, EXL_E_NOMEM, "out of memory");
			goto out;
		}
		st->n_models = arr->via.array.size;
		for (uint32_t i = 0; i < arr->via.array.size; i++) {
			const msgpack_object *e = &arr->via.array.ptr[i];
			struct exl_model_status *ms = &st->models[i];
			exl_cl_get_str(e, "name", ms->name, sizeof(ms->name));
			exl_cl_get_str(e, "state", ms->state, sizeof(ms->state));
			if (exl_cl_get_i64(e, "jobs_running", &x))
				ms->jobs_running = (int)x;
			if (exl_cl_get_i64(e, "jobs_paused", &x))
				ms->jobs_paused = (int)x;
			if (exl_cl_get_i64(e, "jobs_queued", &x))
				ms->jobs_queued = (int)x;
			if (exl_cl_get_u64(e, "tokens_generated", &u))
				ms->tokens_generated = u;
			if (exl_cl_get_i64(e, "jobs_suspended", &x))
				ms->jobs_suspended = (int)x;
			if (exl_cl_get_u64(e, "tokens_prompt", &u))
				ms->tokens_prompt = u;
			if (exl_cl_get_u64(e, "steps", &u))
				ms->steps = u;
			if (exl_cl_get_u64(e, "draft_proposed", &u))
				ms->draft_proposed = u;
			if (exl_cl_get_u64(e, "draft_accepted", &u))
				ms->draft_accepted = u;
			if (exl_cl_get_f64(e, "tok_s", &d))
				ms->tok_s = d;
			if (exl_cl_get_i64(e, "kv_pages_free", &x))
				ms->kv_pages_free = (int)x;
			if (exl_cl_get_i64(e, "kv_pages", &x))
				ms->kv_pages = (int)x;
			if (exl_cl_get_i64(e, "kv_local_pages_free", &x))
				ms->kv_local_pages_free = (int)x;
			if (exl_cl_get_i64(e, "kv_local_pages", &x))
				ms->kv_local_pages = (int)x;
			if (exl_cl_get_u64(e, "kv_local_bytes", &u))
				ms->kv_local_bytes = u;
			exl_cl_get_str(e, "device", ms->device, sizeof(ms->device));
			if (exl_cl_get_u64(e, "weight_bytes", &u))
				ms->weight_bytes = u;
			if (exl_cl_get_u64(e, "kv_bytes", &u))
				ms->kv_bytes = u;
			if (exl_cl_get_u64(e, "buffer_bytes", &u))
				ms->buffer_bytes = u;
			if (exl_cl_get_u64(e, "repacked_bytes", &u))
				ms->repacked_bytes = u;
			if (exl_cl_get_u64(e, "device_free", &u))
				ms->device_free = u;
			if (exl_cl_get_u64(e, "device_total", &u))
				ms->device_total = u;
		}
	}
out:
	msgpack_unpacked_destroy(&up);
	return rc;
}

int exl_tokenize(struct exl_client *c, const char *model, const char *text, size_t len,
		 int add_bos, bool special, int32_t **ids, size_t *n)
{
	struct exl_cl_msg m;
	msgpack_unpacked up;

	*ids = NULL;
	*n = 0;
	if (!text)
		return exl_cl_fail(c, EXL_E_INVALID, "exl_tokenize: no text");
	exl_cl_msg_init(&m);
	uint64_t id = exl_cl_request(c, &m, EXL_OP_TOKENIZE, 2 + (model ? 1 : 0) + (add_bos >= 0 ? 1 : 0));
	if (model)
		pack_model(&m, model);
	exl_cl_key(&m, "text");
	msgpack_pack_str(&m.pk, len);
	msgpack_pack_str_body(&m.pk, text, len);
	exl_cl_key(&m, "special");
	if (special)
		msgpack_pack_true(&m.pk);
	else
		msgpack_pack_false(&m.pk);
	if (add_bos >= 0) {
		exl_cl_key(&m, "add_bos");
		if (add_bos)
			msgpack_pack_true(&m.pk);
		else
			msgpack_pack_false(&m.pk);
	}
	msgpack_unpacked_init(&up);
	int rc = exl_cl_call(c, &m, id, &up, NULL, NULL);
	exl_cl_msg_free(&m);
	if (rc)
		goto out;
	const msgpack_object *arr = exl_cl_get(&up.data, "ids");
	if (!arr || arr->type != MSGPACK_OBJECT_ARRAY) {
		rc = exl_cl_fail(c, EXL_E_PROTOCOL, "tokenize reply without ids");
		goto out;
	}
	*ids = malloc(sizeof(int32_t) * (arr->via.array.size + 1));
	if (!*ids) {
		rc = exl_cl_fail(c, EXL_E_NOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < arr->via.array.size; i++) {
		const msgpack_object *o = &arr->via.array.ptr[i];
		if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > INT32_MAX) {
			free(*ids);
			*ids = NULL;
			rc = exl_cl_fail(c, EXL_E_PROTOCOL, "tokenize reply: id %u is not a token id", i);
			goto out;
		}
		(*ids)[i] = (int32_t)o->via.u64;
	}
	*n = arr->via.array.size;
out:
	msgpack_unpacked_destroy(&up);
	return rc;
}

int exl_detokenize(struct exl_client *c, const char *model, const int32_t *ids, size_t n,
		   bool special, char **text)
{
	return exl_detokenize_ex(c, model, ids, n, special, true, text);
}

int exl_detokenize_ex(struct exl_client *c, const char *model, const int32_t *ids, size_t n,
		      bool special, bool strip_leading_space, char **text)
{
	struct exl_cl_msg m;
	msgpack_unpacked up;

	*text = NULL;
	if (!ids && n)
		return exl_cl_fail(c, EXL_E_INVALID, "exl_detokenize: no ids");
	exl_cl_msg_init(&m);
	uint64_t id = exl_cl_request(c, &m, EXL_OP_DETOKENIZE, 3 + (model ? 1 : 0));
	if (model)
		pack_model(&m, model);
	exl_cl_key(&m, "ids");
	msgpack_pack_array(&m.pk, n);
	for (size_t i = 0; i < n; i++)
		msgpack_pack_int32(&m.pk, ids[i]);
	exl_cl_key(&m, "special");
	if (special)
		msgpack_pack_true(&m.pk);
	else
		msgpack_pack_false(&m.pk);
	exl_cl_key(&m, "strip_leading_space");
	if (strip_leading_space)
		msgpack_pack_true(&m.pk);
	else
		msgpack_pack_false(&m.pk);
	msgpack_unpacked_init(&up);
	int rc = exl_cl_call(c, &m, id, &up, NULL, NULL);
	exl_cl_msg_free(&m);
	if (rc)
		goto out;
	const msgpack_object *o = exl_cl_get(&up.data, "text");
	if (!o || o->type != MSGPACK_OBJECT_STR) {
		rc = exl_cl_fail(c, EXL_E_PROTOCOL, "detokenize reply without text");
		goto out;
	}
	*text = malloc(o->via.str.size + 1);
	if (!*text) {
		rc = exl_cl_fail(c, EXL_E_NOMEM, "out of memory");
		goto out;
	}
	memcpy(*text, o->via.str.ptr, o->via.str.size);
	(*text)[o->via.str.size] = 0;
out:
	msgpack_unpacked_destroy(&up);
	return rc;
}

int exl_cancel(struct exl_client *c, uint64_t job)
{
	struct exl_cl_msg m;
	msgpack_unpacked up;

	exl_cl_msg_init(&m);
	uint64_t id = exl_cl_request(c, &m, EXL_OP_CANCEL, 1);
	exl_cl_key(&m, "job");
	msgpack_pack_uint64(&m.pk, job);
	msgpack_unpacked_init(&up);
	int rc = exl_cl_call(c, &m, id, &up, NULL, NULL);
	exl_cl_msg_free(&m);
	msgpack_unpacked_destroy(&up);
	return rc;
}
