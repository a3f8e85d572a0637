/* Host memory in huge pages where it pays (host_mem.h). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/cpu/host_mem.h"

static size_t page_round(size_t bytes)
{
	return (bytes + 4095) & ~(size_t)4095;
}

static int huge_wanted(void)
{
	const char *env = getenv("EXLD_HUGEPAGES");

	return !(env && !strcmp(env, "0"));
}

void *exl_host_alloc(size_t bytes)
{
	if (!bytes || bytes > SIZE_MAX - 2 * EXL_HOST_HUGE_BYTES)
		return NULL;
	if (bytes < EXL_HOST_HUGE_BYTES) {
		void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);

		if (p)
			memset(p, 0, bytes);
		return p;
	}
	/* over-map by 2 MiB, then give back the head and tail around the
	 * aligned block; anonymous pages read as zero */
	const size_t len = page_round(bytes), map = len + EXL_HOST_HUGE_BYTES;
	uint8_t *m = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		return NULL;
	uint8_t *p = (uint8_t *)(((uintptr_t)m + EXL_HOST_HUGE_BYTES - 1) & ~(uintptr_t)(EXL_HOST_HUGE_BYTES - 1));
	const size_t head = (size_t)(p - m), tail = map - head - len;

	if (head)
		munmap(m, head);
	if (tail)
		munmap(p + len, tail);
	/* a hint: refused (THP "never", an old kernel), the pages stay small */
	if (huge_wanted())
		madvise(p, len, MADV_HUGEPAGE);
	return p;
}

static bool thp_mode_ok;

static void thp_mode_read(void)
{
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	char line[128] = "";

	if (f) {
		if (!fgets(line, sizeof(line), f))
			line[0] = '\0';
		fclose(f);
	}
	thp_mode_ok = strstr(line, "[always]") || strstr(line, "[madvise]");
}

bool exl_host_huge_pages(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, thp_mode_read);
	return thp_mode_ok && huge_wanted();
}

void exl_host_free(void *p, size_t bytes)
{
	if (!p)
		return;
	if (bytes < EXL_HOST_HUGE_BYTES)
		free(p);
	else
		munmap(p, page_round(bytes));
}
