/* Host memory for what the CPU backend streams: the weights it copies at
 * load (repack) and the buffers ops->alloc hands out (the KV cache among
 * them).
 *
 * A block of 2 MiB or more is mapped on its own, 2 MiB aligned, and
 * offered to transparent huge pages with MADV_HUGEPAGE ("madvise" is
 * Debian's default setting, under which a plain allocation gets none).
 * Decode streams each weight once per token; with 4 KiB pages the
 * hardware prefetchers stop at every page boundary and each page costs a
 * TLB walk, with 2 MiB pages neither (docs/cpu-backend.md has the
 * figures).  EXLD_HUGEPAGES=0 leaves the pages at 4 KiB.  Smaller blocks
 * come from malloc, 64-byte aligned.  Memory from either is zeroed.
 */
#ifndef EXL_CPU_HOST_MEM_H
#define EXL_CPU_HOST_MEM_H

#include <stdbool.h>
#include <stddef.h>

#define EXL_HOST_HUGE_BYTES ((size_t)2 << 20)

/* bytes (> 0) of zeroed memory, 64-byte aligned; NULL when out of memory. */
void *exl_host_alloc(size_t bytes);

/* Frees p, from exl_host_alloc(bytes) with the same bytes; NULL is ignored. */
void exl_host_free(void *p, size_t bytes);

/* Whether big blocks get huge pages here: EXLD_HUGEPAGES is not 0 and the
 * system's THP mode is "always" or "madvise" (read once). */
bool exl_host_huge_pages(void);

#endif
