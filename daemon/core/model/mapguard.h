/* Guarded file mappings: a model's weights are an mmap of its GGUF, and a
 * file truncated under a mapping (`cp other.gguf model.gguf` over a loaded
 * model) makes the next read of a page past the new end raise SIGBUS, on
 * whichever thread reads it: the engine, a worker of the CPU pool, a
 * loader.  The daemon must not die of that.
 *
 * A SIGBUS whose address lies in a guarded mapping is absorbed: the rest
 * of the mapping from the faulting page on is replaced by zero pages, the
 * mapping's flag is set, and the read goes on (and reads zeros).  The model
 * checks its flag after each forward pass and fails it with a message
 * (model.c), so its jobs end with an error and everything else runs on.  A
 * SIGBUS anywhere else is not ours: the default action (a core dump) runs
 * as before.
 *
 * The handler calls mmap(), which POSIX does not list as async-signal-safe;
 * on Linux it is the bare system call, and the fault being handled is a
 * synchronous one in a plain memory read, not inside libc.
 */
#ifndef EXL_MAPGUARD_H
#define EXL_MAPGUARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

/* At most this many mappings are guarded at once (models loaded). */
#define EXL_MAPGUARD_SLOTS 128

/* Guards [base, base + len); *fault is set to 1 when a SIGBUS hits it.
 * Installs the handler on first use.  -1 with a message when no slot is
 * free or the handler cannot be installed. */
int exl_mapguard_add(const void *base, size_t len, atomic_int *fault, char *err, size_t errlen);

/* Stops guarding the mapping at base (before it is unmapped). */
void exl_mapguard_remove(const void *base);

#endif
