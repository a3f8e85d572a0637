/* The daemon's configuration: defaults, the config file (key = value lines,
 * see docs/configuration.md and systemd/exld.conf) and the command line,
 * in that order of precedence (the command line wins).
 */
#ifndef EXL_CONFIG_H
#define EXL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define EXL_CONFIG_DEFAULT_PATH "/etc/exld/exld.conf"
#define EXL_CONFIG_MAX_LOAD 32     /* models loaded at start */
#define EXL_CONFIG_MAX_ADMINS 64
#define EXL_CONFIG_MAX_UID_LIMITS 256
#define EXL_CONFIG_MAX_PATH 4096
#define EXL_CONFIG_MAX_HTTP 8      /* HTTP listeners */
#define EXL_CONFIG_MAX_API_KEY 256

/* One HTTP listener (`http = ADDR`): 127.0.0.1:PORT, [::1]:PORT, any
 * other numeric address with http_allow_remote, or unix:/path. */
struct exl_http_listen {
	int family;                     /* AF_INET, AF_INET6 or AF_UNIX */
	char addr[64];                  /* numeric address (TCP) */
	uint16_t port;                  /* 0: any free port (TCP, tests) */
	char path[108];                 /* AF_UNIX: sun_path */
	bool loopback;                  /* 127.0.0.0/8, ::1 or a Unix socket */
	char spec[160];                 /* as written, for messages */
};

struct exl_uid_limit {
	uid_t uid;
	int max_jobs;
	int max_new_tokens;
};

struct exl_config {
	char socket_path[108];          /* sun_path */
	unsigned socket_mode;           /* 0660 */
	char models_dir[EXL_CONFIG_MAX_PATH];
	char load[EXL_CONFIG_MAX_LOAD][129]; /* model names loaded at start */
	int n_load;
	int threads;                    /* CPU threads per model, 0 = one per core */
	int kv_tokens;                  /* KV pool positions per model, 0: sized at load */
	int kv_page_size;               /* positions per KV page */
	int max_batch_tokens;           /* engine: tokens per forward pass */
	int prefill_chunk;              /* engine: prompt tokens of one job per step */
	int max_running_jobs;           /* engine: admitted jobs per model */
	int suspend_after_ms;           /* engine: a paused job keeps its slot this long while others wait */
	int resume_yield_ms;            /* engine: a suspended job that can go on lets fresh ones go
					 * first this long */
	int step_target_ms;             /* engine: prompt chunks cut so a step takes about this long */
	int max_jobs_per_uid;           /* concurrent jobs of one uid */
	int max_new_tokens;             /* per job */
	struct exl_uid_limit uid_limits[EXL_CONFIG_MAX_UID_LIMITS];
	int n_uid_limits;
	uid_t admin_uids[EXL_CONFIG_MAX_ADMINS];
	int n_admin_uids;
	uint32_t max_message;           /* bytes */
	uint32_t ring_size;             /* default data ring bytes */
	int max_connections;
	int max_connections_per_uid;    /* 0: no limit */
	int connections_reserved;       /* of max_connections, never all to one uid */
	int request_timeout_ms;         /* a started message, or a new connection's first, must arrive within */
	uint64_t max_pending_bytes;     /* input buffered for unfinished messages, all connections */
	int drain_timeout_ms;           /* on SIGTERM: how long results wait for their clients */
	char device[32];                /* "cpu" or "cuda:N" */
	struct exl_http_listen http[EXL_CONFIG_MAX_HTTP]; /* the HTTP front (docs/http.md) */
	int n_http;
	bool http_allow_remote;         /* a non-loopback http address may be bound */
	char http_api_key[EXL_CONFIG_MAX_API_KEY + 1]; /* "": none; else the Bearer token asked for */
	uid_t http_uid;                 /* whose limits TCP requests count against */
};

/* Parses an http listener address into l.  0, or -1 with a message. */
int exl_config_parse_http(const char *v, struct exl_http_listen *l, char *err, size_t errlen);

void exl_config_defaults(struct exl_config *c);

/* Reads path into c (over what c holds).  With must_exist false a missing
 * file is fine (returns 0 and changes nothing).  Errors name the file and
 * line: "exld.conf:12: threads: wants an integer in [0, 1024], got 'x'". */
int exl_config_load(struct exl_config *c, const char *path, bool must_exist,
		    char *err, size_t errlen);

/* Applies one setting, as the file would (key and value already trimmed).
 * Used for the file and for the command line. */
int exl_config_set(struct exl_config *c, const char *key, const char *value,
		   char *err, size_t errlen);

/* Cross-field checks after everything is applied. */
int exl_config_check(const struct exl_config *c, char *err, size_t errlen);

/* The limits that apply to uid. */
void exl_config_uid_limits(const struct exl_config *c, uid_t uid, int *max_jobs,
			   int *max_new_tokens);
bool exl_config_is_admin(const struct exl_config *c, uid_t uid);

/* True when name is a valid model name: 1..128 bytes of [A-Za-z0-9._-],
 * not starting with '.'. */
bool exl_model_name_valid(const char *name, size_t len);

#endif
