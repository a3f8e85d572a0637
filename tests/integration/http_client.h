/* A minimal HTTP/1.1 client for the tests: one request per connection
 * (Connection: close) to a TCP port on 127.0.0.1 or a Unix socket, the
 * whole response read back.  Used by test_http and test_lora_daemon. */
#ifndef EXLD_TESTS_HTTP_CLIENT_H
#define EXLD_TESTS_HTTP_CLIENT_H

#include <stddef.h>

/* Where requests go: a TCP port on 127.0.0.1, or a Unix socket. */
struct target {
	int port;
	const char *path;
};

struct resp {
	int status;
	char *raw;        /* the whole response */
	const char *body; /* into raw */
};

long now_ms(void);
/* A port nobody listens on now (bound and released). */
int free_port(void);
/* A connected socket to t, or -1. */
int dial(const struct target *t);
int send_all(int fd, const void *p, size_t n);
/* Reads until the server closes or timeout_ms pass; malloc'ed, NUL-terminated. */
char *read_all(int fd, int timeout_ms, size_t *len);
void resp_free(struct resp *r);
/* One request with Connection: close; 0 with the response, -1 when the
 * connection failed or nothing came. */
int request(const struct target *t, const char *method, const char *path, const char *headers,
	    const char *body, struct resp *out);
int post(const struct target *t, const char *path, const char *body, struct resp *out);

#endif
