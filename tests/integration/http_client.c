/* The tests' HTTP client (http_client.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "http_client.h"

long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* A port nobody listens on now (bound and released). */
int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

int dial(const struct target *t)
{
	int fd;

	if (t->path) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		snprintf(a.sun_path, sizeof(a.sun_path), "%s", t->path);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
			return fd;
	} else {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)t->port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
			return fd;
	}
	if (fd >= 0)
		close(fd);
	return -1;
}

int send_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		c += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Reads until the server closes or timeout_ms pass; malloc'ed, NUL-terminated. */
char *read_all(int fd, int timeout_ms, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	long end = now_ms() + timeout_ms;

	while (buf) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		long left = end - now_ms();

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			break;
		if (cap - n < 2048) {
			char *b = realloc(buf, cap * 2);
			if (!b)
				break;
			buf = b;
			cap *= 2;
		}
		ssize_t k = recv(fd, buf + n, cap - n - 1, 0);
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	if (buf)
		buf[n] = 0;
	if (len)
		*len = n;
	return buf;
}

void resp_free(struct resp *r)
{
	free(r->raw);
	memset(r, 0, sizeof(*r));
}

/* One request with Connection: close; 0 with the response, -1 when the
 * connection failed or nothing came. */
int request(const struct target *t, const char *method, const char *path,
		   const char *headers, const char *body, struct resp *out)
{
	char head[2048];
	int fd = dial(t);

	memset(out, 0, sizeof(*out));
	if (fd < 0)
		return -1;
	snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\n%sConnection: close\r\n"
		 "%sContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n", method, path,
		 headers && strstr(headers, "Host:") ? "" : "Host: 127.0.0.1\r\n",
		 headers ? headers : "", body ? strlen(body) : 0);
	if (send_all(fd, head, strlen(head)) || (body && send_all(fd, body, strlen(body)))) {
		close(fd);
		return -1;
	}
	out->raw = read_all(fd, 30000, NULL);
	close(fd);
	if (!out->raw || sscanf(out->raw, "HTTP/1.%*d %d", &out->status) != 1)
		return -1;
	const char *b = strstr(out->raw, "\r\n\r\n");
	out->body = b ? b + 4 : "";
	return 0;
}

int post(const struct target *t, const char *path, const char *body, struct resp *out)
{
	return request(t, "POST", path, NULL, body, out);
}

