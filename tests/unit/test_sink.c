/* A connection's sink (daemon/server/delivery/sink.c) alone: socket
 * messages queued in order with one mail to the loop per batch, the
 * backlog, wakes coalesced, a closed sink dropping deliveries, ring
 * records deferred while the ring is full and retried in order, and the
 * last reference freeing it with its ring. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "daemon/server/delivery/mailbox.h"
#include "daemon/server/delivery/sink.h"
#include "delivery_test_util.h"

struct fixture {
	struct exl_mailbox mb;
	struct exl_sink *sink;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char err[128];

	if (!f || exl_mailbox_init(&f->mb, err, sizeof(err)))
		return -1;
	f->sink = exl_sink_create(&f->mb, 1000, 42, 7);
	if (!f->sink)
		return -1;
	*state = f;
	return 0;
}

/* The mail waiting, each checked to be of kind for f's sink and its
 * reference dropped as the loop does; how many. */
static int take_mail(struct fixture *f, enum exl_mail_kind kind)
{
	struct exl_mail *m = exl_mailbox_take(&f->mb);
	int n = 0;

	while (m) {
		struct exl_mail *next = m->next;
		assert_int_equal(m->kind, kind);
		assert_ptr_equal(m->u.sink, f->sink);
		exl_sink_unref(m->u.sink);
		free(m);
		n++;
		m = next;
	}
	return n;
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
	assert_int_equal(atomic_load(&f->sink->refs), 1);
	exl_sink_unref(f->sink);
	exl_mailbox_destroy(&f->mb);
	free(f);
	return 0;
}

static void free_out(struct exl_outmsg *o)
{
	while (o) {
		struct exl_outmsg *next = o->next;
		free(o);
		o = next;
	}
}

static void test_send(void **state)
{
	struct fixture *f = *state;
	bool wake = true;

	assert_int_equal(exl_sink_send(f->sink, "one", 3), 0);
	/* a reference travels with the mail */
	assert_int_equal(atomic_load(&f->sink->refs), 2);
	assert_int_equal(exl_sink_send(f->sink, "two!", 4), 0);
	assert_int_equal(exl_sink_send(f->sink, "three", 5), 0);
	assert_int_equal(exl_sink_backlog(f->sink), 12);
	/* the loop is told once until it takes */
	assert_int_equal(take_mail(f, EXL_MAIL_SINK_OUT), 1);

	struct exl_outmsg *o = exl_sink_take_out(f->sink, &wake);
	assert_false(wake);
	assert_int_equal(exl_sink_backlog(f->sink), 0);
	assert_non_null(o);
	assert_int_equal(o->len, 3);
	assert_memory_equal(o->data, "one", 3);
	assert_int_equal(o->next->len, 4);
	assert_memory_equal(o->next->data, "two!", 4);
	assert_int_equal(o->next->next->len, 5);
	assert_null(o->next->next->next);
	free_out(o);

	/* after a take, the next send tells the loop again */
	assert_int_equal(exl_sink_send(f->sink, "four", 4), 0);
	assert_int_equal(take_mail(f, EXL_MAIL_SINK_OUT), 1);
	free_out(exl_sink_take_out(f->sink, NULL));

	/* what the loop still buffers counts in the backlog */
	atomic_store(&f->sink->loop_buffered, 100);
	assert_int_equal(exl_sink_backlog(f->sink), 100);
	atomic_store(&f->sink->loop_buffered, 0);
}

static void test_wake(void **state)
{
	struct fixture *f = *state;
	bool wake = false;

	exl_sink_wake(f->sink);
	exl_sink_wake(f->sink);
	exl_sink_wake(f->sink);
	assert_int_equal(take_mail(f, EXL_MAIL_SINK_OUT), 1);
	assert_null(exl_sink_take_out(f->sink, &wake));
	assert_true(wake);
	/* asked once, given once */
	assert_null(exl_sink_take_out(f->sink, &wake));
	assert_false(wake);
	/* a wake rides along with queued messages' mail */
	assert_int_equal(exl_sink_send(f->sink, "x", 1), 0);
	exl_sink_wake(f->sink);
	assert_int_equal(take_mail(f, EXL_MAIL_SINK_OUT), 1);
	free_out(exl_sink_take_out(f->sink, &wake));
	assert_true(wake);
}

static void test_closed(void **state)
{
	struct fixture *f = *state;

	atomic_store(&f->sink->closed, true);
	assert_int_equal(exl_sink_send(f->sink, "gone", 4), 0);
	exl_sink_wake(f->sink);
	assert_int_equal(exl_sink_backlog(f->sink), 0);
	assert_int_equal(take_mail(f, EXL_MAIL_SINK_OUT), 0);
	assert_null(exl_sink_take_out(f->sink, NULL));
}

static void test_ring_records(void **state)
{
	struct fixture *f = *state;
	struct exl_client c;
	struct exl_rec_hdr h;
	const uint8_t *p;
	size_t len;
	uint8_t payload[1000];

	f->sink->ring = ring_pair(EXL_RING_SIZE_MIN, &c);
	assert_non_null(f->sink->ring);
	/* larger than the ring can ever hold: the caller sends it otherwise */
	uint8_t *huge = calloc(1, EXL_RING_SIZE_MIN);
	assert_int_equal(exl_sink_ring_record(f->sink, EXL_REC_DONE, 1, huge, EXL_RING_SIZE_MIN),
			 -1);
	free(huge);

	/* fill the ring; what does not fit waits, in order */
	int written = 0, n = 0;
	for (; n < 200; n++) {
		memset(payload, n, sizeof(payload));
		assert_int_equal(exl_sink_ring_record(f->sink, EXL_REC_DONE, (uint64_t)n, payload,
						      sizeof(payload)), 0);
		if (!f->sink->pend_head)
			written = n + 1;
	}
	assert_true(written > 10 && written < 200);
	assert_int_equal(take_mail(f, EXL_MAIL_SINK_PENDING), 1);
	/* the ring is still full: nothing moves */
	assert_true(exl_sink_retry_pending(f->sink));

	int next = 0;
	while (next < n) {
		int got = 0;
		while (ring_next(&c, &h, &p, &len) == 1) {
			assert_int_equal(h.type, EXL_REC_DONE);
			assert_int_equal(h.job, (uint64_t)next);
			assert_int_equal(len, sizeof(payload));
			assert_int_equal(p[0], (uint8_t)next);
			assert_int_equal(p[len - 1], (uint8_t)next);
			next++;
			got++;
		}
		exl_cl_ring_release(&c);
		assert_true(got > 0);
		bool left = exl_sink_retry_pending(f->sink);
		assert_int_equal(left, f->sink->pend_head != NULL);
	}
	assert_null(f->sink->pend_head);
	/* with nothing waiting, a record goes straight to the ring */
	assert_int_equal(exl_sink_ring_record(f->sink, EXL_REC_DONE_SOCKET, 999, "", 0), 0);
	assert_null(f->sink->pend_head);
	assert_int_equal(ring_next(&c, &h, &p, &len), 1);
	assert_int_equal(h.type, EXL_REC_DONE_SOCKET);
	assert_int_equal(h.job, 999);
	exl_cl_ring_unmap(&c);
	/* the ring goes with the sink (teardown's unref; ASan checks) */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_send, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wake, setup, teardown),
		cmocka_unit_test_setup_teardown(test_closed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ring_records, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
