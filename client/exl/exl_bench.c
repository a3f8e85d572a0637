/* exl bench: N clients at once, each a thread with its own connection and
 * one job; reports each one's time to first token and decode rate, and
 * the total throughput. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "client/exl/exl_cli.h"

#define MAX_CLIENTS 1024
#define POLL_MS 200

/* Every client connects, then waits here until all are connected. */
struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int ready;                /* clients connected (or failed to) */
	bool open;
	bool abort;
};

struct bench_client {
	const struct cli *g;
	const struct exl_gen_params *p;
	const char *prompt;
	struct gate *start;
	/* results */
	int status;               /* exit status of this client */
	char err[600];
	double t_submit, t_first, t_done;
	int tokens;
	int prompt_tokens;
	char reason[24];
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: exl bench [-m MODEL] [-c CLIENTS] [-n TOKENS] [-p PROMPT] [options]\n"
		"Runs CLIENTS clients at once (default 4), each a thread with its own connection\n"
		"generating TOKENS tokens (default 128, end of text ignored) from PROMPT (default\n"
		"\"Once upon a time\"), and reports each one's time to first token and tok/s\n"
		"(decode: the tokens after the first over the time after the first), then the\n"
		"total: every token over the wall time from the first submit to the last result.\n\n"
		"  %-24s %s\n  %-24s %s\n\ngeneration options (as exl generate's):\n",
		"-c, --clients N", "concurrent clients (1..1024)", "-p, --prompt TEXT",
		"the prompt of every client");
	gen_opts_usage(out);
}

static void *client_main(void *arg)
{
	struct bench_client *b = arg;
	struct exl_connect_opts o = { .client_name = "exl bench", .timeout_ms = -1 };
	struct exl_client *c = NULL;
	uint64_t job;
	int rc;

	rc = exl_connect(&c, cli_socket_path(b->g), &o, b->err, sizeof(b->err));
	pthread_mutex_lock(&b->start->mu);
	b->start->ready++;
	pthread_cond_broadcast(&b->start->cv);
	while (!b->start->open)
		pthread_cond_wait(&b->start->cv, &b->start->mu);
	bool abort = b->start->abort;
	pthread_mutex_unlock(&b->start->mu);
	if (abort) {
		snprintf(b->err, sizeof(b->err), "not started");
		b->status = EXL_EXIT_FAIL;
		exl_close(c);
		return NULL;
	}
	if (rc) {
		b->status = rc == EXL_E_CLOSED || rc == EXL_E_IO ? EXL_EXIT_CONNECT : cli_exit_status(rc);
		return NULL;
	}
	b->t_submit = exl_now_s();
	rc = exl_submit(c, b->p, b->prompt, &job);
	if (rc)
		goto fail;
	for (;;) {
		struct exl_event ev;

		if (cli_sigint_count())
			exl_cancel(c, job);
		rc = exl_next(c, &ev, POLL_MS);
		if (rc == EXL_E_TIMEOUT)
			continue;
		if (rc)
			goto fail;
		if (ev.job != job)
			continue;
		if (ev.type == EXL_EVENT_TOKENS) {
			if (ev.n_ids && !b->t_first)
				b->t_first = exl_now_s();
			continue;
		}
		b->t_done = exl_now_s();
		b->tokens = ev.result->new_tokens;
		b->prompt_tokens = ev.result->prompt_tokens;
		snprintf(b->reason, sizeof(b->reason), "%s", ev.result->stop_reason);
		if (ev.result->error) {
			snprintf(b->err, sizeof(b->err), "%s", ev.result->error);
			b->status = EXL_EXIT_FAIL;
		}
		break;
	}
	exl_close(c);
	return NULL;
fail:
	snprintf(b->err, sizeof(b->err), "%s", exl_errmsg(c));
	b->status = cli_exit_status(rc);
	exl_close(c);
	return NULL;
}

static int parse_count(const char *opt, const char *v, int max, int *out)
{
	char *end;
	long x = strtol(v, &end, 10);

	if (end == v || *end || x < 1 || x > max) {
		fprintf(stderr, "exl bench: %s wants an integer in [1, %d], not '%s'\n", opt, max, v);
		return -1;
	}
	*out = (int)x;
	return 0;
}

static int report(struct bench_client *bc, int n)
{
	double t0 = 0, t1 = 0, ttft_sum = 0;
	long total = 0;
	int ok = 0, status = EXL_EXIT_OK;

	printf("%-7s %8s %8s %10s %9s  %s\n", "CLIENT", "PROMPT", "TOKENS", "TTFT ms", "TOK/S",
	       "STOP");
	for (int i = 0; i < n; i++) {
		struct bench_client *b = &bc[i];

		if (b->status) {
			printf("%-7d failed: %s\n", i + 1, b->err);
			if (!status || status == EXL_EXIT_FAIL)
				status = b->status;
			continue;
		}
		double ttft = b->t_first ? b->t_first - b->t_submit : 0;
		double dec = b->t_first && b->t_done > b->t_first && b->tokens > 1 ?
			     (b->tokens - 1) / (b->t_done - b->t_first) : 0;
		printf("%-7d %8d %8d %10.1f %9.1f  %s\n", i + 1, b->prompt_tokens, b->tokens,
		       ttft * 1e3, dec, b->reason);
		if (!ok || b->t_submit < t0)
			t0 = b->t_submit;
		if (!ok || b->t_done > t1)
			t1 = b->t_done;
		total += b->tokens;
		ttft_sum += ttft;
		ok++;
	}
	if (ok) {
		double wall = t1 - t0;
		printf("total: %d clients, %ld tokens in %.2f s: %.1f tok/s; mean time to first "
		       "token %.1f ms\n", ok, total, wall, wall > 0 ? total / wall : 0.0,
		       ttft_sum / ok * 1e3);
	}
	return status;
}

int cmd_bench(const struct cli *g, int argc, char **argv)
{
	struct gen_opts o;
	struct bench_client *bc = NULL;
	pthread_t *th = NULL;
	struct gate start = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false, false };
	const char *prompt = "Once upon a time";
	int clients = 4, started = 0;
	int status = EXL_EXIT_USAGE;
	char err[200];

	if (gen_opts_init(&o, argc, err, sizeof(err))) {
		fprintf(stderr, "exl bench: %s\n", err);
		return EXL_EXIT_FAIL;
	}
	o.p.max_new_tokens = 128;
	o.p.ignore_eos = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			status = EXL_EXIT_OK;
			goto out;
		}
		if (!strcmp(a, "-c") || !strcmp(a, "--clients") || !strcmp(a, "-p") ||
		    !strcmp(a, "--prompt")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "exl bench: %s needs a value\n", a);
				goto out;
			}
			if (a[1] == 'p' || a[2] == 'p')
				prompt = argv[++i];
			else if (parse_count(a, argv[++i], MAX_CLIENTS, &clients))
				goto out;
			continue;
		}
		int r = gen_opts_take(&o, "bench", argc, argv, &i);
		if (r < 0)
			goto out;
		if (r == 0) {
			fprintf(stderr, "exl bench: unknown argument '%s' (exl bench --help)\n", a);
			goto out;
		}
	}
	if (gen_opts_finish(&o, "bench"))
		goto out;
	if (o.json) {
		fprintf(stderr, "exl bench: --json is not offered here\n");
		goto out;
	}
	/* One connection first: a clear message when there is no daemon. */
	struct exl_client *probe = cli_connect(g, &status);
	if (!probe)
		goto out;
	exl_close(probe);
	if (cli_sigint_install(err, sizeof(err))) {
		fprintf(stderr, "exl bench: %s\n", err);
		status = EXL_EXIT_FAIL;
		goto out;
	}
	bc = calloc((size_t)clients, sizeof(*bc));
	th = calloc((size_t)clients, sizeof(*th));
	if (!bc || !th) {
		fprintf(stderr, "exl bench: out of memory\n");
		status = EXL_EXIT_FAIL;
		goto out;
	}
	for (int i = 0; i < clients; i++) {
		bc[i].g = g;
		bc[i].p = &o.p;
		bc[i].prompt = prompt;
		bc[i].start = &start;
		int rc = pthread_create(&th[i], NULL, client_main, &bc[i]);
		if (rc) {
			fprintf(stderr, "exl bench: starting client %d: %s\n", i + 1, strerror(rc));
			status = EXL_EXIT_FAIL;
			break;
		}
		started++;
	}
	pthread_mutex_lock(&start.mu);
	while (start.ready < started)
		pthread_cond_wait(&start.cv, &start.mu);
	start.open = true;
	start.abort = started < clients;
	pthread_cond_broadcast(&start.cv);
	pthread_mutex_unlock(&start.mu);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	if (started == clients) {
		status = report(bc, clients);
		if (cli_sigint_count()) {
			fprintf(stderr, "exl bench: interrupted\n");
			status = EXL_EXIT_INTERRUPTED;
		}
	}
out:
	free(bc);
	free(th);
	gen_opts_free(&o);
	return status;
}
