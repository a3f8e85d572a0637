/* exl_embed(): one embed request per text, all sent before the first reply
 * is read, so the daemon's engine batches them (docs/client.md). */
#include <stdlib.h>
#include <string.h>

#include "client/lib/client_internal.h"
#include "exlclient.h"

void exl_embed_params_init(struct exl_embed_params *p)
{
	memset(p, 0, sizeof(*p));
}

void exl_embeddings_free(struct exl_embedding *e, size_t n)
{
	for (size_t i = 0; e && i < n; i++) {
		free(e[i].values);
		e[i].values = NULL;
	}
}

static void pack_request(struct exl_client *c, struct exl_cl_msg *m,
			 const struct exl_embed_params *p, const char *text, size_t len)
{
	uint32_t n = 1 + (p->model ? 1 : 0) + (p->pooling ? 1 : 0) + (p->normalize ? 1 : 0) +
		     (p->truncate ? 1 : 0);

	exl_cl_request(c, m, EXL_OP_EMBED, n);
	if (p->model) {
		exl_cl_key(m, "model");
		exl_cl_str(m, p->model);
	}
	exl_cl_key(m, "input");
	msgpack_pack_str(&m->pk, len);
	msgpack_pack_str_body(&m->pk, text, len);
	if (p->pooling) {
		exl_cl_key(m, "pooling");
		exl_cl_str(m, p->pooling);
	}
	if (p->normalize) {
		exl_cl_key(m, "normalize");
		msgpack_pack_true(&m->pk);
	}
	if (p->truncate) {
		exl_cl_key(m, "truncate");
		msgpack_pack_true(&m->pk);
	}
}

static int take_reply(struct exl_client *c, const msgpack_object *map, struct exl_embedding *e)
{
	const msgpack_object *v = exl_cl_get(map, "embedding");
	int64_t x;

	if (!v || v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size == 0 ||
	    v->via.array.size > 1u << 24)
		return exl_cl_fail(c, EXL_E_PROTOCOL, "embed reply without an embedding");
	e->values = malloc(v->via.array.size * sizeof(*e->values));
	if (!e->values)
		return exl_cl_fail(c, EXL_E_NOMEM, "out of memory");
	for (uint32_t i = 0; i < v->via.array.size; i++) {
		const msgpack_object *o = &v->via.array.ptr[i];

		if (o->type != MSGPACK_OBJECT_FLOAT32 && o->type != MSGPACK_OBJECT_FLOAT64)
			return exl_cl_fail(c, EXL_E_PROTOCOL, "embed reply: value %u is not a number", i);
		e->values[i] = (float)o->via.f64;
	}
	e->n_embd = v->via.array.size;
	if (exl_cl_get_i64(map, "n_tokens", &x))
		e->n_tokens = (int)x;
	if (exl_cl_get_i64(map, "truncated_tokens", &x))
		e->truncated_tokens = (int)x;
	return EXL_OK;
}

int exl_embed(struct exl_client *c, const struct exl_embed_params *p, const char *const *texts,
	      size_t n, struct exl_embedding *out)
{
	struct exl_embed_params dflt;
	struct exl_cl_msg m;
	msgpack_unpacked up;
	uint64_t first;
	size_t got = 0;
	int rc = EXL_OK, first_err = EXL_OK;

	if (!p) {
		exl_embed_params_init(&dflt);
		p = &dflt;
	}
	if (!texts || !out || n == 0)
		return exl_cl_fail(c, EXL_E_INVALID, "exl_embed: no texts");
	for (size_t i = 0; i < n; i++)
		if (!texts[i])
			return exl_cl_fail(c, EXL_E_INVALID, "exl_embed: text %zu is NULL", i);
	memset(out, 0, n * sizeof(*out));
	exl_cl_msg_init(&m);
	first = c->next_id + 1;
	for (size_t i = 0; i < n; i++)
		pack_request(c, &m, p, texts[i], strlen(texts[i]));
	rc = exl_cl_send(c, m.sb.data, m.sb.size);
	exl_cl_msg_free(&m);
	if (rc)
		return rc;
	msgpack_unpacked_init(&up);
	while (got < n) {
		uint64_t rid = 0;

		rc = exl_cl_read_msg(c, c->timeout_ms, &up);
		if (rc)
			break;
		const msgpack_object *map = &up.data;

		if (exl_cl_op_is(map, EXL_OP_WAKE))
			continue;
		if (exl_cl_op_is(map, EXL_OP_TOKEN) || exl_cl_op_is(map, EXL_OP_DONE)) {
			exl_cl_queue(c, &up);
			continue;
		}
		if (!exl_cl_get_u64(map, "id", &rid) || rid < first || rid >= first + n) {
			if (exl_cl_op_is(map, EXL_OP_ERROR) && !exl_cl_get(map, "id")) {
				char msg[400] = "";

				exl_cl_get_str(map, "message", msg, sizeof(msg));
				rc = exl_cl_fail(c, EXL_E_CLOSED, "%s", msg);
				break;
			}
			continue; /* a late reply to an earlier request */
		}
		got++;
		if (exl_cl_op_is(map, EXL_OP_ERROR)) {
			char code[32] = "", msg[400] = "";

			exl_cl_get_str(map, "code", code, sizeof(code));
			exl_cl_get_str(map, "message", msg, sizeof(msg));
			/* the first error is kept; the other replies are still read */
			if (first_err == EXL_OK)
				first_err = exl_cl_fail(c, exl_code_from_name(code, strlen(code)),
							"text %llu: %s",
							(unsigned long long)(rid - first), msg);
			continue;
		}
		int r = take_reply(c, map, &out[rid - first]);

		if (r && first_err == EXL_OK)
			first_err = r;
	}
	msgpack_unpacked_destroy(&up);
	if (!rc)
		rc = first_err;
	if (rc)
		exl_embeddings_free(out, n);
	return rc;
}
