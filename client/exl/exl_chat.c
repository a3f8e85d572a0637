/* exl chat: an interactive conversation with a model in its chat format.
 *
 * Each turn sends the whole conversation, rendered by the model's own chat
 * template (its GGUF's Jinja text) or formatted by a built-in one (--template
 * NAME, or a model without a template; the daemon's prefix cache makes the
 * repeated part cheap), and streams the answer.  Ctrl-C while an answer streams cancels that answer only; Ctrl-C
 * at the prompt right after another Ctrl-C, or end of input, ends the chat.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/exl/exl_chat_jinja.h"
#include "client/exl/exl_chat_template.h"
#include "client/exl/exl_cli.h"
#include "common/read_all.h"

#define POLL_MS 100
#define MAX_LINE (1u << 20)
#define PROMPT ">>> "

struct line_reader {
	char *buf;
	size_t len, cap;
	bool eof;
};

struct chat {
	struct exl_client *c;
	struct gen_opts *o;
	int tmpl;                 /* the built-in format, or its family under jinja */
	char *jinja;              /* the Jinja template rendering turns, or NULL */
	char *bos_token, *eos_token;
	bool tty;                 /* stdin is a terminal: show prompts and hints */
	struct chat_msg *msgs;    /* contents malloc'ed */
	size_t n_msgs, cap_msgs;
	size_t n_system;          /* 0 or 1: the system message is msgs[0] */
	/* the params with the template's end of turn added */
	struct exl_gen_params p;
	const char **stops;
	int32_t *stop_tokens;
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: exl chat [-m MODEL] [--system TEXT] [--template NAME|FILE] [options]\n"
		"Talks with MODEL, one line of input a turn, keeping the conversation.  The\n"
		"model's chat template (Jinja, from its GGUF) renders it; --template names a\n"
		"Jinja file (a name with '/' or ending .jinja) or a built-in format, which\n"
		"models without a template also get:\n  ");
	chat_template_list(out);
	fprintf(out,
		"\nLines /reset (forget the conversation) and /quit are commands.  Ctrl-C stops\n"
		"an answer; Ctrl-C twice at the prompt, or Ctrl-D, ends the chat.\n\n"
		"  %-24s %s\n  %-24s %s\n\ngeneration options (as exl generate's):\n",
		"--system TEXT", "the system prompt", "--template NAME", "the conversation format");
	gen_opts_usage(out);
}

/* One line without its newline: 1, 0 at the end of input, -1 interrupted
 * (EINTR), -2 failed (message printed). */
static int read_line(struct line_reader *r, char **line)
{
	for (;;) {
		char *nl = r->len ? memchr(r->buf, '\n', r->len) : NULL;
		if (nl || (r->eof && r->len)) {
			size_t n = nl ? (size_t)(nl - r->buf) : r->len;
			*line = malloc(n + 1);
			if (!*line) {
				fprintf(stderr, "exl chat: out of memory\n");
				return -2;
			}
			memcpy(*line, r->buf, n);
			(*line)[n] = 0;
			size_t used = nl ? n + 1 : n;
			memmove(r->buf, r->buf + used, r->len - used);
			r->len -= used;
			return 1;
		}
		if (r->eof)
			return 0;
		if (r->len + 4096 > r->cap) {
			if (r->cap >= MAX_LINE) {
				fprintf(stderr, "exl chat: a line of more than %u bytes\n", MAX_LINE);
				return -2;
			}
			size_t cap = r->cap ? r->cap * 2 : 8192;
			char *p = realloc(r->buf, cap);
			if (!p) {
				fprintf(stderr, "exl chat: out of memory\n");
				return -2;
			}
			r->buf = p;
			r->cap = cap;
		}
		ssize_t n = read(0, r->buf + r->len, r->cap - r->len);
		if (n < 0 && errno == EINTR)
			return -1;
		if (n < 0) {
			fprintf(stderr, "exl chat: reading input: %s\n", strerror(errno));
			return -2;
		}
		if (n == 0)
			r->eof = true;
		r->len += (size_t)n;
	}
}

static int push(struct chat *ch, const char *role, const char *content, size_t len)
{
	if (ch->n_msgs == ch->cap_msgs) {
		size_t cap = ch->cap_msgs ? ch->cap_msgs * 2 : 16;
		struct chat_msg *m = realloc(ch->msgs, cap * sizeof(*m));
		if (!m)
			return -1;
		ch->msgs = m;
		ch->cap_msgs = cap;
	}
	char *s = malloc(len + 1);
	if (!s)
		return -1;
	memcpy(s, content, len);
	s[len] = 0;
	ch->msgs[ch->n_msgs].role = role;
	ch->msgs[ch->n_msgs].content = s;
	ch->n_msgs++;
	return 0;
}

static void pop(struct chat *ch)
{
	if (ch->n_msgs > ch->n_system)
		free((char *)ch->msgs[--ch->n_msgs].content);
}

/* Forgets the oldest exchange after the system message: false when only
 * the current question is left. */
static bool drop_oldest(struct chat *ch)
{
	size_t first = ch->n_system;
	size_t k = 0;

	/* a user message and the answers up to the next user message */
	while (first + k < ch->n_msgs && (k == 0 || strcmp(ch->msgs[first + k].role, "user")))
		k++;
	if (first + k >= ch->n_msgs)
		return false;
	for (size_t i = 0; i < k; i++)
		free((char *)ch->msgs[first + i].content);
	memmove(ch->msgs + first, ch->msgs + first + k, (ch->n_msgs - first - k) * sizeof(*ch->msgs));
	ch->n_msgs -= k;
	return true;
}

/* A template's end of turn as a stop token when the model has it as one
 * special token, else as a stop string.  A status code (EXL_E_NOMEM with
 * a message printed). */
static int add_turn_end(struct chat *ch)
{
	const char *end = ch->tmpl == TMPL_UNKNOWN ? NULL : chat_turn_end(ch->tmpl);
	int32_t *sp = NULL, *plain = NULL;
	size_t n_sp = 0, n_plain = 0;
	const struct exl_gen_params *u = &ch->o->p;
	int rc;

	ch->p = *u;
	ch->stops = calloc(u->n_stop_strings + 1, sizeof(*ch->stops));
	ch->stop_tokens = calloc(u->n_stop_tokens + 1, sizeof(*ch->stop_tokens));
	if (!ch->stops || !ch->stop_tokens) {
		fprintf(stderr, "exl chat: out of memory\n");
		return EXL_E_NOMEM;
	}
	if (u->n_stop_strings)
		memcpy(ch->stops, u->stop_strings, u->n_stop_strings * sizeof(*ch->stops));
	if (u->n_stop_tokens)
		memcpy(ch->stop_tokens, u->stop_tokens, u->n_stop_tokens * sizeof(*ch->stop_tokens));
	ch->p.stop_strings = ch->stops;
	ch->p.stop_tokens = ch->stop_tokens;
	/* A template of no known family ends its turns with the EOS. */
	if (!end)
		return EXL_OK;
	rc = exl_tokenize(ch->c, u->model, end, strlen(end), 0, true, &sp, &n_sp);
	if (!rc)
		rc = exl_tokenize(ch->c, u->model, end, strlen(end), 0, false, &plain, &n_plain);
	if (rc) {
		free(sp);
		free(plain);
		return rc;
	}
	if (n_sp == 1 && !(n_plain == 1 && plain[0] == sp[0]))
		ch->stop_tokens[ch->p.n_stop_tokens++] = sp[0];
	else
		ch->stops[ch->p.n_stop_strings++] = end;
	free(sp);
	free(plain);
	return EXL_OK;
}

/* No usable template: chatml when the vocabulary has its markers as
 * special tokens, else the plain format. */
static int fallback_template(struct chat *ch)
{
	int32_t *ids = NULL;
	size_t n = 0;
	int t = TMPL_PLAIN;

	if (exl_tokenize(ch->c, ch->o->p.model, "<|im_start|>", 12, 0, true, &ids, &n) == EXL_OK &&
	    n == 1)
		t = TMPL_CHATML;
	free(ids);
	return t;
}

/* A Jinja file named by --template: its text in ch->jinja. */
static int read_template_file(struct chat *ch, const char *path)
{
	char err[400];
	size_t len;

	ch->jinja = exl_read_file(path, MAX_LINE, &len, err, sizeof(err));
	if (!ch->jinja) {
		fprintf(stderr, "exl chat: %s\n", err);
		return EXL_EXIT_USAGE;
	}
	return EXL_EXIT_OK;
}

static bool names_file(const char *name)
{
	size_t n = strlen(name);

	return strchr(name, '/') || (n > 6 && !strcmp(name + n - 6, ".jinja"));
}

/* The model's template (and BOS/EOS text) from the daemon; a built-in
 * format when --template names one or the model has no template. */
static int pick_template(struct chat *ch, const char *name)
{
	char *jinja = NULL;

	if (name && !names_file(name)) {
		ch->tmpl = chat_template_by_name(name);
		if (ch->tmpl == TMPL_UNKNOWN) {
			fprintf(stderr, "exl chat: no template '%s' (one of: ", name);
			chat_template_list(stderr);
			fprintf(stderr, "; or a .jinja file)\n");
			return EXL_EXIT_USAGE;
		}
		return EXL_EXIT_OK;
	}
	int rc = exl_chat_template_ex(ch->c, ch->o->p.model, &jinja, &ch->bos_token, &ch->eos_token);
	if (rc)
		return cli_fail(ch->c, rc, "chat", ch->o->p.model);
	if (name) {
		free(jinja);
		jinja = NULL;
		rc = read_template_file(ch, name);
		if (rc)
			return rc;
	} else {
		ch->jinja = jinja;
	}
	if (ch->jinja) {
		/* The family gives the end-of-turn stop; the template renders. */
		ch->tmpl = chat_template_detect(ch->jinja);
		return EXL_EXIT_OK;
	}
	ch->tmpl = fallback_template(ch);
	return EXL_EXIT_OK;
}

/* The conversation as the prompt of the next answer (malloc'ed), or NULL
 * with the reason printed. */
static char *render(struct chat *ch, bool *template_failed)
{
	char err[512];
	char *prompt = NULL;

	*template_failed = false;
	if (!ch->jinja) {
		prompt = chat_format(ch->tmpl, ch->msgs, ch->n_msgs);
		if (!prompt)
			fprintf(stderr, "exl chat: out of memory\n");
		return prompt;
	}
	if (chat_jinja_render(ch->jinja, ch->bos_token, ch->eos_token, ch->msgs, ch->n_msgs,
			      &prompt, err, sizeof(err))) {
		fprintf(stderr, "exl chat: the chat template: %s\n", err);
		*template_failed = true;
		return NULL;
	}
	return prompt;
}

/* Streams one answer into *answer.  The exit status, or -1 when the chat
 * goes on (the answer may be cut short). */
static int stream_answer(struct chat *ch, uint64_t job, char **answer, size_t *len)
{
	size_t cap = 0;
	bool cancelled = false;

	*answer = NULL;
	*len = 0;
	for (;;) {
		struct exl_event ev;

		if (cli_sigint_count() && !cancelled) {
			cancelled = true;
			exl_cancel(ch->c, job); /* it may have just ended: then unknown_job */
		}
		int rc = exl_next(ch->c, &ev, POLL_MS);
		if (rc == EXL_E_TIMEOUT)
			continue;
		if (rc) {
			fputc('\n', stdout);
			fflush(stdout);
			return cli_fail(ch->c, rc, "chat", ch->o->p.model);
		}
		if (ev.job != job)
			continue;
		if (ev.type == EXL_EVENT_TOKENS) {
			const char *text = ev.text;
			size_t text_len = ev.text_len;

			/* The answer starts at its first visible character. */
			while (!*len && text_len && (*text == ' ' || *text == '\n' || *text == '\r' ||
						     *text == '\t')) {
				text++;
				text_len--;
			}
			if (!text_len)
				continue;
			if (*len + text_len + 1 > cap) {
				size_t c2 = cap ? cap * 2 : 1024;
				while (c2 < *len + text_len + 1)
					c2 *= 2;
				char *p = realloc(*answer, c2);
				if (!p) {
					fprintf(stderr, "exl chat: out of memory\n");
					return EXL_EXIT_FAIL;
				}
				*answer = p;
				cap = c2;
			}
			memcpy(*answer + *len, text, text_len);
			*len += text_len;
			(*answer)[*len] = 0;
			fwrite(text, 1, text_len, stdout);
			fflush(stdout);
			continue;
		}
		fputc('\n', stdout);
		fflush(stdout);
		const struct exl_result *r = ev.result;
		if (!strcmp(r->stop_reason, EXL_REASON_CANCELLED) && cancelled)
			fprintf(stderr, "[answer stopped]\n");
		else if (r->error)
			fprintf(stderr, "exl chat: %s\n", r->error);
		else if (!strcmp(r->stop_reason, EXL_REASON_MAX_NEW_TOKENS) && ch->tty)
			fprintf(stderr, "[answer cut at %d tokens: -n sets the limit]\n", r->new_tokens);
		else if (!strcmp(r->stop_reason, EXL_REASON_MAX_CONTEXT) && ch->tty)
			fprintf(stderr, "[answer cut: the context is full]\n");
		else if (strcmp(r->stop_reason, EXL_REASON_STOP_TOKEN) &&
			 strcmp(r->stop_reason, EXL_REASON_STOP_STRING) &&
			 strcmp(r->stop_reason, EXL_REASON_MAX_NEW_TOKENS) &&
			 strcmp(r->stop_reason, EXL_REASON_MAX_CONTEXT))
			fprintf(stderr, "exl chat: the answer ended: %s\n", r->stop_reason);
		if (r->error && r->error_code != EXL_E_LIMIT)
			return cli_exit_status(r->error_code ? r->error_code : EXL_E_INTERNAL);
		return -1;
	}
}

/* One exchange: the question is the last message. */
static int turn(struct chat *ch)
{
	uint64_t job;
	int rc;

	for (;;) {
		bool template_failed;
		char *prompt = render(ch, &template_failed);
		if (!prompt && template_failed) {
			/* The template refused this conversation (raise_exception):
			 * forget the question, the chat goes on. */
			pop(ch);
			return -1;
		}
		if (!prompt)
			return EXL_EXIT_FAIL;
		struct exl_gen_params p = ch->p;
		/* A template that writes the BOS itself gets no second one. */
		if (ch->jinja && p.add_bos < 0 && ch->bos_token && *ch->bos_token &&
		    !strncmp(prompt, ch->bos_token, strlen(ch->bos_token)))
			p.add_bos = 0;
		rc = exl_submit(ch->c, &p, prompt, &job);
		free(prompt);
		if (rc != EXL_E_TOO_LARGE)
			break;
		/* Too long for the context: forget the oldest exchange and retry. */
		if (!drop_oldest(ch))
			break;
		if (ch->tty)
			fprintf(stderr, "[the conversation is too long: forgot its oldest exchange]\n");
	}
	if (rc) {
		int status = cli_fail(ch->c, rc, "chat", ch->o->p.model);
		pop(ch);
		/* A question too long, or over a limit: the chat goes on. */
		return rc == EXL_E_TOO_LARGE || rc == EXL_E_LIMIT || rc == EXL_E_BAD_REQUEST ? -1 : status;
	}
	char *answer;
	size_t len;
	int st = stream_answer(ch, job, &answer, &len);
	if (st < 0 && push(ch, "assistant", answer ? answer : "", len)) {
		fprintf(stderr, "exl chat: out of memory\n");
		st = EXL_EXIT_FAIL;
	}
	free(answer);
	return st;
}

static int chat_loop(struct chat *ch)
{
	struct line_reader r = { 0 };
	bool interrupted = false;  /* the last thing the user did was Ctrl-C */
	int status = EXL_EXIT_OK;

	for (;;) {
		char *line = NULL;

		if (ch->tty) {
			fputs(PROMPT, stdout);
			fflush(stdout);
		}
		int n = read_line(&r, &line);
		if (n == -1) {
			cli_sigint_clear();
			fputc('\n', stdout);
			if (interrupted)
				break;
			interrupted = true;
			if (ch->tty)
				fprintf(stderr, "(Ctrl-C again or Ctrl-D to exit)\n");
			continue;
		}
		if (n == -2) {
			status = EXL_EXIT_FAIL;
			break;
		}
		if (n == 0) {
			if (ch->tty)
				fputc('\n', stdout);
			break;
		}
		interrupted = false;
		size_t len = strlen(line);
		if (len && line[len - 1] == '\r')
			line[--len] = 0;
		const char *s = line;
		while (*s == ' ' || *s == '\t')
			s++;
		if (!*s) {
			free(line);
			continue;
		}
		if (!strcmp(s, "/quit") || !strcmp(s, "/exit")) {
			free(line);
			break;
		}
		if (!strcmp(s, "/reset")) {
			while (ch->n_msgs > ch->n_system)
				pop(ch);
			if (ch->tty)
				fprintf(stderr, "[conversation forgotten]\n");
			free(line);
			continue;
		}
		int rc = push(ch, "user", line, len);
		free(line);
		if (rc) {
			fprintf(stderr, "exl chat: out of memory\n");
			status = EXL_EXIT_FAIL;
			break;
		}
		cli_sigint_clear();
		int st = turn(ch);
		if (cli_sigint_count())
			interrupted = true; /* this answer was stopped */
		cli_sigint_clear();
		if (st >= 0) {
			status = st;
			break;
		}
	}
	free(r.buf);
	return status;
}

int cmd_chat(const struct cli *g, int argc, char **argv)
{
	struct gen_opts o;
	struct chat ch;
	const char *system = NULL, *tmpl_name = NULL;
	int status = EXL_EXIT_USAGE;
	char err[600];

	memset(&ch, 0, sizeof(ch));
	if (gen_opts_init(&o, argc, err, sizeof(err))) {
		fprintf(stderr, "exl chat: %s\n", err);
		return EXL_EXIT_FAIL;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			status = EXL_EXIT_OK;
			goto out;
		}
		if (!strcmp(a, "--system") || !strcmp(a, "--template")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "exl chat: %s needs a value\n", a);
				goto out;
			}
			if (a[2] == 's')
				system = argv[++i];
			else
				tmpl_name = argv[++i];
			continue;
		}
		int r = gen_opts_take(&o, "chat", argc, argv, &i);
		if (r < 0)
			goto out;
		if (r == 0) {
			fprintf(stderr, "exl chat: unknown argument '%s' (exl chat --help)\n", a);
			goto out;
		}
	}
	if (gen_opts_finish(&o, "chat"))
		goto out;
	if (o.json || o.top_probs || o.p.completion_only == 1) {
		fprintf(stderr, "exl chat: --json, --top-probs and --completion-only are for exl "
			"generate\n");
		goto out;
	}
	ch.o = &o;
	ch.tty = isatty(0) == 1;
	ch.c = cli_connect(g, &status);
	if (!ch.c)
		goto out;
	status = pick_template(&ch, tmpl_name);
	if (status)
		goto out;
	int rc = add_turn_end(&ch);
	if (rc) {
		status = rc == EXL_E_NOMEM ? EXL_EXIT_FAIL : cli_fail(ch.c, rc, "chat", o.model);
		goto out;
	}
	/* The template's markers are special tokens. */
	if (ch.p.encode_special < 0)
		ch.p.encode_special = 1;
	if (system && *system) {
		if (push(&ch, "system", system, strlen(system))) {
			fprintf(stderr, "exl chat: out of memory\n");
			status = EXL_EXIT_FAIL;
			goto out;
		}
		ch.n_system = 1;
	}
	if (cli_sigint_install(err, sizeof(err))) {
		fprintf(stderr, "exl chat: %s\n", err);
		status = EXL_EXIT_FAIL;
		goto out;
	}
	if (ch.tty && ch.jinja)
		fprintf(stderr, "exl chat: %s chat template%s%s%s; Ctrl-C stops an answer, Ctrl-D "
			"ends the chat, /reset forgets it\n", tmpl_name ? "the file's" : "the model's",
			ch.tmpl != TMPL_UNKNOWN ? " (" : "",
			ch.tmpl != TMPL_UNKNOWN ? chat_template_name(ch.tmpl) : "",
			ch.tmpl != TMPL_UNKNOWN ? ")" : "");
	else if (ch.tty)
		fprintf(stderr, "exl chat: %s format; Ctrl-C stops an answer, Ctrl-D ends the chat, "
			"/reset forgets it\n", chat_template_name(ch.tmpl));
	status = chat_loop(&ch);
out:
	for (size_t i = 0; i < ch.n_msgs; i++)
		free((char *)ch.msgs[i].content);
	free(ch.msgs);
	free(ch.jinja);
	free(ch.bos_token);
	free(ch.eos_token);
	free(ch.stops);
	free(ch.stop_tokens);
	exl_close(ch.c);
	gen_opts_free(&o);
	return status;
}
