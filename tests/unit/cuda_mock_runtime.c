/* A CUDA runtime without a GPU for test_cuda_graph: cuda_mock_runtime.h.
 *
 * "The stream" runs everything at once: a launch, a copy or a graph launch
 * appends what it runs to the trace.  A graph keeps its kernel nodes as
 * added; an instance copies them (cudaGraphExecKernelNodeSetParams changes
 * the instance's copy, as the runtime's does) and a launch of the instance
 * appends its nodes in order.  A launched instance counts as running until
 * the next cudaStreamSynchronize: destroying it before is a fault, since
 * the runtime does not promise it is safe. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda_mock_runtime.h"

#define MOCK_NODES 256

struct CUgraphNode_st {
	const void *fn;
	unsigned grid;
	int a, b;
};

struct CUgraph_st {
	int n;
	struct CUgraphNode_st *nodes[MOCK_NODES];
};

struct CUgraphExec_st {
	int n;
	struct CUgraphNode_st nodes[MOCK_NODES];
	const struct CUgraphNode_st *from[MOCK_NODES];
	int running;
};

struct mock_event mock_trace[MOCK_TRACE_MAX];
int mock_n;
struct mock_counts mock_counts;
int mock_fail_instantiate, mock_fail_set_params, mock_fail_launch;

/* the instances launched since the last synchronization */
static struct CUgraphExec_st *running[4096];
static int n_running;

static void fault(const char *what)
{
	if (!mock_counts.faults++)
		mock_counts.fault = what;
}

static void trace(int kind, const void *fn, unsigned grid, int a, int b, size_t bytes)
{
	struct mock_event *ev;

	if (mock_n >= MOCK_TRACE_MAX) {
		fault("trace full");
		return;
	}
	ev = &mock_trace[mock_n++];
	ev->kind = kind;
	ev->fn = fn;
	ev->grid = grid;
	ev->a = a;
	ev->b = b;
	ev->bytes = bytes;
}

void mock_reset(void)
{
	mock_n = 0;
	memset(&mock_counts, 0, sizeof(mock_counts));
	mock_fail_instantiate = 0;
	mock_fail_set_params = 0;
	mock_fail_launch = 0;
	n_running = 0;
}

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
			     size_t sharedMem, cudaStream_t stream)
{
	(void)blockDim;
	(void)sharedMem;
	(void)stream;
	mock_counts.launches++;
	trace(MOCK_KERNEL, func, gridDim.x, *(const int *)args[0], *(const int *)args[1], 0);
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			    cudaStream_t stream)
{
	(void)kind;
	(void)stream;
	memmove(dst, src, count);
	trace(MOCK_COPY, NULL, 0, 0, 0, count);
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	(void)stream;
	mock_counts.syncs++;
	for (int i = 0; i < n_running; i++)
		running[i]->running = 0;
	n_running = 0;
	return cudaSuccess;
}

cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags)
{
	(void)flags;
	*pGraph = calloc(1, sizeof(**pGraph));
	if (!*pGraph)
		return cudaErrorMemoryAllocation;
	mock_counts.graphs_live++;
	return cudaSuccess;
}

cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
				   const cudaGraphNode_t *pDependencies, size_t numDependencies,
				   const struct cudaKernelNodeParams *pNodeParams)
{
	struct CUgraphNode_st *nd;

	if (graph->n >= MOCK_NODES)
		return cudaErrorInvalidValue;
	/* in stream order: each node after the one added before it */
	if (graph->n ? numDependencies != 1 || pDependencies[0] != graph->nodes[graph->n - 1]
		     : numDependencies != 0)
		fault("a node not chained to the one before it");
	nd = calloc(1, sizeof(*nd));
	if (!nd)
		return cudaErrorMemoryAllocation;
	nd->fn = pNodeParams->func;
	nd->grid = pNodeParams->gridDim.x;
	nd->a = *(const int *)pNodeParams->kernelParams[0];
	nd->b = *(const int *)pNodeParams->kernelParams[1];
	graph->nodes[graph->n++] = nd;
	*pGraphNode = nd;
	return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
				 unsigned long long flags)
{
	struct CUgraphExec_st *ex;

	(void)flags;
	if (mock_fail_instantiate) {
		mock_fail_instantiate = 0;
		return cudaErrorNotSupported;
	}
	ex = calloc(1, sizeof(*ex));
	if (!ex)
		return cudaErrorMemoryAllocation;
	ex->n = graph->n;
	for (int i = 0; i < graph->n; i++) {
		ex->nodes[i] = *graph->nodes[i];
		ex->from[i] = graph->nodes[i];
	}
	mock_counts.instantiations++;
	mock_counts.execs_live++;
	*pGraphExec = ex;
	return cudaSuccess;
}

cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
					     const struct cudaKernelNodeParams *pNodeParams)
{
	if (mock_fail_set_params) {
		mock_fail_set_params = 0;
		return cudaErrorInvalidValue;
	}
	mock_counts.set_params++;
	for (int i = 0; i < hGraphExec->n; i++) {
		if (hGraphExec->from[i] != node)
			continue;
		if (pNodeParams->func != node->fn || pNodeParams->gridDim.x != node->grid)
			fault("a kernel or grid changed by a parameter update");
		hGraphExec->nodes[i].a = *(const int *)pNodeParams->kernelParams[0];
		hGraphExec->nodes[i].b = *(const int *)pNodeParams->kernelParams[1];
		return cudaSuccess;
	}
	fault("a parameter update of a node not in the instance");
	return cudaErrorInvalidValue;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	(void)stream;
	if (mock_fail_launch) {
		mock_fail_launch = 0;
		return cudaErrorLaunchOutOfResources;
	}
	mock_counts.graph_launches++;
	for (int i = 0; i < graphExec->n; i++)
		trace(MOCK_KERNEL, graphExec->nodes[i].fn, graphExec->nodes[i].grid,
		      graphExec->nodes[i].a, graphExec->nodes[i].b, 0);
	if (!graphExec->running && n_running < (int)(sizeof(running) / sizeof(running[0]))) {
		graphExec->running = 1;
		running[n_running++] = graphExec;
	}
	return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
	if (graphExec->running)
		fault("an instance destroyed while it may still run");
	for (int i = 0; i < n_running; i++)
		if (running[i] == graphExec)
			running[i] = running[--n_running];
	free(graphExec);
	mock_counts.execs_live--;
	return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
	for (int i = 0; i < graph->n; i++)
		free(graph->nodes[i]);
	free(graph);
	mock_counts.graphs_live--;
	return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
	return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t error)
{
	return error == cudaSuccess ? "no error" : "mock error";
}

/* What nvcc's host code registers at load: nothing to register here. */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);

void **__cudaRegisterFatBinary(void *fatCubin)
{
	static void *handle;

	(void)fatCubin;
	return &handle;
}

void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
	(void)fatCubinHandle;
}

void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
	(void)fatCubinHandle;
}
