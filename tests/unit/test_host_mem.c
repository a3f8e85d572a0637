/* exl_host_alloc (kernels/cpu/host_mem.h): zeroed, 64-byte aligned blocks
 * of every size, 2 MiB aligned from 2 MiB on, freed without a trace
 * (the sanitizer build checks that); the big ones offered to transparent
 * huge pages, and not with EXLD_HUGEPAGES=0, as the kernel reports it in
 * /proc/self/smaps (THPeligible) where its THP mode lets it say. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/host_mem.h"
#include "tests/common/check.h"

/* The system's THP mode: "always", "madvise", "never", or "" if unknown. */
static void thp_mode(char *mode, size_t len)
{
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	char line[128];

	mode[0] = '\0';
	if (!f)
		return;
	if (fgets(line, sizeof(line), f)) {
		char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;

		if (a && b && (size_t)(b - a - 1) < len) {
			memcpy(mode, a + 1, (size_t)(b - a - 1));
			mode[b - a - 1] = '\0';
		}
	}
	fclose(f);
}

/* The THPeligible value of the mapping that starts at p, or -1. */
static int thp_eligible(const void *p)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in = 0, v = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
			in = lo == (unsigned long)(uintptr_t)p;
			continue;
		}
		if (in && sscanf(line, "THPeligible: %d", &v) == 1)
			break;
	}
	fclose(f);
	return v;
}

static void test_sizes(void)
{
	static const size_t sizes[] = { 1, 63, 64, 4097, EXL_HOST_HUGE_BYTES - 1, EXL_HOST_HUGE_BYTES,
					EXL_HOST_HUGE_BYTES + 1, 5 * EXL_HOST_HUGE_BYTES + 123, 64u << 20 };

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		const size_t n = sizes[i];
		uint8_t *p = exl_host_alloc(n);
		size_t nonzero = 0;

		CHECK(p != NULL, "%zu bytes", n);
		if (!p)
			continue;
		CHECK((uintptr_t)p % 64 == 0, "%zu bytes at %p", n, (void *)p);
		if (n >= EXL_HOST_HUGE_BYTES)
			CHECK((uintptr_t)p % EXL_HOST_HUGE_BYTES == 0, "%zu bytes at %p: not 2 MiB aligned", n,
			      (void *)p);
		for (size_t k = 0; k < n; k++)
			nonzero += p[k] != 0;
		CHECK(nonzero == 0, "%zu bytes: %zu not zero", n, nonzero);
		memset(p, 0xa5, n); /* every byte is ours */
		exl_host_free(p, n);
	}
	CHECK(exl_host_alloc(0) == NULL, "0 bytes");
	CHECK(exl_host_alloc(SIZE_MAX) == NULL, "SIZE_MAX bytes");
	exl_host_free(NULL, 123);
}

/* With want_hint, a big block is eligible where the mode is "madvise" or
 * "always"; without, only under "always". */
static void test_hint(int want_hint, const char *mode)
{
	const size_t n = 8 * EXL_HOST_HUGE_BYTES;
	uint8_t *p;
	int e, want;

	if (want_hint)
		unsetenv("EXLD_HUGEPAGES");
	else
		setenv("EXLD_HUGEPAGES", "0", 1);
	CHECK(exl_host_huge_pages() == want_hint, "exl_host_huge_pages, mode %s, EXLD_HUGEPAGES %s", mode,
	      want_hint ? "unset" : "0");
	p = exl_host_alloc(n);
	CHECK(p != NULL);
	if (!p)
		return;
	memset(p, 1, n);
	e = thp_eligible(p);
	want = !strcmp(mode, "always") || (want_hint && !strcmp(mode, "madvise"));
	if (e < 0)
		printf("skip: /proc/self/smaps has no THPeligible for the block (an old kernel)\n");
	else
		CHECK(e == want, "THP mode %s, EXLD_HUGEPAGES %s: THPeligible %d, want %d", mode,
		      want_hint ? "unset" : "0", e, want);
	exl_host_free(p, n);
	unsetenv("EXLD_HUGEPAGES");
}

int main(void)
{
	char mode[32];

	test_sizes();
	thp_mode(mode, sizeof(mode));
	if (!strcmp(mode, "madvise") || !strcmp(mode, "always")) {
		test_hint(1, mode);
		test_hint(0, mode);
	} else {
		CHECK(!exl_host_huge_pages(), "THP mode '%s' but huge pages said to be on", mode);
		printf("skip: transparent huge pages are '%s' here: no hint to check\n",
		       mode[0] ? mode : "absent");
	}
	printf("%d checks, %d failed\n", check_count, check_failures);
	return check_failures ? 1 : 0;
}
