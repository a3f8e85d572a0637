/* Loaded models by name; loads on a loader thread, unloads through the
 * model's engine thread. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/core/generator/drafter.h"
#include "daemon/core/generator/engine.h"
#include "daemon/server/engine/engine_thread.h"
#include "daemon/core/gguf/gguf.h"
#include "daemon/core/gguf/gguf_split.h"
#include "daemon/core/model/kvcache.h"
#include "daemon/core/util/log.h"
#include "daemon/core/model/model.h"
#include "daemon/server/delivery/mailbox.h"
#include "daemon/server/delivery/sink.h"
#include "daemon/server/engine/adapters.h"
#include "daemon/server/engine/models_registry.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "common/utf8.h"
#include "kernels/backend.h"
#include "kernels/backend_select.h"

#define READ_CHUNK (8u << 20)           /* bytes per read while warming the file */
#define PROGRESS_EVERY_NS 100000000ull  /* at most ten progress reports a second */
#define MAX_LISTED 4096                 /* files listed by "models" */

struct exl_registry {
	struct exl_mailbox *mail;
	const struct exl_config *cfg;
	bool shutting_down;           /* exl_registry_shutdown was called */
	struct exl_model_entry *head;
	char startup_err[700];
};

struct exl_registry *exl_registry_create(struct exl_mailbox *mail, const struct exl_config *cfg)
{
	struct exl_registry *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->mail = mail;
	r->cfg = cfg;
	return r;
}

static void free_waiters(struct exl_waiter *w)
{
	while (w) {
		struct exl_waiter *next = w->next;
		if (w->sink)
			exl_sink_unref(w->sink);
		free(w);
		w = next;
	}
}

static void free_model_parts(struct exl_model_entry *e)
{
	exl_adapters_free(e);
	if (e->eng)
		exl_engine_free(e->eng);
	if (e->kv)
		exl_kvcache_free(e->kv);
	if (e->model)
		exl_model_free(e->model);
	if (e->be)
		e->be->ops->destroy(e->be);
	e->eng = NULL;
	e->kv = NULL;
	e->model = NULL;
	e->be = NULL;
}

static void free_entry(struct exl_model_entry *e)
{
	free_model_parts(e);
	free_waiters(e->load_waiters);
	free_waiters(e->unload_waiters);
	free(e);
}

void exl_registry_free(struct exl_registry *r)
{
	if (!r)
		return;
	while (r->head) {
		struct exl_model_entry *e = r->head;
		r->head = e->next;
		if (e->loader_running)
			pthread_join(e->loader, NULL);
		free_entry(e);
	}
	free(r);
}

static struct exl_model_entry *find(struct exl_registry *r, const char *name)
{
	for (struct exl_model_entry *e = r->head; e; e = e->next)
		if (!strcmp(e->name, name))
			return e;
	return NULL;
}

static void unlink_entry(struct exl_registry *r, struct exl_model_entry *e)
{
	for (struct exl_model_entry **p = &r->head; *p; p = &(*p)->next) {
		if (*p == e) {
			*p = e->next;
			return;
		}
	}
}

struct exl_model_entry *exl_registry_pick(struct exl_registry *r, const char *name, int *code,
					  char *err, size_t errlen)
{
	struct exl_model_entry *e = NULL;

	if (name[0]) {
		e = find(r, name);
		if (!e) {
			*code = EXL_E_UNKNOWN_MODEL;
			snprintf(err, errlen, "no model '%s' is loaded", name);
			return NULL;
		}
	} else {
		int n = 0;
		for (struct exl_model_entry *it = r->head; it; it = it->next) {
			if (it->state == EXL_MODEL_LOADED) {
				e = it;
				n++;
			}
		}
		if (n != 1) {
			*code = EXL_E_UNKNOWN_MODEL;
			snprintf(err, errlen, n ? "%d models are loaded: name one with \"model\"" :
				 "no model is loaded", n);
			return NULL;
		}
	}
	if (e->state != EXL_MODEL_LOADED) {
		*code = EXL_E_BUSY;
		snprintf(err, errlen, "model '%s' is %s", e->name,
			 e->state == EXL_MODEL_LOADING ? "still loading" : "being unloaded");
		return NULL;
	}
	return e;
}

int exl_registry_draft_path(struct exl_registry *r, const struct exl_model_entry *target,
			    const char *name, char *path, size_t pathlen, char *err,
			    size_t errlen)
{
	int code = EXL_OK;
	char msg[300];
	struct exl_model_entry *d = exl_registry_pick(r, name, &code, msg, sizeof(msg));

	if (!d) {
		snprintf(err, errlen, "draft_model: %s (a draft model must be loaded)", msg);
		return code;
	}
	if (d->vocab_fp != target->vocab_fp) {
		snprintf(err, errlen, "draft_model: '%s' has another vocabulary than '%s' (a draft "
			 "model must tokenize the same way)", name, target->name);
		return EXL_E_BAD_REQUEST;
	}
	if ((size_t)snprintf(path, pathlen, "%s/%s.gguf", r->cfg->models_dir, d->name) >= pathlen) {
		snprintf(err, errlen, "draft_model: the path of '%s' is too long", name);
		return EXL_E_INTERNAL;
	}
	return EXL_OK;
}

struct exl_model_entry *exl_registry_next_loaded(struct exl_registry *r,
						 struct exl_model_entry *prev)
{
	for (struct exl_model_entry *e = prev ? prev->next : r->head; e; e = e->next)
		if (e->state == EXL_MODEL_LOADED && e->model && e->et)
			return e;
	return NULL;
}

/* ---- loading ---- */

static void post_entry(struct exl_registry *r, enum exl_mail_kind kind, struct exl_model_entry *e,
		       uint64_t done, uint64_t total)
{
	if (exl_mail_post_load(r->mail, kind, e, done, total))
		return;
	/* Only progress may be lost; LOAD_DONE retries until it fits. */
	if (kind != EXL_MAIL_LOAD_DONE)
		return;
	while (!exl_mail_post_load(r->mail, kind, e, done, total))
		usleep(10000);
}

struct loader_arg {
	struct exl_registry *r;
	struct exl_model_entry *e;
};

/* Reads one file once, adding to *done and reporting it against the
 * entry's file_size. */
static int warm_one(struct exl_registry *r, struct exl_model_entry *e, const char *path,
		    char *buf, uint64_t *done, uint64_t *last, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		snprintf(err, errlen, "%.300s: %s", path, strerror(errno));
		return -1;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	for (;;) {
		ssize_t n = read(fd, buf, READ_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, errlen, "%.300s: read: %s", path, strerror(errno));
			close(fd);
			return -1;
		}
		if (n == 0)
			break;
		*done += (uint64_t)n;
		uint64_t now = exl_now_ns();
		if (now - *last >= PROGRESS_EVERY_NS) {
			post_entry(r, EXL_MAIL_LOAD_PROGRESS, e, *done, e->file_size);
			*last = now;
		}
	}
	close(fd);
	return 0;
}

/* The bytes of a model's file, all the parts of a split one
 * (gguf_split.h); -1 with a message when one is missing. */
static int model_bytes(const char *path, uint64_t *size, char *err, size_t errlen)
{
	char part[EXL_CONFIG_MAX_PATH + EXL_MAX_NAME + 8];
	struct stat st;
	int k, n = 1;

	*size = 0;
	if (!exl_gguf_split_name(path, strlen(path), &k, &n) || k != 1)
		n = 1;
	for (int i = 1; i <= n; i++) {
		const char *p = path;

		if (n > 1) {
			if (exl_gguf_split_path(path, i, n, part, sizeof(part)))
				return -1;
			p = part;
		}
		if (stat(p, &st) < 0 || !S_ISREG(st.st_mode)) {
			snprintf(err, errlen, "%.300s: %s", p,
				 errno ? strerror(errno) : "not a regular file");
			return -1;
		}
		*size += (uint64_t)st.st_size;
	}
	return n;
}

/* Reads the whole model once (every part of a split one), reporting bytes
 * done, so the load that follows maps pages already in memory and the
 * client sees progress. */
static int warm_file(struct exl_registry *r, struct exl_model_entry *e, const char *path,
		     char *err, size_t errlen)
{
	char part[EXL_CONFIG_MAX_PATH + EXL_MAX_NAME + 8];
	uint64_t done = 0, last = 0;
	int n = model_bytes(path, &e->file_size, err, errlen);
	char *buf;

	if (n < 0)
		return -1;
	buf = malloc(READ_CHUNK);
	if (!buf) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	post_entry(r, EXL_MAIL_LOAD_PROGRESS, e, 0, e->file_size);
	for (int i = 1; i <= n; i++) {
		if (n > 1)
			exl_gguf_split_path(path, i, n, part, sizeof(part));
		if (warm_one(r, e, n > 1 ? part : path, buf, &done, &last, err, errlen)) {
			free(buf);
			return -1;
		}
	}
	post_entry(r, EXL_MAIL_LOAD_PROGRESS, e, done, e->file_size);
	free(buf);
	return 0;
}

static void *loader_main(void *arg)
{
	struct loader_arg *la = arg;
	struct exl_registry *r = la->r;
	struct exl_model_entry *e = la->e;
	const struct exl_config *c = r->cfg;
	char path[EXL_CONFIG_MAX_PATH + EXL_MAX_NAME + 8];
	char err[480];
	struct exl_engine_config ec;
	uint64_t t0 = exl_now_ns();
	int kv_tokens;

	free(la);
	snprintf(path, sizeof(path), "%s/%s.gguf", c->models_dir, e->name);
	if (warm_file(r, e, path, err, sizeof(err))) {
		e->load_code = EXL_E_NOT_FOUND;
		goto fail_msg;
	}
	if (exl_backend_create_by_name(c->device, c->threads, &e->be, err, sizeof(err))) {
		e->load_code = EXL_E_INTERNAL;
		goto fail_msg;
	}
	e->model = exl_model_load(path, e->be, err, sizeof(err));
	if (!e->model) {
		e->load_code = EXL_E_LOAD_FAILED;
		goto fail_msg;
	}
	e->vocab_fp = exl_vocab_fingerprint(exl_model_tokenizer(e->model),
					    exl_model_hparams(e->model)->n_vocab);
	kv_tokens = c->kv_tokens;
	if (!kv_tokens) {
		const struct exl_hparams *hp = exl_model_hparams(e->model);

		/* After the weights: what is free now is what the pool may use.
		 * More than every admitted job at full context is never used. */
		kv_tokens = exl_model_kv_auto_tokens(e->model, c->kv_page_size,
						     c->max_running_jobs, c->max_batch_tokens,
						     (int64_t)hp->n_ctx_train * c->max_running_jobs,
						     err, sizeof(err));
		if (kv_tokens < 0) {
			e->load_code = EXL_E_LOAD_FAILED;
			goto fail_msg;
		}
	}
	/* a mixed sliding-window model's local pool: the window of each
	 * running job's sequence (engine.c counts both pools) */
	e->kv = exl_model_kvcache_create_for(e->model, kv_tokens, c->kv_page_size,
					     c->max_running_jobs, c->max_batch_tokens, err,
					     sizeof(err));
	if (!e->kv) {
		e->load_code = EXL_E_INTERNAL;
		goto fail_msg;
	}
	exl_engine_config_init(&ec);
	ec.max_batch_tokens = c->max_batch_tokens;
	ec.prefill_chunk = c->prefill_chunk;
	ec.max_jobs = c->max_running_jobs;
	ec.suspend_after = c->suspend_after_ms / 1000.0;
	ec.resume_yield = c->resume_yield_ms / 1000.0;
	ec.step_target = c->step_target_ms / 1000.0;
	e->eng = exl_engine_create(e->model, e->kv, &ec, err, sizeof(err));
	if (!e->eng) {
		e->load_code = EXL_E_INTERNAL;
		goto fail_msg;
	}
	e->load_ms = (double)(exl_now_ns() - t0) / 1e6;
	e->load_code = EXL_OK;
	post_entry(r, EXL_MAIL_LOAD_DONE, e, 0, 0);
	return NULL;
fail_msg:
	snprintf(e->load_err, sizeof(e->load_err), "loading '%s': %s", e->name, err);
	free_model_parts(e);
	post_entry(r, EXL_MAIL_LOAD_DONE, e, 0, 0);
	return NULL;
}

static struct exl_waiter *new_waiter(struct exl_sink *sink, const struct exl_packed_id *id)
{
	struct exl_waiter *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	if (sink) {
		w->sink = sink;
		exl_sink_ref(sink);
	}
	if (id)
		w->id = *id;
	return w;
}

int exl_registry_load(struct exl_registry *r, const char *name, struct exl_sink *sink,
		      const struct exl_packed_id *id, bool startup, char *err, size_t errlen)
{
	struct exl_model_entry *e = find(r, name);
	char path[EXL_CONFIG_MAX_PATH + EXL_MAX_NAME + 8];
	struct stat st;

	if (!exl_model_name_valid(name, strlen(name))) {
		snprintf(err, errlen, "'%s' is not a model name", name);
		return EXL_E_BAD_REQUEST;
	}
	if (e) {
		snprintf(err, errlen, "model '%s' is %s", name,
			 e->state == EXL_MODEL_LOADED ? "already loaded" :
			 e->state == EXL_MODEL_LOADING ? "already loading" : "being unloaded");
		return e->state == EXL_MODEL_LOADED ? EXL_E_EXISTS : EXL_E_BUSY;
	}
	snprintf(path, sizeof(path), "%s/%s.gguf", r->cfg->models_dir, name);
	if (stat(path, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "no model file %s.gguf in %s", name, r->cfg->models_dir);
		return EXL_E_NOT_FOUND;
	}
	e = calloc(1, sizeof(*e));
	struct loader_arg *la = malloc(sizeof(*la));
	struct exl_waiter *w = new_waiter(sink, id);
	if (!e || !la || !w) {
		free(e);
		free(la);
		free_waiters(w);
		snprintf(err, errlen, "out of memory");
		return EXL_E_INTERNAL;
	}
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->state = EXL_MODEL_LOADING;
	e->startup = startup;
	e->file_size = (uint64_t)st.st_size;
	e->load_waiters = w;
	la->r = r;
	la->e = e;
	int rc = pthread_create(&e->loader, NULL, loader_main, la);
	if (rc) {
		free(la);
		free_entry(e);
		snprintf(err, errlen, "starting a loader thread: %s", strerror(rc));
		return EXL_E_INTERNAL;
	}
	e->loader_running = true;
	e->next = r->head;
	r->head = e;
	exl_log(EXL_LOG_INFO, "loading model '%s' (%llu bytes)", name,
		(unsigned long long)e->file_size);
	return EXL_OK;
}

static void reply_waiters(struct exl_waiter *w, struct exl_model_entry *e, bool unload, int code,
			  const char *msg)
{
	for (; w; w = w->next) {
		msgpack_sbuffer sb;
		msgpack_packer pk;

		if (!w->sink)
			continue;
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		if (code != EXL_OK) {
			exl_pack_error(&pk, &sb, &w->id, code, msg);
		} else if (unload) {
			exl_pack_reply(&pk, &sb, EXL_OP_UNLOAD, &w->id, 1);
			exl_pack_key(&pk, "model");
			exl_pack_cstr(&pk, e->name);
		} else {
			const struct exl_hparams *hp = exl_model_hparams(e->model);
			exl_pack_reply(&pk, &sb, EXL_OP_LOAD, &w->id, 6);
			exl_pack_key(&pk, "model");
			exl_pack_cstr(&pk, e->name);
			exl_pack_key(&pk, "arch");
			exl_pack_cstr(&pk, hp->arch_name);
			exl_pack_key(&pk, "n_vocab");
			msgpack_pack_int(&pk, hp->n_vocab);
			exl_pack_key(&pk, "n_ctx_train");
			msgpack_pack_int(&pk, hp->n_ctx_train);
			exl_pack_key(&pk, "weight_bytes");
			msgpack_pack_uint64(&pk, exl_model_weight_bytes(e->model));
			exl_pack_key(&pk, "load_ms");
			msgpack_pack_double(&pk, e->load_ms);
		}
		if (sb.data)
			exl_sink_send(w->sink, sb.data, sb.size);
		msgpack_sbuffer_destroy(&sb);
	}
}

void exl_registry_on_progress(struct exl_registry *r, struct exl_model_entry *e, uint64_t done,
			      uint64_t total)
{
	(void)r;
	e->progress_done = done;
	for (struct exl_waiter *w = e->load_waiters; w; w = w->next) {
		msgpack_sbuffer sb;
		msgpack_packer pk;

		if (!w->sink)
			continue;
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		exl_pack_reply(&pk, &sb, EXL_OP_PROGRESS, &w->id, 3);
		exl_pack_key(&pk, "model");
		exl_pack_cstr(&pk, e->name);
		exl_pack_key(&pk, "done");
		msgpack_pack_uint64(&pk, done);
		exl_pack_key(&pk, "total");
		msgpack_pack_uint64(&pk, total);
		if (sb.data)
			exl_sink_send(w->sink, sb.data, sb.size);
		msgpack_sbuffer_destroy(&sb);
	}
}

void exl_registry_on_load_done(struct exl_registry *r, struct exl_model_entry *e)
{
	char err[300];

	pthread_join(e->loader, NULL);
	e->loader_running = false;
	if (e->load_code == EXL_OK && r->shutting_down) {
		e->load_code = EXL_E_SHUTDOWN;
		snprintf(e->load_err, sizeof(e->load_err), "the daemon is shutting down");
	}
	if (e->load_code == EXL_OK) {
		e->et = exl_engine_thread_start(r->mail, e->eng, e->be, e->name, err, sizeof(err));
		if (!e->et) {
			e->load_code = EXL_E_INTERNAL;
			snprintf(e->load_err, sizeof(e->load_err), "loading '%s': %s", e->name, err);
		}
	}
	if (e->load_code != EXL_OK) {
		exl_log(EXL_LOG_ERR, "%s", e->load_err);
		if (e->startup)
			snprintf(r->startup_err, sizeof(r->startup_err), "%s", e->load_err);
		reply_waiters(e->load_waiters, e, false, e->load_code, e->load_err);
		unlink_entry(r, e);
		free_entry(e);
		return;
	}
	e->state = EXL_MODEL_LOADED;
	e->startup = false;
	const char *kernels = exl_backend_cpu_matmul_kernels(e->be);

	exl_log(EXL_LOG_INFO, "model '%s' loaded in %.0f ms (KV pool of %d tokens, %.1f MiB%s%s)",
		e->name, e->load_ms, exl_kvcache_n_pages(e->kv) * exl_kvcache_page_size(e->kv),
		(double)exl_kvcache_bytes(e->kv) / (1024.0 * 1024.0), kernels ? "; CPU kernels " : "",
		kernels ? kernels : "");
	reply_waiters(e->load_waiters, e, false, EXL_OK, NULL);
	free_waiters(e->load_waiters);
	e->load_waiters = NULL;
}

/* ---- unloading ---- */

int exl_registry_unload(struct exl_registry *r, const char *name, bool cancel,
			struct exl_sink *sink, const struct exl_packed_id *id, char *err,
			size_t errlen)
{
	struct exl_model_entry *e = find(r, name);

	if (!e) {
		snprintf(err, errlen, "no model '%s' is loaded", name);
		return EXL_E_UNKNOWN_MODEL;
	}
	if (e->state == EXL_MODEL_LOADING) {
		snprintf(err, errlen, "model '%s' is still loading", name);
		return EXL_E_BUSY;
	}
	struct exl_waiter *w = new_waiter(sink, id);
	if (!w) {
		snprintf(err, errlen, "out of memory");
		return EXL_E_INTERNAL;
	}
	w->next = e->unload_waiters;
	e->unload_waiters = w;
	if (e->state == EXL_MODEL_UNLOADING) {
		/* A second unload joins the first; a cancel upgrades it. */
		if (cancel && !e->unload_cancel && exl_engine_thread_unload(e->et, true) == 0)
			e->unload_cancel = true;
		return EXL_OK;
	}
	if (exl_engine_thread_unload(e->et, cancel)) {
		e->unload_waiters = w->next;
		free_waiters(w);
		snprintf(err, errlen, "out of memory");
		return EXL_E_INTERNAL;
	}
	e->state = EXL_MODEL_UNLOADING;
	e->unload_cancel = cancel;
	exl_log(EXL_LOG_INFO, "unloading model '%s'%s", name, cancel ? " (cancelling its jobs)" : "");
	return EXL_OK;
}

void exl_registry_on_engine_exited(struct exl_registry *r, struct exl_engine_thread *t)
{
	struct exl_model_entry *e;

	for (e = r->head; e; e = e->next)
		if (e->et == t)
			break;
	exl_engine_thread_join(t);
	if (!e)
		return;
	e->et = NULL;
	exl_log(EXL_LOG_INFO, "model '%s' unloaded", e->name);
	/* Models drafting with it close their copies (one loaded again later
	 * under the name is opened anew). */
	for (struct exl_model_entry *o = r->head; o; o = o->next)
		if (o != e && o->et && exl_engine_thread_drop_drafter(o->et, e->name))
			exl_log(EXL_LOG_WARN, "out of memory telling '%s' to close its draft "
				"model '%s'", o->name, e->name);
	reply_waiters(e->unload_waiters, e, true, EXL_OK, NULL);
	unlink_entry(r, e);
	free_entry(e);
}

/* ---- everything ---- */

void exl_registry_shutdown(struct exl_registry *r)
{
	r->shutting_down = true;
	for (struct exl_model_entry *e = r->head; e; e = e->next) {
		if (e->et && exl_engine_thread_shutdown(e->et))
			exl_log(EXL_LOG_ERR, "out of memory telling '%s' to stop", e->name);
		if (e->state == EXL_MODEL_LOADED)
			e->state = EXL_MODEL_UNLOADING;
	}
}

bool exl_registry_empty(const struct exl_registry *r)
{
	return r->head == NULL;
}

int exl_registry_startup_pending(const struct exl_registry *r)
{
	int n = 0;

	for (const struct exl_model_entry *e = r->head; e; e = e->next)
		n += e->startup && e->state == EXL_MODEL_LOADING;
	return n;
}

bool exl_registry_startup_failed(const struct exl_registry *r, char *err, size_t errlen)
{
	if (!r->startup_err[0])
		return false;
	snprintf(err, errlen, "%s", r->startup_err);
	return true;
}

void exl_registry_cancel_sink(struct exl_registry *r, struct exl_sink *sink)
{
	for (struct exl_model_entry *e = r->head; e; e = e->next)
		if (e->et && exl_engine_thread_cancel_sink(e->et, sink))
			exl_log(EXL_LOG_ERR, "out of memory cancelling a connection's jobs on '%s'",
				e->name);
}

void exl_registry_wake_all(struct exl_registry *r)
{
	for (struct exl_model_entry *e = r->head; e; e = e->next)
		if (e->et)
			exl_engine_thread_wake(e->et);
}

bool exl_registry_heartbeats_ok(const struct exl_registry *r, uint64_t max_age_ns)
{
	uint64_t now = exl_now_ns();

	for (const struct exl_model_entry *e = r->head; e; e = e->next) {
		if (!e->et)
			continue;
		uint64_t hb = atomic_load(&e->et->heartbeat_ns);
		if (now > hb && now - hb > max_age_ns)
			return false;
	}
	return true;
}

void exl_registry_check_files(struct exl_registry *r)
{
	char why[600];

	for (struct exl_model_entry *e = r->head; e; e = e->next) {
		if (e->state != EXL_MODEL_LOADED || !e->model)
			continue;
		int st = exl_model_check_file(e->model, why, sizeof(why));

		if (st == e->file_state)
			continue;
		e->file_state = st;
		if (st == 1)
			exl_log(EXL_LOG_WARN, "model '%s': %s", e->name, why);
		else if (st == 2)
			exl_log(EXL_LOG_ERR, "model '%s': %s: its jobs fail until it is unloaded and "
				"loaded again (replace model files with mv, not cp)", e->name, why);
	}
}

void exl_registry_totals(const struct exl_registry *r, int *n_models, int *jobs, double *tok_s)
{
	*n_models = 0;
	*jobs = 0;
	*tok_s = 0;
	for (const struct exl_model_entry *e = r->head; e; e = e->next) {
		struct exl_engine_stats st;
		if (e->state != EXL_MODEL_LOADED || !e->et)
			continue;
		exl_engine_thread_stats(e->et, &st);
		(*n_models)++;
		*jobs += atomic_load(&e->et->n_jobs);
		*tok_s += st.tokens_per_s;
	}
}

static const char *state_name(enum exl_model_state s)
{
	switch (s) {
	case EXL_MODEL_LOADING: return "loading";
	case EXL_MODEL_LOADED: return "loaded";
	case EXL_MODEL_UNLOADING: return "unloading";
	}
	return "unknown";
}

/* A special token's text when it is short and valid UTF-8 (a msgpack
 * str), else 0. */
static size_t special_text(const struct exl_model *m, int32_t id, char *buf, size_t len)
{
	if (id < 0)
		return 0;
	size_t n = exl_token_bytes(exl_model_tokenizer(m), id, true, buf, len);
	if (n >= len || exl_utf8_bad_at(buf, n) != n)
		return 0;
	return n;
}

static void pack_entry(msgpack_packer *pk, const struct exl_model_entry *e)
{
	bool up = e->model && e->et;
	const struct gguf_kv *tmpl = NULL;

	/* The chat template, for clients that format conversations (exl chat). */
	if (up) {
		tmpl = exl_gguf_find_kv(exl_model_gguf(e->model), "tokenizer.chat_template");
		/* Sent as a msgpack str, so only when it is valid UTF-8. */
		if (tmpl && (tmpl->val.type != GGUF_VT_STRING ||
			     tmpl->val.str.len > EXL_MAX_CHAT_TEMPLATE ||
			     exl_utf8_bad_at(tmpl->val.str.ptr, (size_t)tmpl->val.str.len) !=
			     (size_t)tmpl->val.str.len))
			tmpl = NULL;
	}
	/* The BOS and EOS as text: the template's bos_token and eos_token. */
	char bos[128], eos[128];
	size_t bos_len = up ? special_text(e->model, exl_tokenizer_bos(exl_model_tokenizer(e->model)),
					    bos, sizeof(bos)) : 0;
	size_t eos_len = up ? special_text(e->model, exl_tokenizer_eos(exl_model_tokenizer(e->model)),
					    eos, sizeof(eos)) : 0;
	msgpack_pack_map(pk, up ? 9 + (tmpl ? 1 : 0) + (bos_len ? 1 : 0) + (eos_len ? 1 : 0) : 3);
	exl_pack_key(pk, "name");
	exl_pack_cstr(pk, e->name);
	exl_pack_key(pk, "state");
	exl_pack_cstr(pk, state_name(e->state));
	exl_pack_key(pk, "size");
	msgpack_pack_uint64(pk, e->file_size);
	if (!up)
		return;
	const struct exl_hparams *hp = exl_model_hparams(e->model);
	exl_pack_key(pk, "arch");
	exl_pack_cstr(pk, hp->arch_name);
	exl_pack_key(pk, "n_vocab");
	msgpack_pack_int(pk, hp->n_vocab);
	exl_pack_key(pk, "n_ctx_train");
	msgpack_pack_int(pk, hp->n_ctx_train);
	exl_pack_key(pk, "kv_tokens");
	msgpack_pack_int(pk, exl_kvcache_n_pages(e->kv) * exl_kvcache_page_size(e->kv));
	exl_pack_key(pk, "jobs");
	msgpack_pack_int(pk, atomic_load(&e->et->n_jobs));
	exl_pack_key(pk, "weight_bytes");
	msgpack_pack_uint64(pk, exl_model_weight_bytes(e->model));
	if (tmpl) {
		exl_pack_key(pk, "chat_template");
		msgpack_pack_str(pk, (size_t)tmpl->val.str.len);
		msgpack_pack_str_body(pk, tmpl->val.str.ptr, (size_t)tmpl->val.str.len);
	}
	if (bos_len) {
		exl_pack_key(pk, "bos_token");
		msgpack_pack_str(pk, bos_len);
		msgpack_pack_str_body(pk, bos, bos_len);
	}
	if (eos_len) {
		exl_pack_key(pk, "eos_token");
		msgpack_pack_str(pk, eos_len);
		msgpack_pack_str_body(pk, eos, eos_len);
	}
}

struct listed {
	char name[EXL_MAX_NAME + 1];
	uint64_t size;
};

static int cmp_listed(const void *a, const void *b)
{
	return strcmp(((const struct listed *)a)->name, ((const struct listed *)b)->name);
}

/* NAME.gguf files in the model directory that are not loaded, sorted. */
static int list_dir(struct exl_registry *r, struct listed *out)
{
	DIR *d = opendir(r->cfg->models_dir);
	struct dirent *de;
	char err[400];
	int n = 0;

	if (!d)
		return 0;
	while (n < MAX_LISTED && (de = readdir(d))) {
		size_t len = strlen(de->d_name);
		char path[EXL_CONFIG_MAX_PATH + EXL_MAX_NAME + 8];
		struct stat st;

		if (len <= 5 || strcmp(de->d_name + len - 5, ".gguf") ||
		    !exl_model_name_valid(de->d_name, len - 5))
			continue;
		memcpy(out[n].name, de->d_name, len - 5);
		out[n].name[len - 5] = 0;
		/* a split model is listed once, by its first part */
		int part, parts;
		if (exl_gguf_split_name(de->d_name, len, &part, &parts) && part != 1)
			continue;
		if (find(r, out[n].name))
			continue;
		snprintf(path, sizeof(path), "%s/%s.gguf", r->cfg->models_dir, out[n].name);
		if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		/* a split model with a part missing is listed all the same: its
		 * load says which part */
		if (model_bytes(path, &out[n].size, err, sizeof(err)) < 0)
			out[n].size = (uint64_t)st.st_size;
		n++;
	}
	closedir(d);
	qsort(out, (size_t)n, sizeof(*out), cmp_listed);
	return n;
}

void exl_registry_pack_models(struct exl_registry *r, msgpack_packer *pk)
{
	struct listed *files = malloc(sizeof(*files) * MAX_LISTED);
	int n = files ? list_dir(r, files) : 0;
	int n_loaded = 0;

	for (struct exl_model_entry *e = r->head; e; e = e->next)
		n_loaded++;
	msgpack_pack_array(pk, (size_t)(n + n_loaded));
	for (struct exl_model_entry *e = r->head; e; e = e->next)
		pack_entry(pk, e);
	for (int i = 0; i < n; i++) {
		msgpack_pack_map(pk, 3);
		exl_pack_key(pk, "name");
		exl_pack_cstr(pk, files[i].name);
		exl_pack_key(pk, "state");
		exl_pack_cstr(pk, "available");
		exl_pack_key(pk, "size");
		msgpack_pack_uint64(pk, files[i].size);
	}
	free(files);
}

/* Where a model lives and what it holds there.  The backend answers from
 * this (the loop) thread while the engine thread runs it: ops->mem_info is
 * the one op made for that.  A model still loading has no backend to ask
 * yet: its device is the configured one, its counts 0. */
static void pack_memory(const struct exl_registry *r, msgpack_packer *pk,
			const struct exl_model_entry *e)
{
	struct exl_backend_mem mem;
	uint64_t kv_bytes = 0, kv_local_bytes = 0;
	char msg[200];

	memset(&mem, 0, sizeof(mem));
	snprintf(mem.device, sizeof(mem.device), "%.15s", r->cfg->device);
	if (e->state != EXL_MODEL_LOADING && e->be) {
		if (e->be->ops->mem_info(e->be, &mem, msg, sizeof(msg)))
			exl_log(EXL_LOG_DEBUG, "status of '%s': %s", e->name, msg);
		if (e->kv) {
			kv_bytes = exl_kvcache_bytes(e->kv);
			kv_local_bytes = exl_kvcache_local_bytes(e->kv);
		}
	}
	exl_pack_key(pk, "device");
	exl_pack_cstr(pk, mem.device);
	exl_pack_key(pk, "weight_bytes");
	msgpack_pack_uint64(pk, mem.weight_bytes);
	exl_pack_key(pk, "kv_bytes");
	msgpack_pack_uint64(pk, kv_bytes);
	exl_pack_key(pk, "kv_local_bytes");
	msgpack_pack_uint64(pk, kv_local_bytes);
	exl_pack_key(pk, "buffer_bytes");
	msgpack_pack_uint64(pk, mem.buffer_bytes);
	exl_pack_key(pk, "repacked_bytes");
	msgpack_pack_uint64(pk, mem.repacked_bytes);
	exl_pack_key(pk, "device_free");
	msgpack_pack_uint64(pk, mem.free_bytes);
	exl_pack_key(pk, "device_total");
	msgpack_pack_uint64(pk, mem.total_bytes);
}

void exl_registry_pack_status(struct exl_registry *r, msgpack_packer *pk)
{
	int n = 0;

	for (struct exl_model_entry *e = r->head; e; e = e->next)
		n++;
	msgpack_pack_array(pk, (size_t)n);
	for (struct exl_model_entry *e = r->head; e; e = e->next) {
		struct exl_engine_stats st;
		memset(&st, 0, sizeof(st));
		if (e->et)
			exl_engine_thread_stats(e->et, &st);
		msgpack_pack_map(pk, 27); /* 19 here, 8 in pack_memory */
		exl_pack_key(pk, "name");
		exl_pack_cstr(pk, e->name);
		exl_pack_key(pk, "state");
		exl_pack_cstr(pk, state_name(e->state));
		exl_pack_key(pk, "jobs_running");
		msgpack_pack_int(pk, st.active - st.paused);
		exl_pack_key(pk, "jobs_paused");
		msgpack_pack_int(pk, st.paused);
		exl_pack_key(pk, "jobs_queued");
		msgpack_pack_int(pk, st.queued);
		exl_pack_key(pk, "jobs_suspended");
		msgpack_pack_int(pk, st.suspended);
		exl_pack_key(pk, "preparing");
		msgpack_pack_int(pk, e->et ? atomic_load(&e->et->n_preparing) : 0);
		exl_pack_key(pk, "tokens_generated");
		msgpack_pack_uint64(pk, st.generated_tokens);
		exl_pack_key(pk, "tokens_prompt");
		msgpack_pack_uint64(pk, st.prompt_tokens);
		exl_pack_key(pk, "tokens_recomputed");
		msgpack_pack_uint64(pk, st.recomputed_tokens);
		exl_pack_key(pk, "steps");
		msgpack_pack_uint64(pk, st.steps);
		exl_pack_key(pk, "draft_proposed");
		msgpack_pack_uint64(pk, st.draft_proposed);
		exl_pack_key(pk, "draft_accepted");
		msgpack_pack_uint64(pk, st.draft_accepted);
		exl_pack_key(pk, "tok_s");
		msgpack_pack_double(pk, st.tokens_per_s);
		exl_pack_key(pk, "kv_pages_free");
		msgpack_pack_int(pk, st.kv_pages_free);
		exl_pack_key(pk, "kv_pages");
		msgpack_pack_int(pk, st.kv_pages_total);
		exl_pack_key(pk, "kv_local_pages_free");
		msgpack_pack_int(pk, st.kv_local_pages_free);
		exl_pack_key(pk, "kv_local_pages");
		msgpack_pack_int(pk, st.kv_local_pages_total);
		exl_pack_key(pk, "load_progress");
		msgpack_pack_uint64(pk, e->state == EXL_MODEL_LOADING ? e->progress_done : e->file_size);
		pack_memory(r, pk, e);
	}
}
