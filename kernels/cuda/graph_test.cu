/* test_cuda_graph: the recorder of graph.cu against a CUDA runtime without
 * a GPU (tests/unit/cuda_mock_runtime.c), so that CI proves on any machine
 * what the GPU sessions cannot run every time: whatever mix of first
 * sights, graph builds, replays with patched arguments, copies, evictions
 * and failures a pass goes through, the stream runs exactly the kernels
 * the ops asked for, with their arguments, in their order.  A test program
 * (C++ because cu_launch is a template), built only with the CUDA backend.
 * Exits 1 with the first difference. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "tests/unit/cuda_mock_runtime.h"

/* What backend_cuda.cu gives graph.cu. */
void cu_fail(struct cuda_backend *cb, const char *fmt, ...)
{
	va_list ap;

	if (cb->failed)
		return;
	va_start(ap, fmt);
	vsnprintf(cb->err, sizeof(cb->err), fmt, ap);
	va_end(ap);
	cb->failed = true;
}

bool cu_ok(struct cuda_backend *cb, cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return true;
	cu_fail(cb, "%s: %s", what, cudaGetErrorString(e));
	return false;
}

/* "Kernels": host functions of two ints, distinct bodies so that each has
 * its own address. */
static volatile int sink[4];
static void k0(int a, int b) { sink[0] = a + b; }
static void k1(int a, int b) { sink[1] = a - b; }
static void k2(int a, int b) { sink[2] = a * b; }
static void k3(int a, int b) { sink[3] = a ^ b; }
static void (*const kernels[4])(int, int) = { k0, k1, k2, k3 };

#define MAX_ASK 16384

/* What the ops asked for since the trace was last checked. */
static struct mock_event asked[MAX_ASK];
static int n_asked;
static int failures;

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);      \
			fprintf(stderr, __VA_ARGS__);                        \
			fputc('\n', stderr);                                 \
			failures++;                                          \
		}                                                            \
	} while (0)

static struct mock_event *ask(void)
{
	if (n_asked == MAX_ASK) {
		fprintf(stderr, "more than %d nodes asked for between checks\n", MAX_ASK);
		exit(1);
	}
	return &asked[n_asked++];
}

static void launch(struct cuda_backend *cb, int k, unsigned grid, int a, int b)
{
	struct mock_event *ev = ask();

	ev->kind = MOCK_KERNEL;
	ev->fn = (const void *)kernels[k];
	ev->grid = grid;
	ev->a = a;
	ev->b = b;
	ev->bytes = 0;
	CHECK(cu_launch(cb, "test", kernels[k], grid, 32, a, b), "launch refused: %s", cb->err);
}

static void copy(struct cuda_backend *cb, size_t bytes)
{
	static char from[64], to[64];
	struct mock_event *ev = ask();

	memset(ev, 0, sizeof(*ev));
	ev->kind = MOCK_COPY;
	ev->bytes = bytes;
	CHECK(cu_copy(cb, to, from, bytes, cudaMemcpyDeviceToDevice, "test"), "copy refused");
}

/* The end of a pass, as download/sync end it: the rest sent, the stream
 * drained, the next pass at chunk 0. */
static void end_pass(struct cuda_backend *cb)
{
	cu_flush(cb);
	cudaStreamSynchronize(cb->stream);
	cu_rec_idle(cb);
}

/* The trace against what was asked, then both emptied. */
static void check_trace(const char *name)
{
	CHECK(mock_n == n_asked, "%s: the stream ran %d nodes, the ops asked for %d", name,
	      mock_n, n_asked);
	for (int i = 0; i < mock_n && i < n_asked; i++) {
		const struct mock_event *g = &mock_trace[i], *w = &asked[i];

		if (g->kind != w->kind || g->fn != w->fn || g->grid != w->grid || g->a != w->a ||
		    g->b != w->b || g->bytes != w->bytes) {
			CHECK(0, "%s: node %d: ran kind %d kernel %d grid %u (%d, %d) bytes %zu, "
			      "asked kind %d kernel %d grid %u (%d, %d) bytes %zu", name, i, g->kind,
			      g->fn == (const void *)k0 ? 0 : g->fn == (const void *)k1 ? 1 :
			      g->fn == (const void *)k2 ? 2 : 3, g->grid, g->a, g->b, g->bytes,
			      w->kind, w->fn == (const void *)k0 ? 0 : w->fn == (const void *)k1 ? 1 :
			      w->fn == (const void *)k2 ? 2 : 3, w->grid, w->a, w->b, w->bytes);
			break;
		}
	}
	mock_n = 0;
	n_asked = 0;
}

static struct cuda_backend *backend(bool graphs)
{
	struct cuda_backend *cb = (struct cuda_backend *)calloc(1, sizeof(*cb));

	if (!cb) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	cb->rec.on = graphs;
	return cb;
}

static void backend_free(struct cuda_backend *cb)
{
	end_pass(cb);
	cu_rec_free(cb);
	CHECK(mock_counts.graphs_live == 0 && mock_counts.execs_live == 0,
	      "%d graphs and %d instances left after cu_rec_free", mock_counts.graphs_live,
	      mock_counts.execs_live);
	CHECK(mock_counts.faults == 0, "runtime fault: %s (%d in all)", mock_counts.fault,
	      mock_counts.faults);
	free(cb);
}

/* A decode-like pass: n launches of a fixed pattern; step changes the
 * second argument of every tenth launch (attention's split length). */
static void pattern_pass(struct cuda_backend *cb, int n, int step)
{
	for (int i = 0; i < n; i++)
		launch(cb, i % 4, 1 + i % 3, i, i % 10 == 9 ? step : 7);
	end_pass(cb);
}

static void test_graphs_off(void)
{
	struct cuda_backend *cb = backend(false);

	mock_reset();
	for (int p = 0; p < 3; p++)
		pattern_pass(cb, 150, p);
	check_trace("graphs off");
	CHECK(mock_counts.launches == 450 && mock_counts.graph_launches == 0,
	      "graphs off: %d launches, %d graph launches", mock_counts.launches,
	      mock_counts.graph_launches);
	backend_free(cb);
}

/* 150 launches: chunks of 16, 64, 64 and 6.  Seen once: eager; twice:
 * built; then replayed, patched where the arguments moved. */
static void test_replay(void)
{
	struct cuda_backend *cb = backend(true);

	mock_reset();
	pattern_pass(cb, 150, 0);
	check_trace("first sight");
	CHECK(mock_counts.launches == 150 && mock_counts.instantiations == 0,
	      "first sight: %d launches, %d graphs", mock_counts.launches,
	      mock_counts.instantiations);
	pattern_pass(cb, 150, 0);
	check_trace("second sight");
	CHECK(mock_counts.instantiations == 4 && mock_counts.graph_launches == 4,
	      "second sight: %d graphs built, %d launched", mock_counts.instantiations,
	      mock_counts.graph_launches);
	for (int p = 1; p <= 5; p++) {
		pattern_pass(cb, 150, p % 2 ? 0 : p);
		check_trace("replay");
	}
	CHECK(mock_counts.launches == 150 && mock_counts.instantiations == 4 &&
	      mock_counts.graph_launches == 24, "replays: %d launches, %d graphs, %d graph launches",
	      mock_counts.launches, mock_counts.instantiations, mock_counts.graph_launches);
	/* passes 1, 3, 5 as built (0); 2 and 4 move 15 nodes, and the pass
	 * after each moves them back */
	CHECK(mock_counts.set_params == 4 * 15, "replays: %d nodes patched, want %d",
	      mock_counts.set_params, 4 * 15);
	CHECK(cb->rec.n_replayed == 20 && cb->rec.n_built == 4 && cb->rec.n_eager == 4,
	      "counts: %llu replayed, %llu built, %llu eager",
	      (unsigned long long)cb->rec.n_replayed, (unsigned long long)cb->rec.n_built,
	      (unsigned long long)cb->rec.n_eager);
	backend_free(cb);
}

/* A copy ends the chunk before it and runs in its place; a pass whose
 * shape changes in one chunk replays the others. */
static void test_copies_and_shapes(void)
{
	struct cuda_backend *cb = backend(true);

	mock_reset();
	for (int p = 0; p < 4; p++) {
		for (int i = 0; i < 40; i++) {
			if (i == 20)
				copy(cb, 8 + (size_t)p % 2);
			launch(cb, i % 4, 2, i, p);
		}
		end_pass(cb);
		check_trace("copy mid-pass");
	}
	/* chunks [0, 16) [16, 20) | copy | [20, 40): eager, built, then
	 * replayed with every node patched (its b is the pass) */
	CHECK(mock_counts.launches == 40 && mock_counts.instantiations == 3 &&
	      mock_counts.set_params == 2 * 40, "copies: %d eager launches, %d graphs, %d patches",
	      mock_counts.launches, mock_counts.instantiations, mock_counts.set_params);
	for (int p = 0; p < 3; p++) {
		for (int i = 0; i < 100; i++)
			launch(cb, 1, i == 70 && p == 2 ? 9 : 3, i, 0);
		end_pass(cb);
		check_trace("a shape that changes");
	}
	/* [0, 16) [16, 80) [80, 100): eager, built; the third pass's second
	 * chunk has a new grid and runs eagerly, the others replay */
	CHECK(mock_counts.launches == 40 + 100 + 64 && mock_counts.instantiations == 6,
	      "shapes: %d eager launches, %d graphs", mock_counts.launches,
	      mock_counts.instantiations);
	backend_free(cb);
}

/* More shapes than CU_GRAPHS: the least recently used go, each only after
 * the stream drained (the mock counts a fault otherwise). */
static void test_eviction(void)
{
	struct cuda_backend *cb = backend(true);

	mock_reset();
	for (int s = 0; s < 3 * CU_GRAPHS; s++) {
		for (int twice = 0; twice < 3; twice++) {
			for (int i = 0; i < 5; i++)
				launch(cb, i % 4, 100 + (unsigned)s, i, s);
			/* no end_pass: the next shape's graph is built while
			 * this one's launch may still run */
			cu_flush(cb);
			cu_rec_idle(cb);
		}
	}
	cudaStreamSynchronize(cb->stream);
	check_trace("eviction");
	CHECK(mock_counts.execs_live <= CU_GRAPHS, "%d instances kept, at most %d",
	      mock_counts.execs_live, CU_GRAPHS);
	backend_free(cb);
}

/* *fail set after `before` passes (1: the next pass builds; 2: it replays):
 * that chunk runs eagerly and the backend goes on without graphs, nothing
 * lost. */
static void graphs_off_after(int *fail, int before, const char *name)
{
	struct cuda_backend *cb = backend(true);

	mock_reset();
	for (int p = 0; p < before; p++)
		pattern_pass(cb, 100, 0);
	*fail = 1;
	pattern_pass(cb, 100, 1);
	pattern_pass(cb, 100, 2);
	check_trace(name);
	CHECK(!cb->failed && !cb->rec.on, "%s: failed %d, graphs %d", name, cb->failed,
	      cb->rec.on);
	backend_free(cb);
}

/* A graph that cannot be built or launched: graphs off from then on.  A
 * patch that fails: that chunk runs eagerly, and is built again later. */
static void test_failures(void)
{
	struct cuda_backend *cb = backend(true);

	mock_reset();
	pattern_pass(cb, 100, 0);
	pattern_pass(cb, 100, 0);
	pattern_pass(cb, 100, 1);
	mock_fail_set_params = 1;
	pattern_pass(cb, 100, 2);
	check_trace("a failed patch");
	CHECK(!cb->failed && cb->rec.on, "a failed patch failed the backend or graphs");
	backend_free(cb);

	graphs_off_after(&mock_fail_instantiate, 1, "a failed build");
	graphs_off_after(&mock_fail_launch, 2, "a failed graph launch");

	/* A failed backend drops what it recorded: the pass reports the error. */
	cb = backend(true);
	mock_reset();
	for (int i = 0; i < 5; i++)
		launch(cb, 0, 1, i, 0);
	cu_fail(cb, "an op failed");
	CHECK(!cu_flush(cb), "flush of a failed backend succeeded");
	CHECK(mock_n == 0, "a failed backend ran %d nodes", mock_n);
	n_asked = 0;
	cb->failed = false;
	backend_free(cb);
}

int main(void)
{
	test_graphs_off();
	test_replay();
	test_copies_and_shapes();
	test_eviction();
	test_failures();
	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("graph recorder: every pass ran as asked\n");
	return 0;
}
