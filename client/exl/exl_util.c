/* What every exl subcommand uses: the socket path, connecting with a hint
 * when exld is not there, exit statuses (docs/exl.md), Ctrl-C, reading a
 * prompt from stdin, byte sizes.  exl.c (main) dispatches to the
 * subcommands, which use these and never exl.c. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/exl/exl_cli.h"

const char *cli_socket_path(const struct cli *g)
{
	const char *p = g->socket;

	if (!p || !*p)
		p = getenv(EXL_SOCKET_ENV);
	if (!p || !*p)
		p = EXL_DEFAULT_SOCKET;
	return p;
}

/* Why a connection to path failed, as the user can act on it. */
static const char *connect_hint(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0) {
		if (errno == EACCES)
			return "no access to its directory: is your user in the daemon's group?";
		return "is the daemon running?";
	}
	if (!S_ISSOCK(st.st_mode))
		return "that is not a socket";
	if (access(path, R_OK | W_OK) < 0)
		return "no access to the socket: is your user in its group (e.g. exld)?";
	return "is the daemon running?";
}

struct exl_client *cli_connect(const struct cli *g, int *status)
{
	const char *path = cli_socket_path(g);
	struct exl_connect_opts o = { .client_name = "exl", .timeout_ms = -1 };
	struct exl_client *c;
	char err[600];
	char prefix[1200];

	int rc = exl_connect(&c, path, &o, err, sizeof(err));
	if (rc == EXL_OK) {
		*status = EXL_EXIT_OK;
		return c;
	}
	/* The library says "connecting to PATH: reason"; keep the reason. */
	const char *reason = err;
	snprintf(prefix, sizeof(prefix), "connecting to %s: ", path);
	if (!strncmp(err, prefix, strlen(prefix)))
		reason = err + strlen(prefix);
	if (rc == EXL_E_CLOSED || rc == EXL_E_IO) {
		fprintf(stderr, "exl: cannot connect to exld at %s: %s (%s)\n", path, reason,
			connect_hint(path));
		*status = EXL_EXIT_CONNECT;
	} else {
		fprintf(stderr, "exl: cannot connect to exld at %s: %s\n", path, reason);
		*status = cli_exit_status(rc);
	}
	return NULL;
}

int cli_exit_status(int rc)
{
	switch (rc) {
	case EXL_OK:
		return EXL_EXIT_OK;
	case EXL_E_UNKNOWN_MODEL:
	case EXL_E_NOT_FOUND:
		return EXL_EXIT_MODEL;
	case EXL_E_FORBIDDEN:
		return EXL_EXIT_FORBIDDEN;
	case EXL_E_INVALID:
		return EXL_EXIT_USAGE;
	case EXL_E_UNSUPPORTED:
		return EXL_EXIT_UNSUPPORTED;
	default:
		return EXL_EXIT_FAIL;
	}
}

/* For an unknown model: what the daemon has by that name. */
static void model_hint(struct exl_client *c, const char *model)
{
	struct exl_model_info *list;
	size_t n;

	if (exl_models(c, &list, &n))
		return;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(list[i].name, model))
			continue;
		if (!strcmp(list[i].state, "available"))
			fprintf(stderr, "exl: '%s' is in the model directory but not loaded "
				"(exl load %s)\n", model, model);
		else
			fprintf(stderr, "exl: '%s' is %s\n", model, list[i].state);
		free(list);
		return;
	}
	fprintf(stderr, "exl: the daemon has no model '%s' (exl models lists them)\n", model);
	free(list);
}

int cli_fail(struct exl_client *c, int rc, const char *what, const char *model)
{
	char msg[600];

	/* The message first: the hint's own request overwrites it. */
	snprintf(msg, sizeof(msg), "%s", exl_errmsg(c));
	size_t wl = strlen(what);
	if (!strncmp(msg, what, wl) && msg[wl] == ':')
		fprintf(stderr, "exl: %s\n", msg); /* the daemon named the op already */
	else
		fprintf(stderr, "exl: %s: %s\n", what, msg[0] ? msg : exl_status_name(rc));
	if (rc == EXL_E_UNKNOWN_MODEL && model)
		model_hint(c, model);
	else if (rc == EXL_E_UNKNOWN_MODEL)
		fprintf(stderr, "exl: name the model with -m MODEL (exl models lists them)\n");
	if (rc == EXL_E_FORBIDDEN)
		fprintf(stderr, "exl: loading and unloading are for the daemon's admins "
			"(root, its own user, admin_uids)\n");
	return cli_exit_status(rc);
}

static volatile sig_atomic_t sigint_count;

static void on_sigint(int sig)
{
	(void)sig;
	if (sigint_count < 1000)
		sigint_count++;
}

int cli_sigint_install(char *err, size_t errlen)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0; /* no SA_RESTART: a blocking read returns EINTR */
	if (sigaction(SIGINT, &sa, NULL) < 0) {
		snprintf(err, errlen, "sigaction: %s", strerror(errno));
		return -1;
	}
	return 0;
}

int cli_sigint_count(void)
{
	return (int)sigint_count;
}

void cli_sigint_clear(void)
{
	sigint_count = 0;
}

char *cli_read_all(int fd, size_t max, size_t *len, char *err, size_t errlen)
{
	size_t n = 0, cap = 4096;
	char *buf = malloc(cap);

	if (!buf) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	for (;;) {
		if (n + 1 == cap) {
			if (cap > max) {
				snprintf(err, errlen, "more than %zu bytes", max);
				free(buf);
				return NULL;
			}
			char *p = realloc(buf, cap * 2);
			if (!p) {
				snprintf(err, errlen, "out of memory");
				free(buf);
				return NULL;
			}
			buf = p;
			cap *= 2;
		}
		ssize_t r = read(fd, buf + n, cap - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(err, errlen, "%s", strerror(errno));
			free(buf);
			return NULL;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (n > max) {
		snprintf(err, errlen, "more than %zu bytes", max);
		free(buf);
		return NULL;
	}
	buf[n] = 0;
	*len = n;
	return buf;
}

const char *cli_bytes(uint64_t n, char *buf, size_t size)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)n;
	int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, size, "%llu B", (unsigned long long)n);
	else
		snprintf(buf, size, "%.1f %s", v, units[u]);
	return buf;
}
