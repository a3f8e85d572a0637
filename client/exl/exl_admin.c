/* exl models, load, unload, status: the daemon's models and state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/exl/exl_cli.h"

#define BAR_WIDTH 30

/* Commands without options but --help: 0 go on, else exit with *status. */
static int simple_args(int argc, char **argv, int n_args, const char *usage, int *status)
{
	int n = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("usage: exl %s\n", usage);
			*status = EXL_EXIT_OK;
			return -1;
		}
		if (argv[i][0] == '-') {
			fprintf(stderr, "exl %s: unknown option '%s'\n", argv[0], argv[i]);
			*status = EXL_EXIT_USAGE;
			return -1;
		}
		n++;
	}
	if (n != n_args) {
		fprintf(stderr, "usage: exl %s\n", usage);
		*status = EXL_EXIT_USAGE;
		return -1;
	}
	return 0;
}

int cmd_models(const struct cli *g, int argc, char **argv)
{
	struct exl_model_info *list;
	struct exl_client *c;
	size_t n;
	int status;

	if (simple_args(argc, argv, 0, "models", &status))
		return status;
	c = cli_connect(g, &status);
	if (!c)
		return status;
	int rc = exl_models(c, &list, &n);
	if (rc) {
		status = cli_fail(c, rc, "models", NULL);
		exl_close(c);
		return status;
	}
	printf("%-24s %-10s %10s %10s  %-8s %7s %7s %5s\n", "NAME", "STATE", "FILE", "WEIGHTS",
	       "ARCH", "VOCAB", "CTX", "JOBS");
	for (size_t i = 0; i < n; i++) {
		const struct exl_model_info *m = &list[i];
		char size[32], weights[32];

		cli_bytes(m->size, size, sizeof(size));
		if (!strcmp(m->state, "loaded")) {
			cli_bytes(m->weight_bytes, weights, sizeof(weights));
			printf("%-24s %-10s %10s %10s  %-8s %7d %7d %5d\n", m->name, m->state, size,
			       weights, m->arch, m->n_vocab, m->n_ctx_train, m->jobs);
		} else {
			printf("%-24s %-10s %10s\n", m->name, m->state, size);
		}
	}
	free(list);
	exl_close(c);
	if (fflush(stdout)) {
		fprintf(stderr, "exl models: cannot write the output\n");
		return EXL_EXIT_FAIL;
	}
	return EXL_EXIT_OK;
}

struct progress {
	const char *name;
	bool tty;
	int last;                 /* last percentage shown */
};

static void on_progress(uint64_t done, uint64_t total, void *user)
{
	struct progress *p = user;
	int pct = total ? (int)(done * 100 / total) : 0;

	if (pct > 100)
		pct = 100;
	if (p->tty) {
		char bar[BAR_WIDTH + 1], a[32], b[32];
		int full = pct * BAR_WIDTH / 100;

		memset(bar, '#', (size_t)full);
		memset(bar + full, '.', (size_t)(BAR_WIDTH - full));
		bar[BAR_WIDTH] = 0;
		fprintf(stderr, "\rloading %s [%s] %3d%% %s / %s", p->name, bar, pct,
			cli_bytes(done, a, sizeof(a)), cli_bytes(total, b, sizeof(b)));
		fflush(stderr);
		p->last = pct;
		return;
	}
	/* Plain lines, one per tenth. */
	if (pct / 10 > p->last / 10 || p->last < 0) {
		fprintf(stderr, "loading %s: %d%%\n", p->name, pct);
		p->last = pct;
	}
}

int cmd_load(const struct cli *g, int argc, char **argv)
{
	struct exl_client *c;
	int status;

	if (simple_args(argc, argv, 1, "load NAME", &status))
		return status;
	const char *name = argv[1];
	c = cli_connect(g, &status);
	if (!c)
		return status;
	struct progress p = { .name = name, .tty = isatty(2) == 1, .last = -1 };
	int rc = exl_load(c, name, on_progress, &p);
	if (p.tty && p.last >= 0)
		fputc('\n', stderr);
	if (rc) {
		status = cli_fail(c, rc, "load", NULL);
		if (rc == EXL_E_NOT_FOUND)
			fprintf(stderr, "exl: exl models lists the daemon's model directory\n");
		exl_close(c);
		return status;
	}
	/* What was loaded, from the model list. */
	struct exl_model_info *list;
	size_t n;
	if (exl_models(c, &list, &n) == EXL_OK) {
		for (size_t i = 0; i < n; i++) {
			char w[32];

			if (strcmp(list[i].name, name))
				continue;
			if (!list[i].n_vocab) {
				/* a LoRA adapter: the file stays listed as available */
				printf("loaded %s\n", name);
				break;
			}
			printf("loaded %s: %s, %d tokens of vocabulary, context %d, %s of weights\n",
			       name, list[i].arch, list[i].n_vocab, list[i].n_ctx_train,
			       cli_bytes(list[i].weight_bytes, w, sizeof(w)));
			break;
		}
		free(list);
	} else {
		printf("loaded %s\n", name);
	}
	exl_close(c);
	return EXL_EXIT_OK;
}

int cmd_unload(const struct cli *g, int argc, char **argv)
{
	struct exl_client *c;
	const char *name = NULL;
	bool cancel = false;
	int status;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("usage: exl unload [--cancel] NAME\n"
			       "Unloads NAME once its jobs finish; --cancel ends them instead.\n");
			return EXL_EXIT_OK;
		}
		if (!strcmp(argv[i], "--cancel")) {
			cancel = true;
		} else if (argv[i][0] == '-' || name) {
			fprintf(stderr, "usage: exl unload [--cancel] NAME\n");
			return EXL_EXIT_USAGE;
		} else {
			name = argv[i];
		}
	}
	if (!name) {
		fprintf(stderr, "usage: exl unload [--cancel] NAME\n");
		return EXL_EXIT_USAGE;
	}
	c = cli_connect(g, &status);
	if (!c)
		return status;
	int rc = exl_unload(c, name, cancel);
	if (rc) {
		status = cli_fail(c, rc, "unload", NULL);
		exl_close(c);
		return status;
	}
	printf("unloaded %s\n", name);
	exl_close(c);
	return EXL_EXIT_OK;
}

static void print_uptime(double s)
{
	long t = (long)s;

	if (t >= 86400)
		printf("%ldd%02ldh", t / 86400, t % 86400 / 3600);
	else if (t >= 3600)
		printf("%ldh%02ldm", t / 3600, t % 3600 / 60);
	else
		printf("%ldm%02lds", t / 60, t % 60);
}

/* What each loaded model holds, and where: VRAM on a GPU (with the device's
 * free and total), the mapped file and RAM on the CPU. */
static void print_model_memory(const struct exl_daemon_status *st)
{
	char w[32], kv[96], other[32], all[32], fr[32], tot[32];
	bool header = false;

	for (size_t i = 0; i < st->n_models; i++) {
		const struct exl_model_status *m = &st->models[i];
		uint64_t rest = m->buffer_bytes > m->kv_bytes ? m->buffer_bytes - m->kv_bytes : 0;

		if (!m->device[0] || strcmp(m->state, "loaded"))
			continue;
		if (!header)
			printf("\nmemory per model:\n");
		header = true;
		cli_bytes(m->weight_bytes, w, sizeof(w));
		cli_bytes(m->kv_bytes, kv, sizeof(kv));
		cli_bytes(rest, other, sizeof(other));
		if (m->kv_local_pages) {
			char lb[32];

			/* the local pool's share of the KV bytes, and its pages */
			size_t at = strlen(kv);

			snprintf(kv + at, sizeof(kv) - at, " (%s local, pages %d/%d)",
				 cli_bytes(m->kv_local_bytes, lb, sizeof(lb)),
				 m->kv_local_pages - m->kv_local_pages_free, m->kv_local_pages);
		}
		if (!m->device_total) {
			char rp[32], mapped[32];

			if (!m->repacked_bytes) {
				printf("  %s (%s): weights %s mapped from the file, KV cache %s and other "
				       "buffers %s in RAM\n", m->name, m->device, w, kv, other);
				continue;
			}
			cli_bytes(m->repacked_bytes, rp, sizeof(rp));
			cli_bytes(m->weight_bytes > m->repacked_bytes ? m->weight_bytes - m->repacked_bytes : 0,
				  mapped, sizeof(mapped));
			printf("  %s (%s): weights %s (%s mapped from the file, %s repacked in RAM), KV cache "
			       "%s and other buffers %s in RAM\n", m->name, m->device, w, mapped, rp, kv, other);
			continue;
		}
		cli_bytes(m->weight_bytes + m->buffer_bytes, all, sizeof(all));
		cli_bytes(m->device_free, fr, sizeof(fr));
		cli_bytes(m->device_total, tot, sizeof(tot));
		printf("  %s (%s): %s of VRAM (weights %s, KV cache %s, other buffers %s); "
		       "%s free of %s\n", m->name, m->device, all, w, kv, other, fr, tot);
	}
}

/* Speculative decoding's acceptance per model that drafted. */
static void print_drafting(const struct exl_daemon_status *st)
{
	for (size_t i = 0; i < st->n_models; i++) {
		const struct exl_model_status *m = &st->models[i];

		if (!m->draft_proposed)
			continue;
		printf("%s: speculative decoding accepted %llu of %llu proposed tokens (%.1f%%)\n",
		       m->name, (unsigned long long)m->draft_accepted,
		       (unsigned long long)m->draft_proposed,
		       100.0 * (double)m->draft_accepted / (double)m->draft_proposed);
	}
}

int cmd_status(const struct cli *g, int argc, char **argv)
{
	struct exl_daemon_status st;
	struct exl_model_info *list = NULL;
	struct exl_client *c;
	size_t n_list = 0;
	int status;
	char b[32];

	if (simple_args(argc, argv, 0, "status", &status))
		return status;
	c = cli_connect(g, &status);
	if (!c)
		return status;
	int rc = exl_status(c, &st);
	if (rc == EXL_OK)
		rc = exl_models(c, &list, &n_list);
	if (rc) {
		status = cli_fail(c, rc, "status", NULL);
		free(st.models);
		exl_close(c);
		return status;
	}
	printf("exld %s, pid %d, up ", st.version, (int)st.pid);
	print_uptime(st.uptime);
	printf("%s\n", st.draining ? " (draining: shutting down)" : "");
	printf("memory: %s resident\n", cli_bytes(st.rss_bytes, b, sizeof(b)));
	printf("connections: %d, jobs: %d, %.1f tok/s\n", st.connections, st.jobs, st.tok_s);
	printf("you: uid %u, %d of %d jobs, at most %d new tokens a job\n", st.uid, st.uid_jobs,
	       st.uid_max_jobs, st.max_new_tokens);
	if (!st.n_models) {
		printf("no model loaded (exl models lists the model directory, exl load NAME loads one)\n");
	} else {
		printf("\n%-24s %-10s %7s %6s %6s %9s %11s %13s %10s %s\n", "MODEL", "STATE",
		       "RUNNING", "PAUSED", "QUEUED", "TOK/S", "GENERATED", "KV PAGES USED",
		       "WEIGHTS", "DEVICE");
		for (size_t i = 0; i < st.n_models; i++) {
			const struct exl_model_status *m = &st.models[i];
			char kv[32];
			uint64_t wb = m->weight_bytes;

			/* a daemon without per-model memory in its status */
			for (size_t k = 0; !wb && k < n_list; k++)
				if (!strcmp(list[k].name, m->name))
					wb = list[k].weight_bytes;
			snprintf(kv, sizeof(kv), "%d/%d", m->kv_pages - m->kv_pages_free, m->kv_pages);
			printf("%-24s %-10s %7d %6d %6d %9.1f %11llu %13s %10s %s\n", m->name,
			       m->state, m->jobs_running, m->jobs_paused, m->jobs_queued, m->tok_s,
			       (unsigned long long)m->tokens_generated, kv,
			       wb ? cli_bytes(wb, b, sizeof(b)) : "-", m->device[0] ? m->device : "-");
		}
		print_model_memory(&st);
		print_drafting(&st);
	}
	free(st.models);
	free(list);
	exl_close(c);
	if (fflush(stdout)) {
		fprintf(stderr, "exl status: cannot write the output\n");
		return EXL_EXIT_FAIL;
	}
	return EXL_EXIT_OK;
}
