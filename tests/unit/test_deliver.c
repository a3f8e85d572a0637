/* A job's delivery (daemon/server/delivery/deliver.c) alone, as a client
 * reads it: token messages on the socket and TOKENS records in the ring,
 * pausing when either consumer is full and resuming when it has room, the
 * result as a done message or a DONE record (or DONE_SOCKET and the
 * socket when it cannot fit the ring), error replies, and the job retired
 * before its result goes out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "daemon/core/generator/generator.h"
#include "daemon/server/delivery/deliver.h"
#include "daemon/server/delivery/job.h"
#include "daemon/server/delivery/mailbox.h"
#include "daemon/server/delivery/sink.h"
#include "delivery_test_util.h"

struct fixture {
	struct exl_mailbox mb;
	struct exl_uid_table uids;
	struct exl_sink *sink;
	struct exl_client c;       /* the client's end of the sink's ring */
	struct exl_srv_job *j;
	msgpack_unpacked up;
	struct exl_outmsg *msg;    /* what up points into */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char err[128];
	int code;

	if (!f || exl_mailbox_init(&f->mb, err, sizeof(err)))
		return -1;
	f->sink = exl_sink_create(&f->mb, 1000, 42, 7);
	if (!f->sink)
		return -1;
	f->sink->ring = ring_pair(EXL_RING_SIZE_MIN, &f->c);
	if (!f->sink->ring)
		return -1;
	f->j = exl_srv_job_create(f->sink, exl_uid_stats_get(&f->uids, 1000), 10, 77, &code);
	if (!f->j)
		return -1;
	f->j->model = "stories";
	f->j->req_id.len = 1;
	f->j->req_id.bytes[0] = 0x05; /* the request's id, packed: 5 */
	f->j->preparing = false;
	msgpack_unpacked_init(&f->up);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	struct exl_mail *m = exl_mailbox_take(&f->mb);

	while (m) {
		struct exl_mail *next = m->next;
		exl_sink_unref(m->u.sink);
		free(m);
		m = next;
	}
	if (f->j)
		exl_srv_job_free(f->j);
	assert_int_equal(atomic_load(&f->sink->refs), 1);
	exl_cl_ring_unmap(&f->c);
	exl_sink_unref(f->sink);
	exl_uid_table_free(&f->uids);
	exl_mailbox_destroy(&f->mb);
	msgpack_unpacked_destroy(&f->up);
	free(f->msg);
	free(f);
	return 0;
}

/* The one socket message queued: unpacked into f->up (which points into
 * it, kept in f->msg), its map returned. */
static const msgpack_object *one_message(struct fixture *f)
{
	struct exl_outmsg *o = exl_sink_take_out(f->sink, NULL);
	size_t off = 0;

	free(f->msg);
	f->msg = o;
	assert_non_null(o);
	assert_null(o->next);
	assert_int_equal(msgpack_unpack_next(&f->up, (const char *)o->data, o->len, &off),
			 MSGPACK_UNPACK_SUCCESS);
	assert_int_equal(off, o->len);
	assert_int_equal(f->up.data.type, MSGPACK_OBJECT_MAP);
	return &f->up.data;
}

static const int32_t ids[3] = { 10, 20, 30 };
static const float probs[3] = { 0.5f, 0.25f, 0.125f };

static void test_socket_chunk(void **state)
{
	struct fixture *f = *state;
	struct exl_chunk c = { .text = "abc", .text_len = 3, .tokens = ids, .n_tokens = 3,
			       .probs = probs };

	f->j->stream = EXL_STREAM_SOCKET;
	assert_int_equal(exl_deliver_chunk(f->j, &c), EXL_CHUNK_OK);
	const msgpack_object *m = one_message(f);
	assert_true(str_is(map_get(m, "op"), "token"));
	assert_true(uint_is(map_get(m, "id"), 5));
	assert_true(uint_is(map_get(m, "job"), 77));
	assert_true(str_is(map_get(m, "text"), "abc"));
	const msgpack_object *a = map_get(m, "ids");
	assert_non_null(a);
	assert_int_equal(a->type, MSGPACK_OBJECT_ARRAY);
	assert_int_equal(a->via.array.size, 3);
	assert_int_equal(a->via.array.ptr[2].via.u64, 30);
	a = map_get(m, "probs");
	assert_non_null(a);
	assert_int_equal(a->via.array.size, 3);
	assert_true(a->via.array.ptr[1].via.f64 == 0.25);
	assert_null(map_get(m, "logits"));

	/* an empty chunk sends nothing */
	struct exl_chunk none = { .text = "", .tokens = ids };
	assert_int_equal(exl_deliver_chunk(f->j, &none), EXL_CHUNK_OK);
	assert_null(exl_sink_take_out(f->sink, NULL));

	/* a client that does not read: past the limit the job pauses */
	atomic_store(&f->sink->loop_buffered, EXL_SINK_SOCKET_LIMIT);
	assert_false(exl_deliver_has_room(f->j));
	assert_int_equal(exl_deliver_chunk(f->j, &c), EXL_CHUNK_PAUSE);
	assert_true(f->j->paused);
	assert_null(exl_sink_take_out(f->sink, NULL));
	atomic_store(&f->sink->loop_buffered, 0);
	assert_true(exl_deliver_has_room(f->j));
}

static void test_ring_chunk(void **state)
{
	struct fixture *f = *state;
	struct exl_chunk c = { .text = "hello", .text_len = 5, .tokens = ids, .n_tokens = 2 };
	struct exl_rec_hdr h;
	const uint8_t *p;
	size_t len;

	f->j->stream = EXL_STREAM_RING;
	assert_int_equal(exl_deliver_chunk(f->j, &c), EXL_CHUNK_OK);
	assert_int_equal(ring_next(&f->c, &h, &p, &len), 1);
	assert_int_equal(h.type, EXL_REC_TOKENS);
	assert_int_equal(h.job, 77);
	struct exl_rec_tokens t;
	assert_true(len == exl_rec_tokens_size(2, 0, false, 5));
	memcpy(&t, p, sizeof(t));
	assert_int_equal(t.n_tokens, 2);
	assert_int_equal(t.text_len, 5);
	assert_int_equal(t.flags, 0);
	int32_t got[2];
	memcpy(got, p + sizeof(t), sizeof(got));
	assert_int_equal(got[0], 10);
	assert_int_equal(got[1], 20);
	assert_memory_equal(p + sizeof(t) + sizeof(got), "hello", 5);
	exl_cl_ring_release(&f->c);
	/* nothing on the socket */
	assert_null(exl_sink_take_out(f->sink, NULL));

	/* fill the ring: the chunk that does not fit pauses the job */
	int n = 0;
	while (exl_deliver_chunk(f->j, &c) == EXL_CHUNK_OK)
		n++;
	assert_true(n > 100);
	assert_true(f->j->paused);
	assert_int_equal(f->j->pause_need, exl_rec_tokens_size(2, 0, false, 5));
	assert_false(exl_deliver_has_room(f->j));
	/* the client reads: room again */
	while (ring_next(&f->c, &h, &p, &len) == 1)
		n--;
	exl_cl_ring_release(&f->c);
	assert_int_equal(n, 0);
	assert_true(exl_deliver_has_room(f->j));
}

static void test_result_socket(void **state)
{
	struct fixture *f = *state;
	struct exl_uid_stats *u = f->j->uid;
	struct exl_gen_result r = { .reason = EXL_STOP_MAX_NEW_TOKENS, .text = "abc", .text_len = 3,
				    .tokens = ids, .n_tokens = 3, .stop_token = -1,
				    .prompt_tokens = 4, .new_tokens = 3, .seed = 9 };

	f->j->stream = EXL_STREAM_SOCKET;
	f->j->return_text = true;
	assert_int_equal(atomic_load(&u->jobs), 1);
	exl_deliver_result(f->j, &r);
	/* retired before it went out */
	assert_int_equal(atomic_load(&u->jobs), 0);
	assert_null(f->sink->jobs);
	const msgpack_object *m = one_message(f);
	assert_true(str_is(map_get(m, "op"), "done"));
	assert_true(uint_is(map_get(m, "job"), 77));
	assert_true(str_is(map_get(m, "stop_reason"), exl_stop_reason_name(EXL_STOP_MAX_NEW_TOKENS)));
	assert_true(uint_is(map_get(m, "prompt_tokens"), 4));
	assert_true(uint_is(map_get(m, "new_tokens"), 3));
	assert_true(uint_is(map_get(m, "seed"), 9));
	assert_true(str_is(map_get(m, "model"), "stories"));
	assert_true(str_is(map_get(m, "text"), "abc"));
	assert_null(map_get(m, "error"));
	assert_null(map_get(m, "stop_token"));
}

static void test_result_ring(void **state)
{
	struct fixture *f = *state;
	struct exl_rec_hdr h;
	const uint8_t *p;
	size_t len;
	struct exl_gen_result r = { .reason = EXL_STOP_TOKEN, .stop_token = 2, .text = "",
				    .tokens = ids };

	f->j->stream = EXL_STREAM_RING;
	f->j->return_text = false;
	exl_deliver_result(f->j, &r);
	assert_int_equal(ring_next(&f->c, &h, &p, &len), 1);
	assert_int_equal(h.type, EXL_REC_DONE);
	assert_int_equal(h.job, 77);
	size_t off = 0;
	assert_int_equal(msgpack_unpack_next(&f->up, (const char *)p, len, &off),
			 MSGPACK_UNPACK_SUCCESS);
	assert_true(str_is(map_get(&f->up.data, "stop_reason"), exl_stop_reason_name(EXL_STOP_TOKEN)));
	assert_true(uint_is(map_get(&f->up.data, "stop_token"), 2));
	assert_null(map_get(&f->up.data, "text"));
	exl_cl_ring_release(&f->c);
	assert_null(exl_sink_take_out(f->sink, NULL));
}

/* A result larger than the ring: DONE_SOCKET in the ring, the result on
 * the socket. */
static void test_result_too_large(void **state)
{
	struct fixture *f = *state;
	struct exl_rec_hdr h;
	const uint8_t *p;
	size_t len;
	size_t n = EXL_RING_SIZE_MIN; /* bytes of text: more than the ring */
	char *text = malloc(n + 1);

	memset(text, 'a', n);
	text[n] = 0;
	struct exl_gen_result r = { .reason = EXL_STOP_MAX_NEW_TOKENS, .text = text, .text_len = n,
				    .tokens = ids, .stop_token = -1 };
	f->j->stream = EXL_STREAM_RING;
	f->j->return_text = true;
	exl_deliver_result(f->j, &r);
	assert_int_equal(ring_next(&f->c, &h, &p, &len), 1);
	assert_int_equal(h.type, EXL_REC_DONE_SOCKET);
	assert_int_equal(len, 0);
	const msgpack_object *m = one_message(f);
	const msgpack_object *t = map_get(m, "text");
	assert_non_null(t);
	assert_int_equal(t->via.str.size, n);
	free(text);
}

static void test_refused_and_failed(void **state)
{
	struct fixture *f = *state;
	struct exl_gen_result r = { .reason = EXL_STOP_CANCELLED, .text = "", .tokens = ids,
				    .stop_token = -1 };

	exl_deliver_refused(f->j, EXL_E_BUSY, "the model is being unloaded");
	const msgpack_object *m = one_message(f);
	assert_true(str_is(map_get(m, "op"), "error"));
	assert_true(uint_is(map_get(m, "id"), 5));
	assert_true(str_is(map_get(m, "code"), exl_code_name(EXL_E_BUSY)));
	assert_true(str_is(map_get(m, "message"), "the model is being unloaded"));

	/* a job the daemon ended says why in its result */
	f->j->stream = EXL_STREAM_SOCKET;
	snprintf(f->j->fail, sizeof(f->j->fail), "it broke");
	exl_deliver_result(f->j, &r);
	m = one_message(f);
	assert_true(str_is(map_get(m, "stop_reason"), "error"));
	const msgpack_object *e = map_get(m, "error");
	assert_non_null(e);
	assert_true(str_is(map_get(e, "message"), "it broke"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_socket_chunk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ring_chunk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_result_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_result_ring, setup, teardown),
		cmocka_unit_test_setup_teardown(test_result_too_large, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_and_failed, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
