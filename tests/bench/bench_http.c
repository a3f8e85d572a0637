/* exl bench's measurement over the HTTP front: CLIENTS threads, each with
 * its own TCP connection, stream one /v1/completions request of TOKENS
 * tokens (end of text ignored, greedy) from PROMPT; reports each one's time
 * to first token (from sending the request to the first event with text)
 * and the total: every token over the wall time from the first send to the
 * last [DONE].  Not a test: tests/bench/bench_http.sh runs it beside
 * `exl bench` (docs/http.md, "Overhead").
 *
 *   bench_http PORT [-c CLIENTS] [-n TOKENS] [-p PROMPT]
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct client {
	pthread_t th;
	int port, tokens;
	const char *prompt;
	const struct timespec *go;
	double ttft_ms;
	long n_tokens;
	int failed;
};

static double ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

static void *run(void *arg)
{
	struct client *c = arg;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)c->port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	char body[1024], req[1536], buf[65536];
	struct timespec t0;
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
	size_t have = 0;

	c->failed = 1;
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)))
		goto out;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	snprintf(body, sizeof(body), "{\"prompt\": \"%s\", \"max_tokens\": %d, \"ignore_eos\": true, "
		 "\"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}}",
		 c->prompt, c->tokens);
	snprintf(req, sizeof(req), "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		 "Content-Type: application/json\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(body), body);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (send(fd, req, strlen(req), 0) != (ssize_t)strlen(req))
		goto out;
	c->ttft_ms = -1;
	for (;;) {
		ssize_t k = recv(fd, buf + have, sizeof(buf) - 1 - have, 0);
		if (k <= 0)
			break;
		have += (size_t)k;
		buf[have] = 0;
		if (c->ttft_ms < 0 && strstr(buf, "\"text\":\"") &&
		    strstr(strstr(buf, "\"text\":\"") + 8, "\"") != strstr(buf, "\"text\":\"") + 8)
			c->ttft_ms = ms_since(&t0);
		char *u = strstr(buf, "\"completion_tokens\":");
		if (u)
			c->n_tokens = atol(u + 20);
		/* keep the tail: an event may straddle two reads */
		if (have > sizeof(buf) / 2) {
			memmove(buf, buf + have - 4096, 4096);
			have = 4096;
		}
	}
	c->failed = c->n_tokens <= 0;
out:
	if (fd >= 0)
		close(fd);
	return NULL;
}

int main(int argc, char **argv)
{
	int port = argc > 1 ? atoi(argv[1]) : 0, n = 4, tokens = 128;
	const char *prompt = "Once upon a time";
	struct timespec go;

	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-c"))
			n = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-n"))
			tokens = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-p"))
			prompt = argv[i + 1];
	}
	if (port <= 0 || n < 1 || n > 1024 || tokens < 1) {
		fprintf(stderr, "usage: bench_http PORT [-c CLIENTS] [-n TOKENS] [-p PROMPT]\n");
		return 2;
	}
	struct client *cl = calloc((size_t)n, sizeof(*cl));
	if (!cl)
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &go);
	for (int i = 0; i < n; i++) {
		cl[i] = (struct client){ .port = port, .tokens = tokens, .prompt = prompt, .go = &go };
		if (pthread_create(&cl[i].th, NULL, run, &cl[i])) {
			fprintf(stderr, "bench_http: pthread_create failed\n");
			return 1;
		}
	}
	long total = 0;
	double ttft_sum = 0;
	int failed = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(cl[i].th, NULL);
		failed += cl[i].failed;
		total += cl[i].n_tokens;
		ttft_sum += cl[i].ttft_ms;
	}
	double wall = ms_since(&go);
	printf("http: %d clients, %ld tokens in %.1f ms: %.1f tok/s; time to first token %.2f ms "
	       "(mean)%s\n", n, total, wall, (double)total * 1e3 / wall, ttft_sum / n,
	       failed ? " (some FAILED)" : "");
	free(cl);
	return failed ? 1 : 0;
}
