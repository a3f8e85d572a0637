/* What the sink and delivery unit tests share: a ring read through
 * libexlclient's own consumer, and fields of a msgpack message. */
#ifndef EXL_DELIVERY_TEST_UTIL_H
#define EXL_DELIVERY_TEST_UTIL_H

#include <msgpack.h>
#include <string.h>

#include "client/lib/client_internal.h"
#include "daemon/server/delivery/ring.h"

/* A ring of size bytes mapped by a client as exld's hello hands it over;
 * NULL when either side fails. */
static inline struct exl_ring *ring_pair(uint32_t size, struct exl_client *c)
{
	char err[256];
	struct exl_ring *r = exl_ring_create(size, err, sizeof(err));

	if (!r)
		return NULL;
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	if (exl_cl_ring_map(c, r->data_fd, r->ctrl_fd) != EXL_OK) {
		exl_ring_free(r);
		return NULL;
	}
	return r;
}

/* The next record: 1 with its header and payload, 0 when none. */
static inline int ring_next(struct exl_client *c, struct exl_rec_hdr *h, const uint8_t **p,
			    size_t *len)
{
	return exl_cl_ring_peek(c, h, p, len);
}

/* The value under key in the msgpack map m, or NULL. */
static inline const msgpack_object *map_get(const msgpack_object *m, const char *key)
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

static inline bool str_is(const msgpack_object *o, const char *s)
{
	return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
	       !memcmp(o->via.str.ptr, s, o->via.str.size);
}

static inline bool uint_is(const msgpack_object *o, uint64_t v)
{
	return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 == v;
}

#endif
