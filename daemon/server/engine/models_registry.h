/* The loaded models, by name: each is MODELDIR/NAME.gguf with its backend,
 * KV cache, engine and engine thread.  Loads run on a loader thread and
 * report progress; unloads let the model's jobs finish or cancel them.
 *
 * Loop thread only (the loader and engine threads report through the
 * loop's mailbox).
 */
#ifndef EXL_MODELS_REGISTRY_H
#define EXL_MODELS_REGISTRY_H

#include <msgpack.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon/server/wire/config.h"
#include "daemon/server/wire/protocol.h"

struct exl_mailbox;
struct exl_sink;
struct exl_model;
struct exl_engine_thread;

enum exl_model_state { EXL_MODEL_LOADING, EXL_MODEL_LOADED, EXL_MODEL_UNLOADING };

struct exl_waiter {
	struct exl_waiter *next;
	struct exl_sink *sink;        /* a reference; NULL for start-up loads */
	struct exl_packed_id id;
};

struct exl_model_entry {
	struct exl_model_entry *next;
	char name[EXL_MAX_NAME + 1];
	enum exl_model_state state;
	struct exl_backend *be;
	struct exl_model *model;
	struct exl_kvcache *kv;
	struct exl_engine *eng;
	struct exl_engine_thread *et;
	uint64_t file_size;
	double load_ms;
	bool startup;                 /* loaded at start: a failure stops the daemon */
	/* the loader thread */
	pthread_t loader;
	bool loader_running;
	int load_code;                /* EXL_OK or the error code */
	char load_err[640];
	uint64_t progress_done;       /* loop's copy of the last progress report */
	struct exl_waiter *load_waiters;
	struct exl_waiter *unload_waiters;
	bool unload_cancel;
	int file_state;               /* exl_model_check_file's last answer */
	uint64_t vocab_fp;            /* exl_vocab_fingerprint: who may draft for whom */
};

struct exl_registry;

/* Looks at every loaded model's file (exl_model_check_file) and logs a
 * change once; a file changed in place fails the model's forward passes
 * from now on, so its jobs end with an error that says why. */
void exl_registry_check_files(struct exl_registry *r);

struct exl_registry *exl_registry_create(struct exl_mailbox *mail, const struct exl_config *cfg);
/* After every engine thread and loader has ended. */
void exl_registry_free(struct exl_registry *r);

/* The loaded model named name, or when name is empty the only loaded one.
 * NULL with a code (unknown_model, busy) and message otherwise. */
struct exl_model_entry *exl_registry_pick(struct exl_registry *r, const char *name, int *code,
					  char *err, size_t errlen);

/* The loaded model name as the draft model of target's jobs: the path of
 * its file into path.  EXL_OK, or a code (unknown_model, busy,
 * bad_request) with a message: not loaded, or another vocabulary. */
int exl_registry_draft_path(struct exl_registry *r, const struct exl_model_entry *target,
			    const char *name, char *path, size_t pathlen, char *err,
			    size_t errlen);

/* The loaded model after prev (the first when prev is NULL), or NULL:
 * for listing them (the HTTP front's model lists). */
struct exl_model_entry *exl_registry_next_loaded(struct exl_registry *r,
						 struct exl_model_entry *prev);

/* Starts loading name; the reply (or error) goes to sink with id when the
 * load ends.  Returns EXL_OK, or a code with a message (nothing started). */
int exl_registry_load(struct exl_registry *r, const char *name, struct exl_sink *sink,
		      const struct exl_packed_id *id, bool startup, char *err, size_t errlen);
/* Starts unloading name; the reply goes to sink when the model is gone. */
int exl_registry_unload(struct exl_registry *r, const char *name, bool cancel,
			struct exl_sink *sink, const struct exl_packed_id *id, char *err,
			size_t errlen);

/* Mailbox events. */
void exl_registry_on_progress(struct exl_registry *r, struct exl_model_entry *e, uint64_t done,
			      uint64_t total);
void exl_registry_on_load_done(struct exl_registry *r, struct exl_model_entry *e);
void exl_registry_on_engine_exited(struct exl_registry *r, struct exl_engine_thread *t);

/* Every engine thread ends its jobs with reason shutdown and exits; loads
 * still running end refused. */
void exl_registry_shutdown(struct exl_registry *r);
/* No model loaded, loading or unloading. */
bool exl_registry_empty(const struct exl_registry *r);
/* Start-up loads still running; start-up loads that failed (message in err). */
int exl_registry_startup_pending(const struct exl_registry *r);
bool exl_registry_startup_failed(const struct exl_registry *r, char *err, size_t errlen);

void exl_registry_cancel_sink(struct exl_registry *r, struct exl_sink *sink);
void exl_registry_wake_all(struct exl_registry *r);
/* True when every engine thread looped within max_age_ns. */
bool exl_registry_heartbeats_ok(const struct exl_registry *r, uint64_t max_age_ns);
void exl_registry_totals(const struct exl_registry *r, int *n_models, int *jobs, double *tok_s);

/* The "models" list (every NAME.gguf in the directory and every loaded
 * model) and the status "models" array, packed as one msgpack array. */
void exl_registry_pack_models(struct exl_registry *r, msgpack_packer *pk);
void exl_registry_pack_status(struct exl_registry *r, msgpack_packer *pk);

#endif
