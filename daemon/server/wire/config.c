/* Config file and settings: key = value lines, '#' comments. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "exl_wire.h"
#include "daemon/server/wire/config.h"

#define CONFIG_MAX_LINE 8192 /* bytes in one line */

void exl_config_defaults(struct exl_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->socket_path, sizeof(c->socket_path), "%s", EXL_DEFAULT_SOCKET);
	c->socket_mode = 0660;
	snprintf(c->models_dir, sizeof(c->models_dir), "/var/lib/exld/models");
	c->threads = 0;
	c->kv_tokens = 0; /* sized at load: daemon/core/model/kvcache.h, exl_kvcache_auto_tokens */
	c->kv_page_size = 32;
	c->max_batch_tokens = 512;
	c->prefill_chunk = 256;
	c->max_running_jobs = 64;
	c->suspend_after_ms = 0;
	c->resume_yield_ms = 1000;
	c->step_target_ms = 1000;
	c->max_jobs_per_uid = 64;
	c->max_new_tokens = 4096;
	c->max_message = EXL_MAX_MESSAGE_DEFAULT;
	c->ring_size = EXL_RING_SIZE_DEFAULT;
	c->max_connections = 1024;
	c->max_connections_per_uid = 64;
	c->connections_reserved = 64;
	c->request_timeout_ms = 10000;
	c->max_pending_bytes = 128ull << 20;
	c->drain_timeout_ms = 20000; /* below the unit's TimeoutStopSec=30 */
	snprintf(c->device, sizeof(c->device), "cpu");
	c->http_uid = 65534; /* nobody: TCP clients are nobody in particular */
}

bool exl_model_name_valid(const char *name, size_t len)
{
	if (len == 0 || len > EXL_MAX_NAME || name[0] == '.')
		return false;
	for (size_t i = 0; i < len; i++) {
		char ch = name[i];
		if (!(isalnum((unsigned char)ch) || ch == '.' || ch == '_' || ch == '-'))
			return false;
		if (ch == '.' && i + 1 < len && name[i + 1] == '.')
			return false;
	}
	return true;
}

static int parse_long(const char *key, const char *v, long min, long max, long *out,
		      char *err, size_t errlen)
{
	char *end;

	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || end == v || *end || x < min || x > max) {
		snprintf(err, errlen, "%s: wants an integer in [%ld, %ld], got '%s'", key, min,
			 max, v);
		return -1;
	}
	*out = x;
	return 0;
}

/* A byte size with an optional K, M or G suffix (powers of 1024). */
static int parse_size(const char *key, const char *v, uint64_t min, uint64_t max,
		      uint64_t *out, char *err, size_t errlen)
{
	char *end;
	uint64_t mult = 1;

	errno = 0;
	if (!isdigit((unsigned char)v[0]))
		goto bad;
	unsigned long long x = strtoull(v, &end, 10);
	if (errno || end == v)
		goto bad;
	if (*end == 'K' || *end == 'k')
		mult = 1ull << 10, end++;
	else if (*end == 'M' || *end == 'm')
		mult = 1ull << 20, end++;
	else if (*end == 'G' || *end == 'g')
		mult = 1ull << 30, end++;
	if (*end)
		goto bad;
	if (x > max / mult || x * mult < min || x * mult > max)
		goto bad;
	*out = x * mult;
	return 0;
bad:
	snprintf(err, errlen, "%s: wants a size in [%llu, %llu] bytes (suffix K, M, G allowed), got '%s'",
		 key, (unsigned long long)min, (unsigned long long)max, v);
	return -1;
}

static int parse_uid(const char *key, const char *v, uid_t *out, char *err, size_t errlen)
{
	long x;

	if (parse_long(key, v, 0, (long)INT_MAX, &x, err, errlen))
		return -1;
	*out = (uid_t)x;
	return 0;
}

/* Splits a comma- or space-separated list; calls fn for every item. */
static int for_each_item(const char *v, int (*fn)(struct exl_config *, const char *, char *, size_t),
			 struct exl_config *c, char *err, size_t errlen)
{
	char item[256];
	const char *p = v;

	while (*p) {
		while (*p == ',' || isspace((unsigned char)*p))
			p++;
		if (!*p)
			break;
		size_t n = 0;
		while (p[n] && p[n] != ',' && !isspace((unsigned char)p[n]))
			n++;
		if (n >= sizeof(item)) {
			snprintf(err, errlen, "list item of %zu bytes is too long", n);
			return -1;
		}
		memcpy(item, p, n);
		item[n] = 0;
		if (fn(c, item, err, errlen))
			return -1;
		p += n;
	}
	return 0;
}

static int add_load(struct exl_config *c, const char *name, char *err, size_t errlen)
{
	if (!exl_model_name_valid(name, strlen(name))) {
		snprintf(err, errlen, "load: '%s' is not a model name (letters, digits, '.', '_', '-'; no path)", name);
		return -1;
	}
	for (int i = 0; i < c->n_load; i++)
		if (!strcmp(c->load[i], name))
			return 0;
	if (c->n_load >= EXL_CONFIG_MAX_LOAD) {
		snprintf(err, errlen, "load: at most %d models", EXL_CONFIG_MAX_LOAD);
		return -1;
	}
	snprintf(c->load[c->n_load++], sizeof(c->load[0]), "%s", name);
	return 0;
}

static int add_admin(struct exl_config *c, const char *v, char *err, size_t errlen)
{
	uid_t uid;

	if (parse_uid("admin_uids", v, &uid, err, errlen))
		return -1;
	if (c->n_admin_uids >= EXL_CONFIG_MAX_ADMINS) {
		snprintf(err, errlen, "admin_uids: at most %d", EXL_CONFIG_MAX_ADMINS);
		return -1;
	}
	c->admin_uids[c->n_admin_uids++] = uid;
	return 0;
}

/* "UID JOBS TOKENS" */
static int set_uid_limit(struct exl_config *c, const char *v, char *err, size_t errlen)
{
	char a[32], b[32], d[32], extra[2];
	struct exl_uid_limit l;
	long x;

	if (sscanf(v, "%31s %31s %31s %1s", a, b, d, extra) != 3) {
		snprintf(err, errlen, "uid_limit: wants 'UID MAX_JOBS MAX_NEW_TOKENS', got '%s'", v);
		return -1;
	}
	if (parse_uid("uid_limit UID", a, &l.uid, err, errlen))
		return -1;
	if (parse_long("uid_limit MAX_JOBS", b, 0, 1000000, &x, err, errlen))
		return -1;
	l.max_jobs = (int)x;
	if (parse_long("uid_limit MAX_NEW_TOKENS", d, 0, 1 << 24, &x, err, errlen))
		return -1;
	l.max_new_tokens = (int)x;
	for (int i = 0; i < c->n_uid_limits; i++) {
		if (c->uid_limits[i].uid == l.uid) {
			c->uid_limits[i] = l;
			return 0;
		}
	}
	if (c->n_uid_limits >= EXL_CONFIG_MAX_UID_LIMITS) {
		snprintf(err, errlen, "uid_limit: at most %d lines", EXL_CONFIG_MAX_UID_LIMITS);
		return -1;
	}
	c->uid_limits[c->n_uid_limits++] = l;
	return 0;
}

int exl_config_parse_http(const char *v, struct exl_http_listen *l, char *err, size_t errlen)
{
	char host[64];
	const char *colon;
	long port;
	size_t hlen;

	memset(l, 0, sizeof(*l));
	snprintf(l->spec, sizeof(l->spec), "%s", v);
	if (!strncmp(v, "unix:", 5)) {
		if (v[5] != '/' || strlen(v + 5) >= sizeof(l->path)) {
			snprintf(err, errlen, "http: wants unix:/absolute/path (under %zu bytes), "
				 "got '%s'", sizeof(l->path), v);
			return -1;
		}
		l->family = AF_UNIX;
		l->loopback = true;
		snprintf(l->path, sizeof(l->path), "%s", v + 5);
		return 0;
	}
	if (v[0] == '[') {
		const char *end = strchr(v, ']');
		if (!end || end[1] != ':')
			goto bad;
		hlen = (size_t)(end - v - 1);
		if (hlen >= sizeof(host))
			goto bad;
		memcpy(host, v + 1, hlen);
		colon = end + 1;
		l->family = AF_INET6;
	} else {
		colon = strrchr(v, ':');
		if (!colon)
			goto bad;
		hlen = (size_t)(colon - v);
		if (hlen >= sizeof(host))
			goto bad;
		memcpy(host, v, hlen);
		l->family = AF_INET;
	}
	host[hlen] = 0;
	if (l->family == AF_INET && !strcmp(host, "localhost"))
		snprintf(host, sizeof(host), "127.0.0.1");
	if (parse_long("http port", colon + 1, 0, 65535, &port, err, errlen))
		return -1;
	l->port = (uint16_t)port;
	if (l->family == AF_INET) {
		struct in_addr a;
		if (inet_pton(AF_INET, host, &a) != 1)
			goto bad;
		l->loopback = (ntohl(a.s_addr) >> 24) == 127;
	} else {
		struct in6_addr a;
		if (inet_pton(AF_INET6, host, &a) != 1)
			goto bad;
		l->loopback = IN6_IS_ADDR_LOOPBACK(&a);
	}
	snprintf(l->addr, sizeof(l->addr), "%s", host);
	return 0;
bad:
	snprintf(err, errlen, "http: wants 127.0.0.1:PORT, [::1]:PORT, another numeric "
		 "ADDRESS:PORT or unix:/path, got '%s'", v);
	return -1;
}

static int add_http(struct exl_config *c, const char *v, char *err, size_t errlen)
{
	if (c->n_http >= EXL_CONFIG_MAX_HTTP) {
		snprintf(err, errlen, "http: at most %d listeners", EXL_CONFIG_MAX_HTTP);
		return -1;
	}
	if (exl_config_parse_http(v, &c->http[c->n_http], err, errlen))
		return -1;
	c->n_http++;
	return 0;
}

static int parse_yes_no(const char *key, const char *v, bool *out, char *err, size_t errlen)
{
	if (!strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "1")) {
		*out = true;
		return 0;
	}
	if (!strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "0")) {
		*out = false;
		return 0;
	}
	snprintf(err, errlen, "%s: wants yes or no, got '%s'", key, v);
	return -1;
}

static int set_device(struct exl_config *c, const char *v, char *err, size_t errlen)
{
	long dev;

	if (!strcmp(v, "cpu")) {
		snprintf(c->device, sizeof(c->device), "cpu");
		return 0;
	}
	if (!strcmp(v, "cuda")) {
		snprintf(c->device, sizeof(c->device), "cuda:0");
		return 0;
	}
	if (!strncmp(v, "cuda:", 5) && !parse_long("device", v + 5, 0, 255, &dev, err, errlen)) {
		snprintf(c->device, sizeof(c->device), "cuda:%ld", dev);
		return 0;
	}
	snprintf(err, errlen, "device: wants 'cpu', 'cuda' or 'cuda:N', got '%s'", v);
	return -1;
}

int exl_config_set(struct exl_config *c, const char *key, const char *v, char *err, size_t errlen)
{
	long x;
	uint64_t sz;

	if (!strcmp(key, "socket")) {
		if (v[0] != '/' || strlen(v) >= sizeof(c->socket_path)) {
			snprintf(err, errlen, "socket: wants an absolute path under %zu bytes, got '%s'",
				 sizeof(c->socket_path), v);
			return -1;
		}
		snprintf(c->socket_path, sizeof(c->socket_path), "%s", v);
	} else if (!strcmp(key, "socket_mode")) {
		char *end;
		errno = 0;
		unsigned long m = strtoul(v, &end, 8);
		if (errno || end == v || *end || m > 0777) {
			snprintf(err, errlen, "socket_mode: wants an octal mode like 0660, got '%s'", v);
			return -1;
		}
		c->socket_mode = (unsigned)m;
	} else if (!strcmp(key, "models_dir") || !strcmp(key, "models")) {
		if (!v[0] || strlen(v) >= sizeof(c->models_dir)) {
			snprintf(err, errlen, "%s: wants a directory path", key);
			return -1;
		}
		snprintf(c->models_dir, sizeof(c->models_dir), "%s", v);
	} else if (!strcmp(key, "load")) {
		return for_each_item(v, add_load, c, err, errlen);
	} else if (!strcmp(key, "threads")) {
		if (parse_long(key, v, 0, 1024, &x, err, errlen))
			return -1;
		c->threads = (int)x;
	} else if (!strcmp(key, "kv_tokens")) {
		if (!strcmp(v, "auto")) {
			c->kv_tokens = 0;
			return 0;
		}
		if (parse_long(key, v, 0, 1 << 24, &x, err, errlen))
			return -1;
		if (x > 0 && x < 16) {
			snprintf(err, errlen, "%s: wants auto, 0 (auto) or 16 .. %d, got '%s'", key,
				 1 << 24, v);
			return -1;
		}
		c->kv_tokens = (int)x;
	} else if (!strcmp(key, "kv_page_size")) {
		if (parse_long(key, v, 1, 4096, &x, err, errlen))
			return -1;
		c->kv_page_size = (int)x;
	} else if (!strcmp(key, "max_batch_tokens")) {
		if (parse_long(key, v, 1, 1 << 16, &x, err, errlen))
			return -1;
		c->max_batch_tokens = (int)x;
	} else if (!strcmp(key, "prefill_chunk")) {
		if (parse_long(key, v, 1, 1 << 16, &x, err, errlen))
			return -1;
		c->prefill_chunk = (int)x;
	} else if (!strcmp(key, "max_running_jobs")) {
		if (parse_long(key, v, 1, 4096, &x, err, errlen))
			return -1;
		c->max_running_jobs = (int)x;
	} else if (!strcmp(key, "step_target_ms")) {
		if (parse_long(key, v, 0, 3600000, &x, err, errlen))
			return -1;
		c->step_target_ms = (int)x;
	} else if (!strcmp(key, "suspend_after_ms")) {
		if (parse_long(key, v, 0, 86400000, &x, err, errlen))
			return -1;
		c->suspend_after_ms = (int)x;
	} else if (!strcmp(key, "resume_yield_ms")) {
		if (parse_long(key, v, 0, 86400000, &x, err, errlen))
			return -1;
		c->resume_yield_ms = (int)x;
	} else if (!strcmp(key, "max_jobs_per_uid")) {
		if (parse_long(key, v, 0, 1000000, &x, err, errlen))
			return -1;
		c->max_jobs_per_uid = (int)x;
	} else if (!strcmp(key, "max_new_tokens")) {
		if (parse_long(key, v, 0, 1 << 24, &x, err, errlen))
			return -1;
		c->max_new_tokens = (int)x;
	} else if (!strcmp(key, "uid_limit")) {
		return set_uid_limit(c, v, err, errlen);
	} else if (!strcmp(key, "admin_uids")) {
		c->n_admin_uids = 0;
		return for_each_item(v, add_admin, c, err, errlen);
	} else if (!strcmp(key, "max_message")) {
		if (parse_size(key, v, EXL_MAX_MESSAGE_MIN, EXL_MAX_MESSAGE_MAX, &sz, err, errlen))
			return -1;
		c->max_message = (uint32_t)sz;
	} else if (!strcmp(key, "ring_size")) {
		if (parse_size(key, v, EXL_RING_SIZE_MIN, EXL_RING_SIZE_MAX, &sz, err, errlen))
			return -1;
		if (sz & (sz - 1)) {
			snprintf(err, errlen, "ring_size: wants a power of two, got %llu",
				 (unsigned long long)sz);
			return -1;
		}
		c->ring_size = (uint32_t)sz;
	} else if (!strcmp(key, "max_connections_per_uid")) {
		if (parse_long(key, v, 0, 1000000, &x, err, errlen))
			return -1;
		c->max_connections_per_uid = (int)x;
	} else if (!strcmp(key, "max_connections")) {
		if (parse_long(key, v, 1, 1000000, &x, err, errlen))
			return -1;
		c->max_connections = (int)x;
	} else if (!strcmp(key, "connections_reserved")) {
		if (parse_long(key, v, 0, 1000000, &x, err, errlen))
			return -1;
		c->connections_reserved = (int)x;
	} else if (!strcmp(key, "request_timeout_ms")) {
		if (parse_long(key, v, 100, 3600000, &x, err, errlen))
			return -1;
		c->request_timeout_ms = (int)x;
	} else if (!strcmp(key, "max_pending_bytes")) {
		if (parse_size(key, v, EXL_MAX_MESSAGE_MIN, 1ull << 40, &sz, err, errlen))
			return -1;
		c->max_pending_bytes = sz;
	} else if (!strcmp(key, "drain_timeout_ms")) {
		if (parse_long(key, v, 0, 3600000, &x, err, errlen))
			return -1;
		c->drain_timeout_ms = (int)x;
	} else if (!strcmp(key, "device")) {
		return set_device(c, v, err, errlen);
	} else if (!strcmp(key, "http")) {
		return add_http(c, v, err, errlen);
	} else if (!strcmp(key, "http_allow_remote")) {
		return parse_yes_no(key, v, &c->http_allow_remote, err, errlen);
	} else if (!strcmp(key, "http_api_key")) {
		if (strlen(v) > EXL_CONFIG_MAX_API_KEY) {
			snprintf(err, errlen, "http_api_key: at most %d bytes", EXL_CONFIG_MAX_API_KEY);
			return -1;
		}
		for (const char *p = v; *p; p++) {
			if (*p <= ' ' || *p == 0x7f) {
				snprintf(err, errlen, "http_api_key: no spaces or control characters");
				return -1;
			}
		}
		snprintf(c->http_api_key, sizeof(c->http_api_key), "%s", v);
	} else if (!strcmp(key, "http_uid")) {
		return parse_uid(key, v, &c->http_uid, err, errlen);
	} else {
		snprintf(err, errlen, "unknown setting '%s'", key);
		return -1;
	}
	return 0;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = 0;
	return s;
}

int exl_config_load(struct exl_config *c, const char *path, bool must_exist,
		    char *err, size_t errlen)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	char msg[512];
	int lineno = 0;
	int ret = -1;

	FILE *f = fopen(path, "r");
	if (!f) {
		if (errno == ENOENT && !must_exist)
			return 0;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	while ((n = getline(&line, &cap, f)) >= 0) {
		lineno++;
		if (n > CONFIG_MAX_LINE) {
			snprintf(err, errlen, "%s:%d: line longer than %d bytes", path, lineno,
				 CONFIG_MAX_LINE);
			goto out;
		}
		if (strlen(line) != (size_t)n) {
			snprintf(err, errlen, "%s:%d: NUL byte in line", path, lineno);
			goto out;
		}
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		char *s = trim(line);
		if (!*s)
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, errlen, "%s:%d: expected 'key = value', got '%s'", path, lineno, s);
			goto out;
		}
		*eq = 0;
		char *key = trim(s);
		char *val = trim(eq + 1);
		if (!*key) {
			snprintf(err, errlen, "%s:%d: missing key before '='", path, lineno);
			goto out;
		}
		if (exl_config_set(c, key, val, msg, sizeof(msg))) {
			snprintf(err, errlen, "%s:%d: %s", path, lineno, msg);
			goto out;
		}
	}
	if (ferror(f)) {
		snprintf(err, errlen, "%s: read error", path);
		goto out;
	}
	ret = 0;
out:
	free(line);
	fclose(f);
	return ret;
}

int exl_config_check(const struct exl_config *c, char *err, size_t errlen)
{
	if (c->max_batch_tokens < 2) {
		snprintf(err, errlen, "max_batch_tokens (%d) must be at least 2 (a job with "
			 "classifier-free guidance feeds two tokens a step)", c->max_batch_tokens);
		return -1;
	}
	/* Every running job may feed two tokens (CFG) in one pass. */
	if (c->max_running_jobs > c->max_batch_tokens / 2) {
		snprintf(err, errlen, "max_running_jobs (%d) is larger than max_batch_tokens / 2 "
			 "(%d): every running job must fit in one forward pass",
			 c->max_running_jobs, c->max_batch_tokens / 2);
		return -1;
	}
	if (c->prefill_chunk > c->max_batch_tokens) {
		snprintf(err, errlen, "prefill_chunk (%d) is larger than max_batch_tokens (%d)",
			 c->prefill_chunk, c->max_batch_tokens);
		return -1;
	}
	if (c->max_pending_bytes < c->max_message) {
		snprintf(err, errlen, "max_pending_bytes (%llu) is below max_message (%u): the "
			 "largest request could never be read",
			 (unsigned long long)c->max_pending_bytes, c->max_message);
		return -1;
	}
	for (int i = 0; i < c->n_http; i++) {
		if (!c->http[i].loopback && !c->http_allow_remote) {
			snprintf(err, errlen, "http = %s is not a loopback address: it would open the "
				 "API to the network; set http_allow_remote = yes (and an "
				 "http_api_key) to allow it", c->http[i].spec);
			return -1;
		}
	}
	if (c->kv_tokens && c->kv_tokens < c->kv_page_size) {
		snprintf(err, errlen, "kv_tokens (%d) is smaller than one page (kv_page_size %d)",
			 c->kv_tokens, c->kv_page_size);
		return -1;
	}
	return 0;
}

void exl_config_uid_limits(const struct exl_config *c, uid_t uid, int *max_jobs,
			   int *max_new_tokens)
{
	*max_jobs = c->max_jobs_per_uid;
	*max_new_tokens = c->max_new_tokens;
	for (int i = 0; i < c->n_uid_limits; i++) {
		if (c->uid_limits[i].uid == uid) {
			*max_jobs = c->uid_limits[i].max_jobs;
			*max_new_tokens = c->uid_limits[i].max_new_tokens;
			return;
		}
	}
}

bool exl_config_is_admin(const struct exl_config *c, uid_t uid)
{
	if (uid == 0 || uid == getuid())
		return true;
	for (int i = 0; i < c->n_admin_uids; i++)
		if (c->admin_uids[i] == uid)
			return true;
	return false;
}
