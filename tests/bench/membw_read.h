/* Read loops of bench_membw, one per instruction set, each compiled with
 * its own -m flags (tests/meson.build) like the matmul kernels.  Each sums
 * n bytes at p (n a multiple of 256) with full-width loads and a T0
 * prefetch pf bytes ahead, one per 64-byte line, as the decode kernels do,
 * and returns the sum so the loads cannot be dropped. */
#ifndef EXL_BENCH_MEMBW_READ_H
#define EXL_BENCH_MEMBW_READ_H

#include <stddef.h>
#include <stdint.h>

uint64_t membw_read_avx2(const uint8_t *p, size_t n, size_t pf);
uint64_t membw_read_avx512(const uint8_t *p, size_t n, size_t pf);

#endif
