/* The loop's mailbox (daemon/server/delivery/mailbox.c) alone: typed mail
 * keeps its payload and its order, the eventfd is readable exactly while
 * mail waits, and mail posted from several threads at once all arrives,
 * each thread's in the order it posted. */
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "daemon/server/delivery/mailbox.h"

static bool readable(const struct exl_mailbox *mb)
{
	struct pollfd p = { .fd = mb->fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

static void free_mail(struct exl_mail *m)
{
	while (m) {
		struct exl_mail *next = m->next;
		free(m);
		m = next;
	}
}

static void test_kinds_and_order(void **state)
{
	struct exl_mailbox mb;
	char err[128];
	/* stand-ins: the mailbox never looks at what the payload points at */
	int sink, entry, engine, prep;

	(void)state;
	assert_int_equal(exl_mailbox_init(&mb, err, sizeof(err)), 0);
	assert_false(readable(&mb));
	assert_null(exl_mailbox_take(&mb));

	assert_true(exl_mail_post_sink(&mb, EXL_MAIL_SINK_OUT, (struct exl_sink *)&sink));
	assert_true(readable(&mb));
	assert_true(exl_mail_post_load(&mb, EXL_MAIL_LOAD_PROGRESS,
				       (struct exl_model_entry *)&entry, 5, 10));
	assert_true(exl_mail_post_load(&mb, EXL_MAIL_LOAD_DONE, (struct exl_model_entry *)&entry,
				       0, 0));
	assert_true(exl_mail_post_engine_exited(&mb, (struct exl_engine_thread *)&engine));
	struct exl_mail *pre = exl_mail_alloc();
	assert_non_null(pre);
	exl_mail_post_prep_done(&mb, pre, (struct exl_prep *)&prep);
	assert_true(exl_mail_post_sink(&mb, EXL_MAIL_SINK_PENDING, (struct exl_sink *)&sink));

	struct exl_mail *m = exl_mailbox_take(&mb);
	assert_false(readable(&mb));
	struct exl_mail *first = m;
	assert_non_null(m);
	assert_int_equal(m->kind, EXL_MAIL_SINK_OUT);
	assert_ptr_equal(m->u.sink, &sink);
	m = m->next;
	assert_int_equal(m->kind, EXL_MAIL_LOAD_PROGRESS);
	assert_ptr_equal(m->u.load.entry, &entry);
	assert_int_equal(m->u.load.done, 5);
	assert_int_equal(m->u.load.total, 10);
	m = m->next;
	assert_int_equal(m->kind, EXL_MAIL_LOAD_DONE);
	m = m->next;
	assert_int_equal(m->kind, EXL_MAIL_ENGINE_EXITED);
	assert_ptr_equal(m->u.engine, &engine);
	m = m->next;
	assert_ptr_equal(m, pre);
	assert_int_equal(m->kind, EXL_MAIL_PREP_DONE);
	assert_ptr_equal(m->u.prep, &prep);
	m = m->next;
	assert_int_equal(m->kind, EXL_MAIL_SINK_PENDING);
	assert_null(m->next);
	free_mail(first);

	/* taken empty: nothing, and still not readable */
	assert_null(exl_mailbox_take(&mb));
	assert_false(readable(&mb));
	exl_mailbox_destroy(&mb);
}

#define POSTERS 4
#define PER_POSTER 20000

struct poster {
	struct exl_mailbox *mb;
	int k;
};

static void *post_many(void *arg)
{
	struct poster *p = arg;

	for (uint64_t i = 0; i < PER_POSTER; i++)
		while (!exl_mail_post_load(p->mb, EXL_MAIL_LOAD_PROGRESS, NULL, (uint64_t)p->k, i))
			;
	return NULL;
}

static void test_threads(void **state)
{
	struct exl_mailbox mb;
	char err[128];
	pthread_t th[POSTERS];
	struct poster ps[POSTERS];
	uint64_t next[POSTERS] = { 0 };
	long got = 0;

	(void)state;
	assert_int_equal(exl_mailbox_init(&mb, err, sizeof(err)), 0);
	for (int k = 0; k < POSTERS; k++) {
		ps[k] = (struct poster){ &mb, k };
		assert_int_equal(pthread_create(&th[k], NULL, post_many, &ps[k]), 0);
	}
	/* as the loop does: wait for the fd, take everything */
	while (got < (long)POSTERS * PER_POSTER) {
		struct pollfd p = { .fd = mb.fd, .events = POLLIN };

		assert_int_equal(poll(&p, 1, 10000), 1);
		struct exl_mail *m = exl_mailbox_take(&mb);
		for (struct exl_mail *x = m; x; x = x->next) {
			int k = (int)x->u.load.done;
			assert_true(k >= 0 && k < POSTERS);
			assert_int_equal(x->u.load.total, next[k]);
			next[k]++;
			got++;
		}
		free_mail(m);
	}
	for (int k = 0; k < POSTERS; k++) {
		pthread_join(th[k], NULL);
		assert_int_equal(next[k], PER_POSTER);
	}
	assert_null(exl_mailbox_take(&mb));
	assert_false(readable(&mb));
	exl_mailbox_destroy(&mb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kinds_and_order),
		cmocka_unit_test(test_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
