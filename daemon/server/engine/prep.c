/* Preparing requests off the event loop (see prep.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "daemon/core/model/model.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "daemon/core/util/log.h"
#include "daemon/server/delivery/job.h"
#include "daemon/server/delivery/mailbox.h"
#include "daemon/server/delivery/sink.h"
#include "daemon/server/engine/engine_thread.h"
#include "daemon/server/engine/prep.h"

/* Message copies from this size on are mappings of their own, as the
 * connections' input buffers are (conn.c): glibc raises its mmap threshold
 * past a freed large block and keeps later ones in the heap, so 16 MiB
 * copies would stay in the daemon's RSS after they are freed. */
#define MSG_MAP_MIN ((size_t)256 << 10)

struct worker {
	struct exl_prep_pool *pool;
	int k;                            /* its slot in running[] */
	pthread_t th;
	bool started;
};

struct exl_prep_pool {
	struct exl_mailbox *mail;
	pthread_mutex_t mu;               /* guards the queue, running[] and stop */
	pthread_cond_t cond;
	struct exl_prep *head, *tail;     /* waiting, in arrival order */
	const struct exl_sink *running[EXL_PREP_THREADS]; /* whose request each worker runs */
	bool stop;
	struct worker w[EXL_PREP_THREADS];
	/* loop thread only */
	int n_items;                      /* queued or running, result not yet taken */
	size_t bytes;                     /* their messages' bytes */
};

/* ---- requests ---- */

struct exl_prep *exl_prep_new(const uint8_t *data, size_t len)
{
	struct exl_prep *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	msgpack_unpacked_init(&p->up);
	msgpack_sbuffer_init(&p->reply);
	if (len >= MSG_MAP_MIN) {
		/* populated at once: cheaper than a fault per page while
		 * copying, on the loop thread */
		void *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		p->msg = m == MAP_FAILED ? NULL : m;
	} else {
		p->msg = malloc(len ? len : 1);
	}
	if (!p->msg) {
		free(p);
		return NULL;
	}
	if (len)
		memcpy(p->msg, data, len);
	p->msg_len = len;
	return p;
}

struct exl_prep *exl_prep_new_decoded(void)
{
	struct exl_prep *p = exl_prep_new(NULL, 0);

	if (!p)
		return NULL;
	p->up.zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
	if (!p->up.zone) {
		exl_prep_free(p);
		return NULL;
	}
	return p;
}

void exl_prep_free(struct exl_prep *p)
{
	if (!p)
		return;
	msgpack_unpacked_destroy(&p->up);
	msgpack_sbuffer_destroy(&p->reply);
	if (p->msg_len >= MSG_MAP_MIN)
		munmap(p->msg, p->msg_len);
	else
		free(p->msg);
	if (p->job)
		exl_srv_job_free(p->job);
	if (p->sink)
		exl_sink_unref(p->sink);
	free(p->mail);
	free(p);
}

static bool prompt_cheap(const struct exl_prompt *pr)
{
	return pr->ids ? pr->n_ids <= EXL_PREP_CHEAP_IDS : pr->len <= EXL_PREP_CHEAP_BYTES;
}

bool exl_prep_cheap(const struct exl_prep *p)
{
	const struct exl_req_generate *g = &p->req.u.gen;

	switch (p->req.op) {
	case EXL_OPC_TOKENIZE:
		return p->req.u.tokenize.len <= EXL_PREP_CHEAP_BYTES;
	case EXL_OPC_DETOKENIZE:
		return p->req.u.detokenize.n <= EXL_PREP_CHEAP_IDS;
	case EXL_OPC_EMBED:
	case EXL_OPC_GENERATE:
		/* A constraint's compile time is not bounded by its length. */
		if (g->grammar || g->json_schema || g->regex)
			return false;
		return prompt_cheap(&g->prompt) && (!g->has_negative || prompt_cheap(&g->negative));
	default:
		return true;
	}
}

static void run_tokenize(struct exl_prep *p)
{
	const struct exl_tokenizer *tok = exl_model_tokenizer(p->model);
	bool add_bos = p->req.u.tokenize.add_bos < 0 ? exl_tokenizer_add_bos(tok) :
		       p->req.u.tokenize.add_bos;
	int32_t *ids = NULL;
	msgpack_packer pk;
	int n = exl_tok_encode(tok, p->req.u.tokenize.text, p->req.u.tokenize.len, add_bos,
			     p->req.u.tokenize.special, &ids, p->err, sizeof(p->err));

	if (n < 0) {
		p->code = EXL_E_BAD_REQUEST;
		return;
	}
	msgpack_packer_init(&pk, &p->reply, msgpack_sbuffer_write);
	exl_pack_reply(&pk, &p->reply, EXL_OP_TOKENIZE, &p->id, 1);
	exl_pack_key(&pk, "ids");
	msgpack_pack_array(&pk, (size_t)n);
	for (int i = 0; i < n; i++)
		msgpack_pack_int32(&pk, ids[i]);
	free(ids);
}

static void run_detokenize(struct exl_prep *p)
{
	const struct exl_tokenizer *tok = exl_model_tokenizer(p->model);
	const int32_t *ids = p->req.u.detokenize.ids;
	size_t n = p->req.u.detokenize.n;
	int32_t n_vocab = exl_tokenizer_n_vocab(tok);
	msgpack_packer pk;

	for (size_t i = 0; i < n; i++) {
		if (ids[i] >= n_vocab) {
			snprintf(p->err, sizeof(p->err), "detokenize: ids: item %zu: %d is not below "
				 "the vocabulary size %d", i, ids[i], n_vocab);
			p->code = EXL_E_BAD_REQUEST;
			return;
		}
	}
	bool strip = p->req.u.detokenize.strip_leading_space &&
		     exl_tokenizer_kind(tok) == EXL_TOK_SPM;
	char *text = exl_tok_decode(tok, ids, n, p->req.u.detokenize.special, strip);
	if (!text) {
		snprintf(p->err, sizeof(p->err), "detokenize: out of memory");
		p->code = EXL_E_INTERNAL;
		return;
	}
	msgpack_packer_init(&pk, &p->reply, msgpack_sbuffer_write);
	exl_pack_reply(&pk, &p->reply, EXL_OP_DETOKENIZE, &p->id, 1);
	exl_pack_key(&pk, "text");
	exl_pack_cstr(&pk, text);
	free(text);
}

/* The request's input embedding blocks in rows of the model's n_embd. */
static int wire_embeddings(struct exl_prep *p, struct exl_req_generate *g)
{
	size_t row = (size_t)exl_model_hparams(p->model)->n_embd * sizeof(float);
	struct exl_embd_block *b = msgpack_zone_malloc(p->up.zone, sizeof(*b) * (size_t)g->n_embd);

	if (!b) {
		snprintf(p->err, sizeof(p->err), "generate: out of memory");
		p->code = EXL_E_INTERNAL;
		return -1;
	}
	for (int i = 0; i < g->n_embd; i++) {
		if (g->embd[i].bytes % row) {
			snprintf(p->err, sizeof(p->err), "generate: embeddings: item %d ('%s'): %zu "
				 "bytes is not a whole number of rows of %zu float32 (the model's "
				 "n_embd)", i, g->embd[i].alias, g->embd[i].bytes, row / 4);
			p->code = EXL_E_BAD_REQUEST;
			return -1;
		}
		b[i].alias = g->embd[i].alias;
		b[i].rows = g->embd[i].data;
		b[i].n_rows = (int)(g->embd[i].bytes / row);
	}
	g->s.embeddings = b;
	g->s.n_embeddings = g->n_embd;
	return 0;
}

static void run_generate(struct exl_prep *p)
{
	struct exl_req_generate *g = &p->req.u.gen;
	char err[512];

	if (g->n_embd && wire_embeddings(p, g))
		return;
	if (p->req.op == EXL_OPC_EMBED && g->s.pooling == EXL_POOL_NONE)
		g->s.pooling = exl_model_pooling(p->model);
	/* The job's callbacks run on the engine thread once it is added;
	 * until then nothing calls them. */
	p->job->job = exl_job_create(p->model, &g->s, &g->prompt,
				     g->has_negative ? &g->negative : NULL,
				     &exl_engine_thread_callbacks, p->job, err, sizeof(err));
	if (!p->job->job) {
		snprintf(p->err, sizeof(p->err), "%s: %s",
			 p->req.op == EXL_OPC_EMBED ? "embed" : "generate", err);
		p->code = EXL_E_BAD_REQUEST;
	}
}

void exl_prep_run(struct exl_prep *p)
{
	const char *op = p->req.op == EXL_OPC_TOKENIZE ? "tokenize" :
			 p->req.op == EXL_OPC_DETOKENIZE ? "detokenize" :
			 p->req.op == EXL_OPC_EMBED ? "embed" : "generate";
	int refusing = atomic_load(&p->et->refusing);

	p->code = EXL_OK;
	/* Work nobody will take is skipped: a closed connection's, and that
	 * for a model that takes no more jobs (its engine would refuse the
	 * job; a tokenize would only hold up the unload or the drain). */
	if (atomic_load(&p->sink->closed)) {
		p->code = -1;
		return;
	}
	if (refusing) {
		snprintf(p->err, sizeof(p->err), "%s: %s", op, refusing == EXL_E_SHUTDOWN ?
			 "the daemon is shutting down" : "the model is being unloaded");
		p->code = refusing;
		return;
	}
	switch (p->req.op) {
	case EXL_OPC_TOKENIZE:
		run_tokenize(p);
		break;
	case EXL_OPC_DETOKENIZE:
		run_detokenize(p);
		break;
	case EXL_OPC_GENERATE:
	case EXL_OPC_EMBED:
		run_generate(p);
		break;
	default:
		snprintf(p->err, sizeof(p->err), "%s: not a request the pool prepares", op);
		p->code = EXL_E_INTERNAL;
		break;
	}
}

/* ---- the pool ---- */

/* The first waiting request whose connection has none running (so each
 * connection's run one at a time, in order), unlinked; NULL if none. */
static struct exl_prep *take(struct exl_prep_pool *pool)
{
	struct exl_prep *prev = NULL;

	for (struct exl_prep *p = pool->head; p; prev = p, p = p->next) {
		bool busy = false;

		for (int k = 0; k < EXL_PREP_THREADS; k++)
			busy |= pool->running[k] == p->sink;
		if (busy)
			continue;
		if (prev)
			prev->next = p->next;
		else
			pool->head = p->next;
		if (pool->tail == p)
			pool->tail = prev;
		p->next = NULL;
		return p;
	}
	return NULL;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct exl_prep_pool *pool = w->pool;

	pthread_mutex_lock(&pool->mu);
	for (;;) {
		struct exl_prep *p = NULL;

		while (!pool->stop && !(p = take(pool)))
			pthread_cond_wait(&pool->cond, &pool->mu);
		if (!p)
			break;
		pool->running[w->k] = p->sink;
		pthread_mutex_unlock(&pool->mu);

		exl_prep_run(p);
		struct exl_mail *m = p->mail;
		p->mail = NULL;
		/* p belongs to the loop from here on */
		exl_mail_post_prep_done(pool->mail, m, p);

		pthread_mutex_lock(&pool->mu);
		/* The connection's next request may run now; its result is
		 * posted after this one's, so the loop takes them in order. */
		pool->running[w->k] = NULL;
		pthread_cond_broadcast(&pool->cond);
	}
	pthread_mutex_unlock(&pool->mu);
	return NULL;
}

struct exl_prep_pool *exl_prep_pool_create(struct exl_mailbox *mail, char *err, size_t errlen)
{
	struct exl_prep_pool *pool = calloc(1, sizeof(*pool));

	if (!pool) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	pool->mail = mail;
	pthread_mutex_init(&pool->mu, NULL);
	pthread_cond_init(&pool->cond, NULL);
	for (int k = 0; k < EXL_PREP_THREADS; k++) {
		struct worker *w = &pool->w[k];

		w->pool = pool;
		w->k = k;
		int rc = pthread_create(&w->th, NULL, worker_main, w);
		if (rc) {
			snprintf(err, errlen, "starting a request preparation thread: %s",
				 strerror(rc));
			exl_prep_pool_free(pool);
			return NULL;
		}
		w->started = true;
	}
	return pool;
}

void exl_prep_pool_free(struct exl_prep_pool *pool)
{
	if (!pool)
		return;
	pthread_mutex_lock(&pool->mu);
	pool->stop = true;
	pthread_cond_broadcast(&pool->cond);
	pthread_mutex_unlock(&pool->mu);
	for (int k = 0; k < EXL_PREP_THREADS; k++)
		if (pool->w[k].started)
			pthread_join(pool->w[k].th, NULL);
	/* Nothing is queued once every engine has ended (each waits for its
	 * model's requests); a start-up failure has none either.  Be exact. */
	while (pool->head) {
		struct exl_prep *p = pool->head;
		pool->head = p->next;
		exl_prep_free(p);
	}
	pthread_cond_destroy(&pool->cond);
	pthread_mutex_destroy(&pool->mu);
	free(pool);
}

bool exl_prep_pool_room(const struct exl_prep_pool *pool, int n_conn, size_t len)
{
	if (!pool->n_items)
		return true;
	return n_conn < EXL_PREP_PER_CONN && pool->n_items < EXL_PREP_MAX_ITEMS &&
	       pool->bytes + len <= EXL_PREP_MAX_BYTES;
}

void exl_prep_pool_submit(struct exl_prep_pool *pool, struct exl_prep *p)
{
	p->pooled = true;
	pool->n_items++;
	pool->bytes += p->msg_len;
	pthread_mutex_lock(&pool->mu);
	p->next = NULL;
	if (pool->tail)
		pool->tail->next = p;
	else
		pool->head = p;
	pool->tail = p;
	pthread_cond_signal(&pool->cond);
	pthread_mutex_unlock(&pool->mu);
}

void exl_prep_pool_done(struct exl_prep_pool *pool, const struct exl_prep *p)
{
	pool->n_items--;
	pool->bytes -= p->msg_len;
}

int exl_prep_pool_count(const struct exl_prep_pool *pool)
{
	return pool->n_items;
}
