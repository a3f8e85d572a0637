/* The few CUDA runtime calls kernels/cuda/graph.cu makes, without a GPU,
 * for test_cuda_graph (kernels/cuda/graph_test.cu): what reaches "the
 * stream" is written to a trace in the order the device would run it, so
 * the test can compare it with what the ops asked for.  Launched kernels
 * must take two ints, which the trace keeps. */
#ifndef EXL_CUDA_MOCK_RUNTIME_H
#define EXL_CUDA_MOCK_RUNTIME_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum mock_kind { MOCK_KERNEL = 1, MOCK_COPY = 2 };

struct mock_event {
	int kind;
	const void *fn;   /* kernel */
	unsigned grid;    /* its grid.x */
	int a, b;         /* its two arguments */
	size_t bytes;     /* copy */
};

#define MOCK_TRACE_MAX 100000

extern struct mock_event mock_trace[MOCK_TRACE_MAX];
extern int mock_n;

/* Counts of calls, and faults: a graph destroyed while a launch of it may
 * still run, a node added out of stream order, a trace overflow. */
struct mock_counts {
	int launches;      /* cudaLaunchKernel */
	int graph_launches;
	int instantiations;
	int set_params;
	int syncs;
	int graphs_live;   /* created and not destroyed */
	int execs_live;
	int faults;
	const char *fault; /* the first fault */
};

extern struct mock_counts mock_counts;
/* Make the next cudaGraphInstantiate / cudaGraphExecKernelNodeSetParams /
 * cudaGraphLaunch fail (once each). */
extern int mock_fail_instantiate, mock_fail_set_params, mock_fail_launch;

void mock_reset(void);

#ifdef __cplusplus
}
#endif

#endif
