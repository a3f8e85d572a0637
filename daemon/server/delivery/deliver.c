/* A job's stream and result, delivered to its connection: TOKENS and DONE
 * records in the shared ring, or token / done messages on the socket.
 * Called on the job's engine thread. */
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "common/clock.h"
#include "daemon/core/generator/generator.h"
#include "daemon/core/util/log.h"
#include "daemon/server/delivery/deliver.h"
#include "daemon/server/delivery/job.h"
#include "daemon/server/delivery/ring.h"
#include "daemon/server/delivery/sink.h"

static void send_sbuf(struct exl_sink *s, msgpack_sbuffer *sb)
{
	if (sb->data && exl_sink_send(s, sb->data, sb->size))
		exl_log(EXL_LOG_ERR, "conn %llu: out of memory queueing a reply",
			(unsigned long long)s->conn_id);
}

void exl_deliver_accepted(struct exl_srv_job *j)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	exl_pack_reply(&pk, &sb, EXL_OP_GENERATE, &j->req_id, 3);
	exl_pack_key(&pk, "job");
	msgpack_pack_uint64(&pk, j->id);
	exl_pack_key(&pk, "model");
	exl_pack_cstr(&pk, j->model);
	exl_pack_key(&pk, "prompt_tokens");
	msgpack_pack_int(&pk, exl_job_prompt_tokens(j->job));
	send_sbuf(j->sink, &sb);
	msgpack_sbuffer_destroy(&sb);
}

void exl_deliver_refused(struct exl_srv_job *j, int code, const char *message)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	/* as for a result: a client that has the refusal and sends its next
	 * job at once must find this one's count gone (max_jobs_per_uid) */
	exl_srv_job_retire(j);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	exl_pack_error(&pk, &sb, &j->req_id, code, message);
	send_sbuf(j->sink, &sb);
	msgpack_sbuffer_destroy(&sb);
}

bool exl_deliver_has_room(struct exl_srv_job *j)
{
	if (j->stream == EXL_STREAM_RING)
		return exl_ring_has_room(j->sink->ring, j->pause_need);
	return exl_sink_backlog(j->sink) < EXL_SINK_SOCKET_LIMIT;
}

static void fail_job(struct exl_srv_job *j, const char *msg)
{
	snprintf(j->fail, sizeof(j->fail), "%s", msg);
	exl_job_cancel(j->job);
}

static int chunk_to_ring(struct exl_srv_job *j, const struct exl_chunk *c)
{
	struct exl_ring *r = j->sink->ring;
	uint32_t n = (uint32_t)c->n_tokens;
	uint32_t k = c->top_ids && c->top_probs ? (uint32_t)c->top_k : 0;
	struct exl_rec_tokens h = {
		.n_tokens = n,
		.text_len = (uint32_t)c->text_len,
		.n_top = (uint16_t)k,
		.flags = c->probs ? EXL_TOK_F_PROBS : 0,
		.t_us = (uint32_t)(exl_now_ns() / 1000),
	};
	struct iovec iov[6];
	int ni = 0;
	bool wake = false;

	iov[ni++] = (struct iovec){ &h, sizeof(h) };
	iov[ni++] = (struct iovec){ (void *)c->tokens, 4u * n };
	if (c->probs)
		iov[ni++] = (struct iovec){ (void *)c->probs, 4u * n };
	if (k) {
		iov[ni++] = (struct iovec){ (void *)c->top_ids, 4ull * n * k };
		iov[ni++] = (struct iovec){ (void *)c->top_probs, 4ull * n * k };
	}
	iov[ni++] = (struct iovec){ (void *)c->text, c->text_len };
	uint64_t len = exl_rec_tokens_size(n, k, c->probs != NULL, h.text_len);

	switch (exl_ring_write(r, EXL_REC_TOKENS, j->id, iov, ni, &wake)) {
	case EXL_RING_WRITTEN:
		if (wake)
			exl_sink_wake(j->sink);
		return EXL_CHUNK_OK;
	case EXL_RING_FULL:
		j->paused = true;
		j->pause_need = len;
		exl_ring_note_pause(r);
		return EXL_CHUNK_PAUSE;
	case EXL_RING_NEVER:
		break;
	}
	char msg[160];
	snprintf(msg, sizeof(msg), "a chunk of %llu bytes does not fit the ring of %u bytes "
		 "(ask for a larger ring_size in hello, or stream over the socket)",
		 (unsigned long long)len, r->size);
	fail_job(j, msg);
	return EXL_CHUNK_OK;
}

static void pack_floats(msgpack_packer *pk, const float *v, size_t n)
{
	msgpack_pack_array(pk, n);
	for (size_t i = 0; i < n; i++)
		msgpack_pack_float(pk, v[i]);
}

static void pack_ids(msgpack_packer *pk, const int32_t *v, size_t n)
{
	msgpack_pack_array(pk, n);
	for (size_t i = 0; i < n; i++)
		msgpack_pack_int32(pk, v[i]);
}

/* top: [[ids of token 0], ...] and [[probs of token 0], ...] */
static void pack_top(msgpack_packer *pk, const int32_t *ids, const float *probs, int n, int k)
{
	exl_pack_key(pk, "top_ids");
	msgpack_pack_array(pk, n);
	for (int i = 0; i < n; i++)
		pack_ids(pk, ids + (size_t)i * k, k);
	exl_pack_key(pk, "top_probs");
	msgpack_pack_array(pk, n);
	for (int i = 0; i < n; i++)
		pack_floats(pk, probs + (size_t)i * k, k);
}

static int chunk_to_socket(struct exl_srv_job *j, const struct exl_chunk *c)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	bool top = c->top_k > 0 && c->top_ids && c->top_probs;
	uint32_t n = 4 + (c->probs ? 1 : 0) + (top ? 2 : 0) + (c->logits ? 1 : 0);

	if (exl_sink_backlog(j->sink) >= EXL_SINK_SOCKET_LIMIT) {
		j->paused = true;
		j->pause_need = 0;
		return EXL_CHUNK_PAUSE;
	}
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	exl_pack_reply(&pk, &sb, EXL_OP_TOKEN, &j->req_id, n);
	exl_pack_key(&pk, "job");
	msgpack_pack_uint64(&pk, j->id);
	exl_pack_key(&pk, "ids");
	pack_ids(&pk, c->tokens, c->n_tokens);
	exl_pack_key(&pk, "text");
	exl_pack_strn(&pk, c->text, c->text_len);
	exl_pack_key(&pk, "t_us");
	msgpack_pack_uint32(&pk, (uint32_t)(exl_now_ns() / 1000));
	if (c->probs) {
		exl_pack_key(&pk, "probs");
		pack_floats(&pk, c->probs, c->n_tokens);
	}
	if (top)
		pack_top(&pk, c->top_ids, c->top_probs, c->n_tokens, c->top_k);
	if (c->logits) {
		/* one bin of n_vocab float32 (host order) per token */
		exl_pack_key(&pk, "logits");
		msgpack_pack_array(&pk, c->n_tokens);
		for (int i = 0; i < c->n_tokens; i++) {
			msgpack_pack_bin(&pk, 4u * c->n_vocab);
			msgpack_pack_bin_body(&pk, c->logits + (size_t)i * c->n_vocab,
					      4u * c->n_vocab);
		}
	}
	send_sbuf(j->sink, &sb);
	msgpack_sbuffer_destroy(&sb);
	return EXL_CHUNK_OK;
}

int exl_deliver_chunk(struct exl_srv_job *j, const struct exl_chunk *c)
{
	if (atomic_load(&j->sink->closed)) {
		exl_job_cancel(j->job);
		return EXL_CHUNK_OK;
	}
	if (j->fail[0] || (c->n_tokens == 0 && c->text_len == 0))
		return EXL_CHUNK_OK;
	switch (j->stream) {
	case EXL_STREAM_RING:
		return chunk_to_ring(j, c);
	case EXL_STREAM_SOCKET:
		return chunk_to_socket(j, c);
	default:
		return EXL_CHUNK_OK;
	}
}

static void pack_result(msgpack_packer *pk, msgpack_sbuffer *sb, const struct exl_srv_job *j,
			const struct exl_gen_result *r)
{
	const char *reason = j->fail[0] ? "error" : exl_stop_reason_name(r->reason);
	const char *error = j->fail[0] ? j->fail : r->reason == EXL_STOP_ERROR ?
			    (r->error ? r->error : "unknown error") : NULL;
	bool stop_token = !j->fail[0] && r->reason == EXL_STOP_TOKEN && r->stop_token >= 0;
	bool stop_string = !j->fail[0] && r->reason == EXL_STOP_STRING && r->stop_string;
	bool top = j->return_text && r->top_k > 0 && r->top_ids && r->top_probs;
	bool probs = j->return_text && r->probs;
	bool beams = r->num_beams > 0;
	uint32_t n = 12 + (error ? 1 : 0) + stop_token + stop_string + (j->return_text ? 2 : 0) +
		     (probs ? 1 : 0) + (top ? 2 : 0) + (beams ? 2 : 0);

	exl_pack_reply(pk, sb, EXL_OP_DONE, &j->req_id, n);
	exl_pack_key(pk, "job");
	msgpack_pack_uint64(pk, j->id);
	exl_pack_key(pk, "stop_reason");
	exl_pack_cstr(pk, reason);
	if (stop_token) {
		exl_pack_key(pk, "stop_token");
		msgpack_pack_int32(pk, r->stop_token);
	}
	if (stop_string) {
		exl_pack_key(pk, "stop_string");
		exl_pack_cstr(pk, r->stop_string);
	}
	exl_pack_key(pk, "prompt_tokens");
	msgpack_pack_int(pk, r->prompt_tokens);
	exl_pack_key(pk, "new_tokens");
	msgpack_pack_int(pk, r->new_tokens);
	exl_pack_key(pk, "cached_tokens");
	msgpack_pack_int(pk, r->cached_tokens);
	if (r->truncated) {
		exl_pack_key(pk, "truncated_tokens");
		msgpack_pack_int(pk, r->truncated);
	}
	exl_pack_key(pk, "seed");
	msgpack_pack_uint64(pk, r->seed);
	exl_pack_key(pk, "time_queued");
	msgpack_pack_double(pk, r->time_queued);
	exl_pack_key(pk, "time_to_first");
	msgpack_pack_double(pk, r->time_to_first_token);
	exl_pack_key(pk, "time_total");
	msgpack_pack_double(pk, r->time_total);
	exl_pack_key(pk, "model");
	exl_pack_cstr(pk, j->model);
	exl_pack_key(pk, "draft_proposed");
	msgpack_pack_int(pk, r->draft_proposed);
	exl_pack_key(pk, "draft_accepted");
	msgpack_pack_int(pk, r->draft_accepted);
	if (beams) {
		exl_pack_key(pk, "num_beams");
		msgpack_pack_int(pk, r->num_beams);
		exl_pack_key(pk, "beam_score");
		msgpack_pack_double(pk, r->beam_score);
	}
	if (error) {
		exl_pack_key(pk, "error");
		msgpack_pack_map(pk, 2);
		exl_pack_key(pk, "code");
		exl_pack_cstr(pk, exl_code_name(EXL_E_INTERNAL));
		exl_pack_key(pk, "message");
		exl_pack_text(pk, error, strlen(error));
	}
	if (j->return_text) {
		exl_pack_key(pk, "text");
		exl_pack_strn(pk, r->text ? r->text : "", r->text ? r->text_len : 0);
		exl_pack_key(pk, "ids");
		pack_ids(pk, r->tokens, r->n_tokens);
	}
	if (probs) {
		exl_pack_key(pk, "probs");
		pack_floats(pk, r->probs, r->n_tokens);
	}
	if (top)
		pack_top(pk, r->top_ids, r->top_probs, r->n_tokens, r->top_k);
}

/* An embed request's reply, or its error. */
static void pack_embedding(msgpack_packer *pk, msgpack_sbuffer *sb, const struct exl_srv_job *j,
			   const struct exl_gen_result *r)
{
	if (j->fail[0] || !r->embedding) {
		const char *msg = j->fail[0] ? j->fail : r->error ? r->error :
				  exl_stop_reason_name(r->reason);
		int code = r->reason == EXL_STOP_SHUTDOWN ? EXL_E_SHUTDOWN :
			   r->reason == EXL_STOP_UNLOADED ? EXL_E_BUSY : EXL_E_INTERNAL;

		exl_pack_error(pk, sb, &j->req_id, code, msg);
		return;
	}
	exl_pack_reply(pk, sb, EXL_OP_EMBED, &j->req_id, 6);
	exl_pack_key(pk, "job");
	msgpack_pack_uint64(pk, j->id);
	exl_pack_key(pk, "model");
	exl_pack_cstr(pk, j->model);
	exl_pack_key(pk, "n_tokens");
	msgpack_pack_int(pk, r->prompt_tokens);
	exl_pack_key(pk, "truncated_tokens");
	msgpack_pack_int(pk, r->truncated);
	exl_pack_key(pk, "time_total");
	msgpack_pack_double(pk, r->time_total);
	exl_pack_key(pk, "embedding");
	pack_floats(pk, r->embedding, (size_t)r->n_embd);
}

void exl_deliver_result(struct exl_srv_job *j, const struct exl_gen_result *r)
{
	struct exl_sink *s = j->sink;
	msgpack_sbuffer sb;
	msgpack_packer pk;

	/* before the result goes out: a client that has it must find the
	 * job gone and its uid's count lowered */
	exl_srv_job_retire(j);
	if (!atomic_load(&s->closed)) {
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		if (j->embed)
			pack_embedding(&pk, &sb, j, r);
		else
			pack_result(&pk, &sb, j, r);
		if (!sb.data) {
			exl_log(EXL_LOG_ERR, "job %llu: out of memory encoding its result",
				(unsigned long long)j->id);
		} else if (j->stream != EXL_STREAM_RING) {
			send_sbuf(s, &sb);
		} else if (exl_sink_ring_record(s, EXL_REC_DONE, j->id, sb.data, sb.size)) {
			/* Too large for the ring: the client waits on the ring,
			 * so the ring tells it to read the socket. */
			if (exl_sink_ring_record(s, EXL_REC_DONE_SOCKET, j->id, "", 0))
				exl_log(EXL_LOG_ERR, "job %llu: out of memory queueing a ring record",
					(unsigned long long)j->id);
			send_sbuf(s, &sb);
		}
		msgpack_sbuffer_destroy(&sb);
	}
}
