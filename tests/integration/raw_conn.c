/* A connection without libexlclient (raw_conn.h). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "raw_conn.h"

int raw_open(struct daemon *d, struct raw *r)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", d->sock);
	r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (r->fd < 0 || connect(r->fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		return -1;
	msgpack_unpacker_init(&r->unp, 65536);
	return 0;
}

void raw_close(struct raw *r)
{
	if (r->fd < 0)
		return;
	close(r->fd);
	r->fd = -1;
	msgpack_unpacker_destroy(&r->unp);
}

int raw_send(struct raw *r, const void *p, size_t n)
{
	const char *b = p;
	size_t off = 0;

	while (off < n) {
		ssize_t k = send(r->fd, b + off, n - off, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		off += (size_t)k;
	}
	return 0;
}

int raw_send_sb(struct raw *r, msgpack_sbuffer *sb)
{
	int rc = raw_send(r, sb->data, sb->size);

	msgpack_sbuffer_clear(sb);
	return rc;
}

int raw_read(struct raw *r, msgpack_unpacked *up, int timeout_ms)
{
	for (;;) {
		if (msgpack_unpacker_next(&r->unp, up) == MSGPACK_UNPACK_SUCCESS)
			return 1;
		struct pollfd p = { .fd = r->fd, .events = POLLIN };
		if (poll(&p, 1, timeout_ms) <= 0)
			return -1;
		msgpack_unpacker_reserve_buffer(&r->unp, 1 << 20);
		ssize_t n = recv(r->fd, msgpack_unpacker_buffer(&r->unp),
				 msgpack_unpacker_buffer_capacity(&r->unp), 0);
		if (n <= 0)
			return 0;
		msgpack_unpacker_buffer_consumed(&r->unp, (size_t)n);
	}
}

const msgpack_object *get(const msgpack_object *m, const char *key)
{
	if (m->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (uint32_t i = 0; i < m->via.map.size; i++) {
		const msgpack_object *k = &m->via.map.ptr[i].key;
		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == strlen(key) &&
		    !memcmp(k->via.str.ptr, key, k->via.str.size))
			return &m->via.map.ptr[i].val;
	}
	return NULL;
}

bool str_is(const msgpack_object *o, const char *s)
{
	return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
	       !memcmp(o->via.str.ptr, s, o->via.str.size);
}
