/* exl generate: completes prompts on the daemon, all of them in one batch,
 * streaming the text as it arrives.  The outputs come in the order of the
 * prompts: the first one streams live while the others are held, and each
 * one's held text is printed (then streamed live) when its turn comes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/exl/exl_cli.h"
#include "common/logits_file.h"

#define MAX_STDIN_PROMPT (16u << 20)
#define POLL_MS 200

struct job_out {
	const char *prompt;
	uint64_t job;
	bool done;
	bool failed;              /* ended with an error (already reported) */
	char *held;               /* text (or a JSON line) waiting for its turn */
	size_t held_len, held_cap;
	struct top_tokens top;
};

struct gen_state {
	struct exl_client *c;
	struct gen_opts *o;
	struct job_out *jobs;
	size_t n;
	size_t head;              /* the job whose output is being printed */
	bool write_failed;
	struct token_texts *tt;
	/* --dump-logits (one prompt only): the rows of every TOKENS event */
	FILE *logits;
	const char *logits_path;
	size_t n_vocab;           /* of the first row; every row must match */
	int logits_errno;         /* the first failed write's */
	const char *logits_bad;   /* what was wrong with what the daemon sent */
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: exl generate [-m MODEL] [options] PROMPT...\n"
		"Completes each PROMPT (- reads one from stdin) on the daemon, all of them at\n"
		"once, and prints each prompt followed by its completion, in order; the first\n"
		"streams as it is generated, the others follow as their turn comes.  --json\n"
		"prints one result object per prompt instead.\n\n"
		"options (the names and ranges of exld run's):\n");
	gen_opts_usage(out);
	fprintf(out, "  %-24s %s\n", "--dump-logits FILE",
		"write each new token's logits: raw little-endian float32 [tokens][vocab]");
	fprintf(out, "  %-24s %s\n", "", "(one PROMPT only)");
	fprintf(out, "  %-24s %s\n", "--help, -h", "this text");
}

static int hold(struct job_out *j, const char *s, size_t n)
{
	if (j->held_len + n + 1 > j->held_cap) {
		size_t cap = j->held_cap ? j->held_cap : 1024;
		while (cap < j->held_len + n + 1)
			cap *= 2;
		char *p = realloc(j->held, cap);
		if (!p)
			return -1;
		j->held = p;
		j->held_cap = cap;
	}
	memcpy(j->held + j->held_len, s, n);
	j->held_len += n;
	return 0;
}

static void out_write(struct gen_state *st, const char *s, size_t n)
{
	if (n && fwrite(s, 1, n, stdout) != n)
		st->write_failed = true;
}

/* Job i's turn begins: its prompt, then what it has so far. */
static void start_turn(struct gen_state *st, size_t i)
{
	struct job_out *j = &st->jobs[i];

	if (!st->o->json && st->o->p.completion_only != 1)
		out_write(st, j->prompt, strlen(j->prompt));
	out_write(st, j->held, j->held_len);
	j->held_len = 0;
}

/* Prints every finished job at the head, then starts the next one. */
static void advance(struct gen_state *st)
{
	while (st->head < st->n && st->jobs[st->head].done) {
		struct job_out *j = &st->jobs[st->head];

		out_write(st, j->held, j->held_len); /* --json: its line */
		j->held_len = 0;
		if (!st->o->json)
			out_write(st, "\n", 1);
		st->head++;
		if (st->head < st->n)
			start_turn(st, st->head);
	}
	if (fflush(stdout))
		st->write_failed = true;
}

static size_t find_job(const struct gen_state *st, uint64_t job)
{
	for (size_t i = 0; i < st->n; i++)
		if (st->jobs[i].job == job)
			return i;
	return st->n;
}

/* exld run's --top-probs lines, on stderr; with several prompts each
 * says whose it is. */
static void print_probs(struct gen_state *st, size_t i, const struct exl_event *ev)
{
	char prefix[32] = "";

	if (st->n > 1)
		snprintf(prefix, sizeof(prefix), "[%zu] ", i + 1);
	print_top_probs(stderr, prefix, ev, st->tt);
}

/* --dump-logits: the event's rows, as they come (one job, so in order). */
static void dump_logits(struct gen_state *st, const struct exl_event *ev)
{
	if (!ev->n_ids || st->logits_errno || st->logits_bad)
		return;
	if (!ev->logits) {
		st->logits_bad = "tokens came without their logits";
		return;
	}
	if (st->n_vocab && ev->n_vocab != st->n_vocab) {
		st->logits_bad = "rows of different lengths";
		return;
	}
	st->n_vocab = ev->n_vocab;
	if (logits_write(st->logits, ev->logits, ev->n_ids * ev->n_vocab))
		st->logits_errno = errno ? errno : EIO;
}

static int on_tokens(struct gen_state *st, size_t i, const struct exl_event *ev)
{
	struct job_out *j = &st->jobs[i];

	if (st->logits)
		dump_logits(st, ev);
	if (st->o->json) {
		if (st->o->top_probs && top_tokens_add(&j->top, ev))
			return -1;
		return 0;
	}
	if (st->o->top_probs && ev->n_top)
		print_probs(st, i, ev);
	if (i == st->head) {
		out_write(st, ev->text, ev->text_len);
		if (fflush(stdout))
			st->write_failed = true;
		return 0;
	}
	return hold(j, ev->text, ev->text_len);
}

static bool reason_ok(const char *reason)
{
	return !strcmp(reason, EXL_REASON_STOP_TOKEN) || !strcmp(reason, EXL_REASON_STOP_STRING) ||
	       !strcmp(reason, EXL_REASON_MAX_NEW_TOKENS) || !strcmp(reason, EXL_REASON_MAX_CONTEXT) ||
	       !strcmp(reason, EXL_REASON_END_FILTER);
}

static int on_done(struct gen_state *st, size_t i, const struct exl_result *r, bool interrupted)
{
	struct job_out *j = &st->jobs[i];

	j->done = true;
	if (st->o->json) {
		char *line = NULL;
		size_t len = 0;
		FILE *m = open_memstream(&line, &len);

		if (!m)
			return -1;
		int bad = json_result(m, r, &j->top, st->tt);
		if (fclose(m) || bad) {
			free(line);
			return -1;
		}
		int rc = hold(j, line, len);
		free(line);
		if (rc)
			return -1;
	}
	if (!reason_ok(r->stop_reason) && !(interrupted && !strcmp(r->stop_reason,
								   EXL_REASON_CANCELLED))) {
		j->failed = true;
		if (st->n > 1)
			fprintf(stderr, "exl generate: prompt %zu: ", i + 1);
		else
			fprintf(stderr, "exl generate: ");
		if (r->error)
			fprintf(stderr, "%s (%s)\n", r->error, exl_status_name(r->error_code));
		else
			fprintf(stderr, "the job ended: %s\n", r->stop_reason);
	}
	if (!strcmp(r->stop_reason, EXL_REASON_MAX_CONTEXT))
		fprintf(stderr, "exl generate: prompt %zu reached the end of the context\n", i + 1);
	return 0;
}

/* Reads the events of every job until all are done.  The status. */
static int run_jobs(struct gen_state *st)
{
	size_t left = st->n;
	bool cancelled = false;

	while (left) {
		struct exl_event ev;
		int n_int = cli_sigint_count();

		if (n_int && !cancelled) {
			cancelled = true;
			for (size_t i = 0; i < st->n; i++)
				if (!st->jobs[i].done)
					exl_cancel(st->c, st->jobs[i].job); /* it may have just ended */
		} else if (n_int > 1) {
			fprintf(stderr, "\nexl generate: interrupted\n");
			return EXL_EXIT_INTERRUPTED;
		}
		int rc = exl_next(st->c, &ev, POLL_MS);
		if (rc == EXL_E_TIMEOUT)
			continue;
		if (rc) {
			fflush(stdout);
			fprintf(stderr, "\n");
			return cli_fail(st->c, rc, "generate", st->o->model);
		}
		size_t i = find_job(st, ev.job);
		if (i == st->n || st->jobs[i].done)
			continue;
		if (ev.type == EXL_EVENT_TOKENS) {
			if (on_tokens(st, i, &ev))
				goto nomem;
			continue;
		}
		if (on_done(st, i, ev.result, cancelled))
			goto nomem;
		left--;
		advance(st);
	}
	if (st->write_failed) {
		fprintf(stderr, "exl generate: cannot write the output\n");
		return EXL_EXIT_FAIL;
	}
	if (st->logits) {
		FILE *f = st->logits;

		st->logits = NULL;
		if (fclose(f) && !st->logits_errno)
			st->logits_errno = errno ? errno : EIO;
		if (st->logits_bad || st->logits_errno) {
			fprintf(stderr, "exl generate: --dump-logits: %s '%s': %s\n",
				st->logits_bad ? "the daemon's logits do not fit" : "cannot write",
				st->logits_path, st->logits_bad ? st->logits_bad :
				strerror(st->logits_errno));
			return EXL_EXIT_FAIL;
		}
	}
	if (cancelled) {
		fprintf(stderr, "exl generate: interrupted\n");
		return EXL_EXIT_INTERRUPTED;
	}
	for (size_t i = 0; i < st->n; i++)
		if (st->jobs[i].failed)
			return EXL_EXIT_FAIL;
	return EXL_EXIT_OK;
nomem:
	fprintf(stderr, "exl generate: out of memory\n");
	return EXL_EXIT_FAIL;
}

/* "-": the prompt is standard input, without one final newline. */
static char *read_stdin_prompt(void)
{
	char err[200];
	size_t len;
	char *s = cli_read_all(0, MAX_STDIN_PROMPT, &len, err, sizeof(err));

	if (!s) {
		fprintf(stderr, "exl generate: reading the prompt from stdin: %s\n", err);
		return NULL;
	}
	if (len && s[len - 1] == '\n')
		s[--len] = 0;
	if (len && s[len - 1] == '\r')
		s[--len] = 0;
	if (strlen(s) != len) {
		fprintf(stderr, "exl generate: the prompt on stdin has a NUL byte\n");
		free(s);
		return NULL;
	}
	return s;
}

int cmd_generate(const struct cli *g, int argc, char **argv)
{
	struct gen_opts o;
	struct gen_state st;
	const char **prompts = NULL;
	char *stdin_prompt = NULL;
	size_t n = 0;
	bool opts_done = false;
	int status = EXL_EXIT_USAGE;
	char err[200];

	memset(&st, 0, sizeof(st));
	if (gen_opts_init(&o, argc, err, sizeof(err))) {
		fprintf(stderr, "exl generate: %s\n", err);
		return EXL_EXIT_FAIL;
	}
	prompts = calloc((size_t)argc + 1, sizeof(*prompts));
	if (!prompts) {
		fprintf(stderr, "exl generate: out of memory\n");
		status = EXL_EXIT_FAIL;
		goto out;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!opts_done && a[0] == '-' && a[1]) {
			if (!strcmp(a, "--")) {
				opts_done = true;
				continue;
			}
			if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
				usage(stdout);
				status = EXL_EXIT_OK;
				goto out;
			}
			if (!strcmp(a, "--dump-logits")) {
				if (i + 1 >= argc || !argv[i + 1][0]) {
					fprintf(stderr, "exl generate: --dump-logits wants a file\n");
					goto out;
				}
				st.logits_path = argv[++i];
				continue;
			}
			int r = gen_opts_take(&o, "generate", argc, argv, &i);
			if (r < 0)
				goto out;
			if (r == 0) {
				fprintf(stderr, "exl generate: unknown option '%s' (exl generate --help)\n", a);
				goto out;
			}
			continue;
		}
		if (!strcmp(a, "-")) {
			if (stdin_prompt) {
				fprintf(stderr, "exl generate: '-' (stdin) may be given once\n");
				goto out;
			}
			stdin_prompt = read_stdin_prompt();
			if (!stdin_prompt) {
				status = EXL_EXIT_FAIL;
				goto out;
			}
			a = stdin_prompt;
		}
		prompts[n++] = a;
	}
	if (gen_opts_finish(&o, "generate"))
		goto out;
	if (!n) {
		fprintf(stderr, "exl generate: no prompt (exl generate --help)\n");
		goto out;
	}
	/* The file is one job's rows: with several prompts, whose would they be? */
	if (st.logits_path && n > 1) {
		fprintf(stderr, "exl generate: --dump-logits takes one prompt, not %zu (the file "
			"holds one job's rows)\n", n);
		goto out;
	}
	if (st.logits_path) {
		st.logits = fopen(st.logits_path, "wb");
		if (!st.logits) {
			fprintf(stderr, "exl generate: --dump-logits: cannot open '%s': %s\n",
				st.logits_path, strerror(errno));
			status = EXL_EXIT_FAIL;
			goto out;
		}
	}

	st.c = cli_connect(g, &status);
	if (!st.c)
		goto out;
	st.o = &o;
	st.n = n;
	st.jobs = calloc(n, sizeof(*st.jobs));
	st.tt = token_texts_new(st.c, o.model);
	if (!st.jobs || !st.tt) {
		fprintf(stderr, "exl generate: out of memory\n");
		status = EXL_EXIT_FAIL;
		goto out;
	}
	if (o.json) {
		/* The result carries the text: the daemon's own, not the stream's. */
		o.p.return_text = 1;
		if (!o.top_probs)
			o.p.stream = EXL_STREAM_MODE_NONE;
	}
	if (st.logits) {
		/* the daemon streams logits over the socket only */
		o.p.return_logits = 1;
		o.p.stream = EXL_STREAM_MODE_SOCKET;
	}
	if (cli_sigint_install(err, sizeof(err))) {
		fprintf(stderr, "exl generate: %s\n", err);
		status = EXL_EXIT_FAIL;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		st.jobs[i].prompt = prompts[i];
		int rc = exl_submit(st.c, &o.p, prompts[i], &st.jobs[i].job);
		if (rc) {
			char what[64] = "generate";
			if (n > 1)
				snprintf(what, sizeof(what), "prompt %zu", i + 1);
			status = cli_fail(st.c, rc, what, o.model);
			goto out; /* closing the connection ends the jobs already queued */
		}
	}
	start_turn(&st, 0);
	if (fflush(stdout))
		st.write_failed = true;
	status = run_jobs(&st);
out:
	if (st.jobs) {
		for (size_t i = 0; i < st.n; i++) {
			free(st.jobs[i].held);
			top_tokens_free(&st.jobs[i].top);
		}
		free(st.jobs);
	}
	if (st.logits)
		fclose(st.logits);
	token_texts_free(st.tt);
	exl_close(st.c);
	free(stdin_prompt);
	free(prompts);
	gen_opts_free(&o);
	return status;
}
