/* libexlclient: events set aside.  A blocking exl_generate() reads the
 * connection's one event stream; events of other jobs (submitted with
 * exl_submit) that come meanwhile are copied here, whole, and exl_next()
 * hands them out first, in the order they came. */
#include <stdlib.h>
#include <string.h>

#include "client/lib/client_internal.h"

struct exl_held {
	struct exl_held *next;
	struct exl_event ev;
	struct exl_result result;  /* DONE: a deep copy */
	unsigned char *buf;        /* TOKENS: every array, the logits and the text */
};

static void held_free(struct exl_held *h)
{
	if (!h)
		return;
	exl_result_free(&h->result);
	free(h->buf);
	free(h);
}

static char *dup_bytes(const void *p, size_t n, bool nul)
{
	char *s = malloc(n + 1); /* + 1: the NUL, or no malloc(0) */

	if (!s)
		return NULL;
	if (n)
		memcpy(s, p, n);
	if (nul)
		s[n] = 0;
	return s;
}

static int copy_result(struct exl_result *dst, const struct exl_result *src)
{
	*dst = *src;
	dst->stop_string = NULL;
	dst->text = NULL;
	dst->ids = NULL;
	dst->probs = NULL;
	dst->error = NULL;
	if ((src->stop_string &&
	     !(dst->stop_string = dup_bytes(src->stop_string, strlen(src->stop_string), true))) ||
	    (src->text && !(dst->text = dup_bytes(src->text, src->text_len, true))) ||
	    (src->ids && !(dst->ids = (int32_t *)(void *)dup_bytes(src->ids,
				 src->n_ids * sizeof(int32_t), false))) ||
	    (src->probs && !(dst->probs = (float *)(void *)dup_bytes(src->probs,
				 src->n_ids * sizeof(float), false))) ||
	    (src->error && !(dst->error = dup_bytes(src->error, strlen(src->error), true)))) {
		exl_result_free(dst);
		return -1;
	}
	return 0;
}

/* Copies the arrays and the text of a TOKENS event into one buffer. */
static int copy_tokens(struct exl_held *h, const struct exl_event *ev)
{
	size_t n_top = ev->top_ids && ev->top_probs ? (size_t)ev->n_top * ev->n_ids : 0;
	size_t n_logits = ev->logits ? ev->n_ids * ev->n_vocab : 0;
	size_t bytes = ev->n_ids * sizeof(int32_t) + (ev->probs ? ev->n_ids * sizeof(float) : 0) +
		       n_top * (sizeof(int32_t) + sizeof(float)) + n_logits * sizeof(float) +
		       ev->text_len + 1;
	unsigned char *p = malloc(bytes);

	if (!p)
		return -1;
	h->buf = p;
	/* int32 and float first: every array stays 4-byte aligned */
	memcpy(p, ev->ids, ev->n_ids * sizeof(int32_t));
	h->ev.ids = (const int32_t *)(void *)p;
	p += ev->n_ids * sizeof(int32_t);
	if (ev->probs) {
		memcpy(p, ev->probs, ev->n_ids * sizeof(float));
		h->ev.probs = (const float *)(void *)p;
		p += ev->n_ids * sizeof(float);
	}
	if (n_top) {
		memcpy(p, ev->top_ids, n_top * sizeof(int32_t));
		h->ev.top_ids = (const int32_t *)(void *)p;
		p += n_top * sizeof(int32_t);
		memcpy(p, ev->top_probs, n_top * sizeof(float));
		h->ev.top_probs = (const float *)(void *)p;
		p += n_top * sizeof(float);
	} else {
		h->ev.n_top = 0;
		h->ev.top_ids = NULL;
		h->ev.top_probs = NULL;
	}
	if (n_logits) {
		memcpy(p, ev->logits, n_logits * sizeof(float));
		h->ev.logits = (const float *)(void *)p;
		p += n_logits * sizeof(float);
	} else {
		h->ev.logits = NULL;
		h->ev.n_vocab = 0;
	}
	if (ev->text_len)
		memcpy(p, ev->text, ev->text_len);
	p[ev->text_len] = 0;
	h->ev.text = (const char *)p;
	return 0;
}

int exl_cl_hold(struct exl_client *c, const struct exl_event *ev)
{
	struct exl_held *h = calloc(1, sizeof(*h));

	if (!h)
		return exl_cl_fail(c, EXL_E_NOMEM, "out of memory setting aside job %llu's event",
				   (unsigned long long)ev->job);
	h->ev = *ev;
	h->result.stop_token = -1;
	if (ev->type == EXL_EVENT_DONE) {
		if (copy_result(&h->result, ev->result)) {
			free(h);
			return exl_cl_fail(c, EXL_E_NOMEM, "out of memory setting aside job %llu's "
					   "result", (unsigned long long)ev->job);
		}
		h->ev.result = &h->result;
	} else if (copy_tokens(h, ev)) {
		free(h);
		return exl_cl_fail(c, EXL_E_NOMEM, "out of memory setting aside job %llu's tokens",
				   (unsigned long long)ev->job);
	}
	if (c->held_tail)
		c->held_tail->next = h;
	else
		c->held_head = h;
	c->held_tail = h;
	return EXL_OK;
}

bool exl_cl_take_held(struct exl_client *c, struct exl_event *ev)
{
	struct exl_held *h = c->held_head;

	if (!h)
		return false;
	c->held_head = h->next;
	if (!c->held_head)
		c->held_tail = NULL;
	h->next = NULL;
	c->cur_held = h;
	*ev = h->ev;
	return true;
}

void exl_cl_held_release(struct exl_client *c)
{
	held_free(c->cur_held);
	c->cur_held = NULL;
}

void exl_cl_held_free_all(struct exl_client *c)
{
	exl_cl_held_release(c);
	while (c->held_head) {
		struct exl_held *next = c->held_head->next;

		held_free(c->held_head);
		c->held_head = next;
	}
	c->held_tail = NULL;
}
