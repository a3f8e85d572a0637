/* The recorder: a pass's launches go to the stream as CUDA graphs, a chunk
 * at a time (cuda_internal.h says why).
 *
 * A chunk is the next CU_CHUNK nodes recorded since the stream was last
 * idle, or fewer when an op must reach the stream first (a cuBLAS call, a
 * wait, a copy).  Chunks are keyed by their position in the pass and their
 * kernels' shapes (kernel, grid, block), so a decode step
 * finds the graphs of the step before it.  A chunk seen for the first time
 * is launched node by node, since most shapes of a prefill never come back;
 * the second time it is built into a graph; after that the graph is
 * replayed, each node whose arguments changed patched first (a new split
 * length of attention, a scratch buffer that moved).  Graph and eager runs
 * launch the same kernels with the same arguments in the same order, so
 * their results are the same to the bit.
 *
 * Graphs hold kernels only.  A memcpy node holds on to the allocations it
 * was given: with its buffer freed and another allocated at the same
 * address (test_cuda_ops does that between cases, a daemon when it reloads
 * a model), launching the graph crashed the process inside the driver (an
 * H200, driver 580.159).  A kernel's pointers are only argument bytes.  So
 * copies reach the stream themselves, after what was recorded before them:
 * a decode step has one, the token ids, at its start. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

static bool launch_eager(struct cuda_backend *cb, const struct cu_node *nd, const char *what)
{
	void *args[CU_MAX_ARGS];

	for (unsigned i = 0; i < nd->n_args; i++)
		args[i] = (void *)(nd->args + nd->arg_off[i]);
	return cu_ok(cb, cudaLaunchKernel(nd->fn, nd->grid, nd->block, args, 0, cb->stream),
		     what);
}

bool cu_submit(struct cuda_backend *cb, const struct cu_node *nd, const char *what)
{
	struct cu_recorder *rec = &cb->rec;

	if (!rec->on)
		return launch_eager(cb, nd, what);
	rec->nodes[rec->n++] = *nd;
	if (rec->n >= (rec->chunk ? CU_CHUNK : CU_CHUNK_FIRST))
		return cu_flush(cb);
	return true;
}

bool cu_copy(struct cuda_backend *cb, void *dst, const void *src, size_t bytes,
	     cudaMemcpyKind dir, const char *what)
{
	return cu_flush(cb) &&
	       cu_ok(cb, cudaMemcpyAsync(dst, src, bytes, dir, cb->stream), what);
}

static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v;
	h *= 0x100000001b3ull;
	return h ^ (h >> 29);
}

static uint64_t shape_key(unsigned chunk, const struct cu_node *nodes, int n)
{
	uint64_t h = mix(0xcbf29ce484222325ull, chunk);

	h = mix(h, (uint64_t)n);
	for (int i = 0; i < n; i++) {
		const struct cu_node *nd = &nodes[i];

		h = mix(h, (uint64_t)(uintptr_t)nd->fn);
		h = mix(h, ((uint64_t)nd->grid.x << 32) ^ ((uint64_t)nd->grid.y << 16) ^ nd->grid.z);
		h = mix(h, ((uint64_t)nd->block.x << 32) ^ ((uint64_t)nd->block.y << 16) ^
			   nd->block.z);
	}
	return h;
}

static bool same_shape(const struct cu_node *a, const struct cu_node *b)
{
	return a->fn == b->fn && a->grid.x == b->grid.x && a->grid.y == b->grid.y &&
	       a->grid.z == b->grid.z && a->block.x == b->block.x && a->block.y == b->block.y &&
	       a->block.z == b->block.z && a->n_args == b->n_args;
}

static bool same_args(const struct cu_node *a, const struct cu_node *b)
{
	return a->args_len == b->args_len && !memcmp(a->args, b->args, a->args_len);
}

static void entry_clear(struct cu_graph_entry *e)
{
	if (e->exec)
		cudaGraphExecDestroy(e->exec);
	if (e->graph)
		cudaGraphDestroy(e->graph);
	free(e->nodes);
	free(e->handles);
	memset(e, 0, sizeof(*e));
}

/* entry_clear for an entry whose graph may still be queued or running: the
 * runtime does not say that destroying it then is safe, so wait (rare: the
 * least recently used of CU_GRAPHS chunks, or a patch that failed). */
static bool entry_drop(struct cuda_backend *cb, struct cu_graph_entry *e)
{
	bool ok = !e->exec || cu_ok(cb, cudaStreamSynchronize(cb->stream), "graph eviction");

	entry_clear(e);
	return ok;
}

static struct cu_graph_entry *entry_find(struct cu_recorder *rec, uint64_t key, unsigned chunk,
					 const struct cu_node *nodes, int n)
{
	for (int i = 0; i < CU_GRAPHS; i++) {
		struct cu_graph_entry *e = &rec->graphs[i];
		int k;

		if (!e->nodes || e->key != key || e->chunk != chunk || e->n != n)
			continue;
		for (k = 0; k < n && same_shape(&e->nodes[k], &nodes[k]); k++)
			;
		if (k == n)
			return e;
	}
	return NULL;
}

static struct cu_graph_entry *entry_oldest(struct cu_recorder *rec)
{
	struct cu_graph_entry *old = &rec->graphs[0];

	for (int i = 0; i < CU_GRAPHS; i++) {
		struct cu_graph_entry *e = &rec->graphs[i];

		if (!e->nodes)
			return e;
		if (e->last_use < old->last_use)
			old = e;
	}
	return old;
}

static void kernel_params(const struct cu_node *nd, void **args, cudaKernelNodeParams *kp)
{
	for (unsigned i = 0; i < nd->n_args; i++)
		args[i] = (void *)(nd->args + nd->arg_off[i]);
	*kp = cudaKernelNodeParams();
	kp->func = (void *)nd->fn;
	kp->gridDim = nd->grid;
	kp->blockDim = nd->block;
	kp->sharedMemBytes = 0;
	kp->kernelParams = args;
	kp->extra = NULL;
}

/* e's graph from nodes, one after the other as the stream would run them. */
static cudaError_t entry_build(struct cu_graph_entry *e, const struct cu_node *nodes, int n)
{
	cudaError_t err;

	err = cudaGraphCreate(&e->graph, 0);
	for (int i = 0; i < n && err == cudaSuccess; i++) {
		const struct cu_node *nd = &nodes[i];
		const cudaGraphNode_t *dep = i ? &e->handles[i - 1] : NULL;
		void *args[CU_MAX_ARGS];
		cudaKernelNodeParams kp;

		kernel_params(nd, args, &kp);
		err = cudaGraphAddKernelNode(&e->handles[i], e->graph, dep, i ? 1 : 0, &kp);
	}
	if (err == cudaSuccess)
		err = cudaGraphInstantiate(&e->exec, e->graph, 0);
	return err;
}

/* Brings e's instance to nodes' arguments. */
static cudaError_t entry_patch(struct cu_recorder *rec, struct cu_graph_entry *e,
			       const struct cu_node *nodes)
{
	for (int i = 0; i < e->n; i++) {
		const struct cu_node *nd = &nodes[i];
		void *args[CU_MAX_ARGS];
		cudaKernelNodeParams kp;
		cudaError_t err;

		if (same_args(&e->nodes[i], nd))
			continue;
		kernel_params(nd, args, &kp);
		err = cudaGraphExecKernelNodeSetParams(e->exec, e->handles[i], &kp);
		if (err != cudaSuccess)
			return err;
		e->nodes[i] = *nd;
		rec->n_patched_nodes++;
	}
	return cudaSuccess;
}

static bool run_eager(struct cuda_backend *cb, const struct cu_node *nodes, int n)
{
	for (int i = 0; i < n; i++)
		if (!launch_eager(cb, &nodes[i], "launch"))
			return false;
	return true;
}

bool cu_flush(struct cuda_backend *cb)
{
	struct cu_recorder *rec = &cb->rec;
	const int n = rec->n;
	const unsigned chunk = rec->chunk;
	struct cu_graph_entry *e;
	uint64_t key;
	cudaError_t err;

	if (!n)
		return !cb->failed;
	rec->n = 0;
	rec->chunk++;
	if (cb->failed)
		return false;
	rec->n_nodes += (uint64_t)n;
	key = shape_key(chunk, rec->nodes, n);
	e = entry_find(rec, key, chunk, rec->nodes, n);
	if (!e) {
		/* First sight: remember the shapes, run it as it is. */
		e = entry_oldest(rec);
		if (!entry_drop(cb, e))
			return false;
		e->nodes = (struct cu_node *)malloc((size_t)n * sizeof(*e->nodes));
		e->handles = (cudaGraphNode_t *)calloc((size_t)n, sizeof(*e->handles));
		if (e->nodes && e->handles) {
			memcpy(e->nodes, rec->nodes, (size_t)n * sizeof(*e->nodes));
			e->key = key;
			e->chunk = chunk;
			e->n = n;
			e->last_use = ++rec->clock;
		} else {
			entry_clear(e);
		}
		rec->n_eager++;
		return run_eager(cb, rec->nodes, n);
	}
	e->last_use = ++rec->clock;
	if (!e->exec) {
		err = entry_build(e, rec->nodes, n);
		if (err != cudaSuccess) {
			/* Graphs are an optimisation: without them the same
			 * kernels run launch by launch. */
			cudaGetLastError();
			entry_clear(e);
			rec->on = false;
			rec->n_eager++;
			return run_eager(cb, rec->nodes, n);
		}
		memcpy(e->nodes, rec->nodes, (size_t)n * sizeof(*e->nodes));
		rec->n_built++;
	} else {
		err = entry_patch(rec, e, rec->nodes);
		if (err != cudaSuccess) {
			cudaGetLastError();
			if (!entry_drop(cb, e))
				return false;
			rec->n_eager++;
			return run_eager(cb, rec->nodes, n);
		}
		rec->n_replayed++;
	}
	err = cudaGraphLaunch(e->exec, cb->stream);
	if (err == cudaSuccess)
		return true;
	/* As when a build fails: on without graphs.  An error that broke the
	 * context fails the eager launches too, and so the pass. */
	cudaGetLastError();
	if (!entry_drop(cb, e))
		return false;
	rec->on = false;
	rec->n_eager++;
	return run_eager(cb, rec->nodes, n);
}

void cu_rec_idle(struct cuda_backend *cb)
{
	cb->rec.n = 0;
	cb->rec.chunk = 0;
}

void cu_rec_free(struct cuda_backend *cb)
{
	struct cu_recorder *rec = &cb->rec;

	if (getenv("EXLD_CUDA_GRAPH_STATS"))
		fprintf(stderr, "exld cuda graphs: %s, %llu nodes in %llu chunks: %llu eager, "
			"%llu built, %llu replayed (%llu nodes patched)\n",
			rec->on ? "on" : "off", (unsigned long long)rec->n_nodes,
			(unsigned long long)(rec->n_eager + rec->n_built + rec->n_replayed),
			(unsigned long long)rec->n_eager, (unsigned long long)rec->n_built,
			(unsigned long long)rec->n_replayed,
			(unsigned long long)rec->n_patched_nodes);
	for (int i = 0; i < CU_GRAPHS; i++)
		entry_clear(&rec->graphs[i]);
}
