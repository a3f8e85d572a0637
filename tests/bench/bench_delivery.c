/* Benchmark (not a test): token delivery from exld to a client, and
 * aggregate throughput with concurrent streams.
 *
 *   latency     each token chunk carries the daemon's CLOCK_MONOTONIC at the
 *               moment it was made (t_us); the client subtracts it from its
 *               own clock on receipt.  Through the shared ring (futex wake)
 *               and through the socket (engine thread -> event loop ->
 *               socket), p50 / p99 / max.
 *   throughput  1, 4 and 16 clients, each on its own connection, streaming
 *               greedy jobs at once: generated tokens per second overall.
 *
 * Usage: bench_delivery [--socket PATH] [--model NAME] [--tokens N] [--jobs N]
 *                       [--threads N]
 * Without --socket it starts the exld of this build on stories260K from
 * $EXLD_MODELS (meson's test environment sets it; default ../shared/models).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exlclient.h"
#include "../integration/harness.h"

static const char *sock_path;
static const char *model = "stories260K";
static int n_tokens = 200;
static int n_jobs = 10;

static const char *const prompts[16] = {
	"Once upon a time", "Lily liked to", "The little dog", "One day, Tom",
	"The sun was", "Sara had a big", "There was a cat", "Ben wanted to",
	"In the park,", "The bird flew", "Mom said", "A boy named Tim",
	"The red ball", "She was very happy", "They played with", "The tree",
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint32_t now_us32(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint32_t)((uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static struct exl_client *connect_or_die(bool ring)
{
	struct exl_client *c;
	struct exl_connect_opts o = { .client_name = "bench", .no_ring = !ring, .timeout_ms = 60000 };
	char err[512];

	if (exl_connect(&c, sock_path, &o, err, sizeof(err))) {
		fprintf(stderr, "connect %s: %s\n", sock_path, err);
		exit(1);
	}
	return c;
}

static void params(struct exl_gen_params *p, enum exl_stream_mode mode)
{
	exl_gen_params_init(p);
	p->model = model;
	p->temperature = 0;
	p->max_new_tokens = n_tokens;
	p->ignore_eos = 1;
	p->stream = mode;
}

/* Runs one job to its end; adds its token count and chunk latencies. */
static int run_job(struct exl_client *c, enum exl_stream_mode mode, const char *prompt,
		   uint32_t *lat, size_t *n_lat, size_t cap, long *tokens)
{
	struct exl_gen_params p;
	uint64_t job;

	params(&p, mode);
	if (exl_submit(c, &p, prompt, &job)) {
		fprintf(stderr, "submit: %s\n", exl_errmsg(c));
		return -1;
	}
	for (;;) {
		struct exl_event ev;
		if (exl_next(c, &ev, 60000)) {
			fprintf(stderr, "next: %s\n", exl_errmsg(c));
			return -1;
		}
		if (ev.type == EXL_EVENT_DONE)
			return ev.result->error ? -1 : 0;
		uint32_t l = now_us32() - ev.t_us;
		if (lat && *n_lat < cap)
			lat[(*n_lat)++] = l;
		*tokens += (long)ev.n_ids;
	}
}

static void latency(const char *name, enum exl_stream_mode mode)
{
	struct exl_client *c = connect_or_die(mode == EXL_STREAM_MODE_RING);
	size_t cap = (size_t)n_jobs * (size_t)n_tokens + 16, n = 0;
	uint32_t *lat = malloc(cap * sizeof(*lat));
	long tokens = 0;

	/* one warm-up job, then the measured ones */
	run_job(c, mode, prompts[0], NULL, &n, 0, &tokens);
	for (int j = 0; j < n_jobs; j++)
		if (run_job(c, mode, prompts[j % 16], lat, &n, cap, &tokens))
			exit(1);
	qsort(lat, n, sizeof(*lat), cmp_u32);
	if (n)
		printf("latency %-7s  chunks %6zu   p50 %7.1f us   p99 %7.1f us   max %8.1f us\n",
		       name, n, (double)lat[n / 2], (double)lat[n * 99 / 100], (double)lat[n - 1]);
	size_t over_1ms = 0, over_10ms = 0;
	for (size_t i = 0; i < n; i++) {
		over_1ms += lat[i] > 1000;
		over_10ms += lat[i] > 10000;
	}
	printf("                  over 1 ms: %zu, over 10 ms: %zu\n", over_1ms, over_10ms);
	free(lat);
	exl_close(c);
}

struct worker {
	int i;
	long tokens;
	int failed;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct exl_client *c = connect_or_die(true);
	size_t n = 0;

	for (int j = 0; j < 3; j++)
		if (run_job(c, EXL_STREAM_MODE_RING, prompts[(w->i + j) % 16], NULL, &n, 0, &w->tokens))
			w->failed = 1;
	exl_close(c);
	return NULL;
}

static void throughput(int clients)
{
	struct worker w[16];
	pthread_t th[16];
	long total = 0;

	double t0 = now_s();
	for (int i = 0; i < clients; i++) {
		w[i] = (struct worker){ .i = i };
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	}
	for (int i = 0; i < clients; i++) {
		pthread_join(th[i], NULL);
		if (w[i].failed)
			exit(1);
		total += w[i].tokens;
	}
	double dt = now_s() - t0;
	printf("throughput %2d stream%s  %7ld tokens in %6.2f s   %9.1f tok/s aggregate\n", clients,
	       clients == 1 ? " " : "s", total, dt, total / dt);
}

int main(int argc, char **argv)
{
	struct daemon d;
	bool own = false;
	const char *threads = "0";

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--socket") && i + 1 < argc)
			sock_path = argv[++i];
		else if (!strcmp(argv[i], "--model") && i + 1 < argc)
			model = argv[++i];
		else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
			n_tokens = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--jobs") && i + 1 < argc)
			n_jobs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = argv[++i];
		else {
			fprintf(stderr, "usage: bench_delivery [--socket PATH] [--model NAME] "
				"[--tokens N] [--jobs N] [--threads N]\n");
			return 2;
		}
	}
	if (n_tokens < 1 || n_jobs < 1) {
		fprintf(stderr, "--tokens and --jobs want positive counts\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (!sock_path) {
		if (!getenv("EXLD_MODELS"))
			setenv("EXLD_MODELS", "../shared/models", 0);
		if (!getenv("EXLD_BUILDDIR"))
			setenv("EXLD_BUILDDIR", ".", 0);
		if (!h_models_dir()) {
			fprintf(stderr, "no stories260K.gguf in $EXLD_MODELS\n");
			return 1;
		}
		const char *extra[] = { "--threads", threads, NULL };
		if (h_prepare(&d) || h_start(&d, model, extra)) {
			fprintf(stderr, "could not start exld (%s)\n", h_exld());
			h_cleanup(&d);
			return 1;
		}
		sock_path = d.sock;
		own = true;
	}
	printf("exld on %s, model %s, %d tokens a job (EOS ignored)\n", sock_path, model, n_tokens);
	latency("ring", EXL_STREAM_MODE_RING);
	latency("socket", EXL_STREAM_MODE_SOCKET);
	throughput(1);
	throughput(4);
	throughput(16);
	if (own) {
		h_stop(&d);
		h_cleanup(&d);
	}
	return 0;
}
