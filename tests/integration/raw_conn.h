/* A connection to the daemon without libexlclient, for tests that send
 * what no client would (garbage, hand-made requests) and read the raw
 * msgpack replies. */
#ifndef EXL_TEST_RAW_CONN_H
#define EXL_TEST_RAW_CONN_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>

#include "harness.h"

struct raw {
	int fd;
	msgpack_unpacker unp;
};

/* Connects to d's socket; -1 on failure. */
int raw_open(struct daemon *d, struct raw *r);
/* Closes r (again is fine). */
void raw_close(struct raw *r);
/* Sends all n bytes; -1 when the daemon closed or refused them. */
int raw_send(struct raw *r, const void *p, size_t n);
/* raw_send of sb's bytes, then empties sb. */
int raw_send_sb(struct raw *r, msgpack_sbuffer *sb);
/* 1: a message in *up, 0: the daemon closed, -1: nothing within timeout_ms. */
int raw_read(struct raw *r, msgpack_unpacked *up, int timeout_ms);

/* The value of key in map m, or NULL. */
const msgpack_object *get(const msgpack_object *m, const char *key);
/* Whether o is the string s. */
bool str_is(const msgpack_object *o, const char *s);

#endif
