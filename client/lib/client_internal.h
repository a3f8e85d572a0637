/* libexlclient internals shared by its files. */
#ifndef EXL_CLIENT_INTERNAL_H
#define EXL_CLIENT_INTERNAL_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exlclient.h"
#include "common/msgscan.h"

struct exl_held;

/* A socket message kept until exl_next() hands it out. */
struct exl_qmsg {
	struct exl_qmsg *next;
	msgpack_unpacked up;
};

struct exl_client {
	int fd;
	int timeout_ms;
	char err[512];
	struct exl_server_info info;
	char *features;                 /* the hello's features, each NUL-terminated, or NULL */
	size_t features_len;            /* bytes of features */
	bool features_listed;           /* the hello had the list (maybe empty) */
	uint64_t next_id;
	msgpack_unpacker unp;
	struct exl_scan scan;           /* how much of the next message has come */
	bool unp_broken;                /* msgpack-c failed a message: its state is lost */
	int recv_fds[2];                /* fds that came with the hello reply */
	int n_recv_fds;

	/* ring (NULL when the connection has none) */
	uint8_t *ring_map;
	size_t ring_map_size;
	const struct exl_ring_hdr *hdr;
	const uint8_t *data;
	uint32_t size;
	struct exl_ring_ctrl *ctrl;
	uint64_t rp;                    /* where the next record starts */
	bool release_pending;           /* publish rp at the next exl_next */
	uint32_t pause_epoch_seen;
	uint32_t poll_epoch;
	uint32_t spin_ns;               /* how long exl_cl_ring_wait spins first */

	/* stream messages from the socket, oldest first */
	struct exl_qmsg *q_head, *q_tail;
	uint64_t *sock_jobs;            /* jobs streaming over the socket, not done */
	size_t n_sock_jobs, sock_jobs_cap;

	/* other jobs' events that came during a blocking generate */
	struct exl_held *held_head, *held_tail;
	struct exl_held *cur_held;

	/* what the last event points into, released by the next exl_next */
	struct exl_qmsg *cur_msg;
	struct exl_result cur_result;
	bool cur_result_set;
	uint8_t *frag;                  /* a reassembled fragmented record */
	size_t frag_cap;
	int32_t *tmp_i32;               /* socket tokens: ids, top ids */
	size_t tmp_i32_cap;
	float *tmp_f32;                 /* socket tokens: probs, top probs */
	size_t tmp_f32_cap;
	float *tmp_logits;              /* socket tokens: logits rows */
	size_t tmp_logits_cap;
};

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
int exl_cl_fail(struct exl_client *c, int code, const char *fmt, ...);

/* Packing helpers over an sbuffer. */
struct exl_cl_msg {
	msgpack_sbuffer sb;
	msgpack_packer pk;
};

void exl_cl_msg_init(struct exl_cl_msg *m);
void exl_cl_msg_free(struct exl_cl_msg *m);
void exl_cl_key(struct exl_cl_msg *m, const char *key);
void exl_cl_str(struct exl_cl_msg *m, const char *s);
/* Starts a request map with n_fields besides op and id; returns the id. */
uint64_t exl_cl_request(struct exl_client *c, struct exl_cl_msg *m, const char *op,
			uint32_t n_fields);

/* Sends the whole message (blocking). */
int exl_cl_send(struct exl_client *c, const void *data, size_t len);

/* Reads one message from the socket into *up, waiting up to timeout_ms
 * (-1 forever, 0 not at all). */
int exl_cl_read_msg(struct exl_client *c, int timeout_ms, msgpack_unpacked *up);

/* Sends m and waits for the reply to its id.  Stream messages that come
 * meanwhile are queued for exl_next; progress messages for this id go to
 * progress.  An error reply becomes its code and message. */
int exl_cl_call(struct exl_client *c, struct exl_cl_msg *m, uint64_t id, msgpack_unpacked *reply,
		void (*progress)(uint64_t done, uint64_t total, void *user), void *user);

/* Queues a stream message (token / done) for exl_next. */
void exl_cl_queue(struct exl_client *c, msgpack_unpacked *up);

/* Map lookups on a decoded message. */
const msgpack_object *exl_cl_get(const msgpack_object *map, const char *key);
bool exl_cl_get_u64(const msgpack_object *map, const char *key, uint64_t *v);
bool exl_cl_get_i64(const msgpack_object *map, const char *key, int64_t *v);
bool exl_cl_get_f64(const msgpack_object *map, const char *key, double *v);
bool exl_cl_get_bool(const msgpack_object *map, const char *key, bool *v);
/* Copies a string value into buf (NUL-terminated, truncated to size). */
bool exl_cl_get_str(const msgpack_object *map, const char *key, char *buf, size_t size);
bool exl_cl_op_is(const msgpack_object *map, const char *op);

/* Fills r from a done map (malloc'ed members). */
int exl_cl_parse_result(struct exl_client *c, const msgpack_object *map, struct exl_result *r);

/* client_held.c: copies ev (valid until the next read) to hand out later. */
int exl_cl_hold(struct exl_client *c, const struct exl_event *ev);
/* The oldest event set aside, if any; it stays valid until
 * exl_cl_held_release(). */
bool exl_cl_take_held(struct exl_client *c, struct exl_event *ev);
void exl_cl_held_release(struct exl_client *c);
void exl_cl_held_free_all(struct exl_client *c);

/* client_ring.c */
int exl_cl_ring_map(struct exl_client *c, int data_fd, int ctrl_fd);
void exl_cl_ring_unmap(struct exl_client *c);
/* 1 and the next record, 0 when the ring is empty, or -1 when what the
 * daemon wrote cannot be read (why in c->err: an EXL_E_PROTOCOL). */
int exl_cl_ring_peek(struct exl_client *c, struct exl_rec_hdr *h, const uint8_t **payload,
		     size_t *len);
void exl_cl_ring_release(struct exl_client *c);
/* Waits for the ring (futex) for up to timeout_ms.  Returns false when
 * the wait ran out of time with the ring still empty. */
bool exl_cl_ring_wait(struct exl_client *c, int timeout_ms);
/* Asks the daemon for a socket wake with the next record. */
void exl_cl_ring_arm_poll(struct exl_client *c);
void exl_cl_ring_disarm(struct exl_client *c);
bool exl_cl_ring_nonempty(const struct exl_client *c);

#endif
