/* Creating a backend from a device name, as --device takes it. */
#ifndef EXL_BACKEND_SELECT_H
#define EXL_BACKEND_SELECT_H

#include <stddef.h>

#include "kernels/backend.h"

/* spec: "cpu" (n_threads workers, 0 = one per core), "cuda" (device 0) or
 * "cuda:N".  0 with *out set, or -1 with a message (an unknown name, a bad
 * device number, no CUDA device, a build without CUDA ...). */
int exl_backend_create_by_name(const char *spec, int n_threads, struct exl_backend **out,
			       char *err, size_t errlen);

/* Why the last download/sync (or upload, alloc, set_batch) of be failed, or
 * NULL when it did not; a download or sync that succeeds clears it.  Only
 * the CUDA backend queues ops and so reports failures late; for the CPU
 * backend this is always NULL. */
const char *exl_backend_error(const struct exl_backend *be);

#endif
