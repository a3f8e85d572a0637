/* A server job's life (daemon/server/delivery/job.c) alone: the uid
 * table, creation against a uid's job limit, the connection's live list,
 * cancel lookup, retire (once, from anywhere in the list) and free with
 * its sink reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "daemon/server/delivery/job.h"
#include "daemon/server/delivery/mailbox.h"
#include "daemon/server/delivery/sink.h"

struct fixture {
	struct exl_mailbox mb;
	struct exl_uid_table uids;
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

static int teardown(void **state)
{
	struct fixture *f = *state;

	/* every test leaves only the fixture's own reference */
	assert_int_equal(atomic_load(&f->sink->refs), 1);
	exl_sink_unref(f->sink);
	exl_uid_table_free(&f->uids);
	exl_mailbox_destroy(&f->mb);
	free(f);
	return 0;
}

static int n_listed(struct exl_sink *s)
{
	int n = 0;

	for (struct exl_srv_job *j = s->jobs; j; j = j->sink_next)
		n++;
	return n;
}

static void test_uid_table(void **state)
{
	struct fixture *f = *state;
	struct exl_uid_stats *a = exl_uid_stats_get(&f->uids, 1000);
	struct exl_uid_stats *b = exl_uid_stats_get(&f->uids, 1001);

	assert_non_null(a);
	assert_non_null(b);
	assert_ptr_not_equal(a, b);
	assert_ptr_equal(exl_uid_stats_get(&f->uids, 1000), a);
	assert_int_equal(a->uid, 1000);
	assert_int_equal(atomic_load(&a->jobs), 0);
	assert_int_equal(a->conns, 0);
}

static void test_limit(void **state)
{
	struct fixture *f = *state;
	struct exl_uid_stats *u = exl_uid_stats_get(&f->uids, 1000);
	struct exl_srv_job *j[3];
	int code = 0;

	for (int i = 0; i < 3; i++) {
		j[i] = exl_srv_job_create(f->sink, u, 3, 100 + (uint64_t)i, &code);
		assert_non_null(j[i]);
		assert_true(j[i]->preparing);
		assert_int_equal(j[i]->id, 100 + i);
		assert_ptr_equal(j[i]->sink, f->sink);
	}
	assert_int_equal(atomic_load(&u->jobs), 3);
	assert_int_equal(atomic_load(&f->sink->refs), 4);
	assert_int_equal(n_listed(f->sink), 3);

	/* the fourth is over the limit: nothing changes */
	assert_null(exl_srv_job_create(f->sink, u, 3, 200, &code));
	assert_int_equal(code, EXL_E_LIMIT);
	assert_int_equal(atomic_load(&u->jobs), 3);
	assert_int_equal(atomic_load(&f->sink->refs), 4);
	assert_int_equal(n_listed(f->sink), 3);

	/* one ends: room for another */
	exl_srv_job_free(j[1]);
	assert_int_equal(atomic_load(&u->jobs), 2);
	j[1] = exl_srv_job_create(f->sink, u, 3, 201, &code);
	assert_non_null(j[1]);
	for (int i = 0; i < 3; i++)
		exl_srv_job_free(j[i]);
	assert_int_equal(atomic_load(&u->jobs), 0);
	assert_null(f->sink->jobs);
}

static void test_retire(void **state)
{
	struct fixture *f = *state;
	struct exl_uid_stats *u = exl_uid_stats_get(&f->uids, 1000);
	struct exl_srv_job *j[3];
	int code;

	for (int i = 0; i < 3; i++)
		j[i] = exl_srv_job_create(f->sink, u, 10, (uint64_t)i, &code);
	/* the middle one: its neighbours stay linked */
	exl_srv_job_retire(j[1]);
	assert_false(j[1]->in_sink);
	assert_null(j[1]->uid);
	assert_int_equal(atomic_load(&u->jobs), 2);
	assert_int_equal(n_listed(f->sink), 2);
	/* again: nothing more */
	exl_srv_job_retire(j[1]);
	assert_int_equal(atomic_load(&u->jobs), 2);
	assert_int_equal(n_listed(f->sink), 2);
	/* the head, then the last */
	exl_srv_job_retire(j[2]);
	exl_srv_job_retire(j[0]);
	assert_null(f->sink->jobs);
	assert_int_equal(atomic_load(&u->jobs), 0);
	/* free after retire drops the sink reference only */
	for (int i = 0; i < 3; i++)
		exl_srv_job_free(j[i]);
	assert_int_equal(atomic_load(&u->jobs), 0);
}

static void test_mark_cancel(void **state)
{
	struct fixture *f = *state;
	struct exl_uid_stats *u = exl_uid_stats_get(&f->uids, 1000);
	int engine_a, engine_b, code;
	bool preparing;

	struct exl_srv_job *a = exl_srv_job_create(f->sink, u, 10, 5, &code);
	struct exl_srv_job *b = exl_srv_job_create(f->sink, u, 10, 6, &code);
	a->et = (struct exl_engine_thread *)&engine_a;
	b->et = (struct exl_engine_thread *)&engine_b;
	b->preparing = false; /* on its engine */

	assert_ptr_equal(exl_srv_job_mark_cancel(f->sink, 5, &preparing), &engine_a);
	assert_true(preparing);
	assert_true(a->cancel_asked);
	assert_ptr_equal(exl_srv_job_mark_cancel(f->sink, 6, &preparing), &engine_b);
	assert_false(preparing);
	assert_false(b->cancel_asked);
	assert_null(exl_srv_job_mark_cancel(f->sink, 7, &preparing));
	assert_false(preparing);
	/* a retired job is no longer found */
	exl_srv_job_retire(b);
	assert_null(exl_srv_job_mark_cancel(f->sink, 6, &preparing));
	exl_srv_job_free(a);
	exl_srv_job_free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_uid_table, setup, teardown),
		cmocka_unit_test_setup_teardown(test_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retire, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mark_cancel, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
