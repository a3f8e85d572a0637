/* with-kernels SET COMMAND [ARG...]: runs COMMAND with EXLD_CPU_KERNELS=SET,
 * or exits 77 (meson's "skipped") saying why when this CPU cannot run SET.
 *
 * exld falls back to the best set when EXLD_CPU_KERNELS names one the CPU
 * lacks, which a test run under it would not notice: it would pass having
 * tested another set.  meson registers every kernel-dependent test once per
 * set through this, so an AVX2 machine runs scalar and avx2 and reports
 * the AVX-512 ones skipped, and an AVX-512 machine runs all of them.
 *
 * with-kernels --list: the sets this CPU runs, one line, for the logs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/matmul.h"

#define SKIP_STATUS 77

static int known(const char *name)
{
	for (size_t i = 0; exl_cpu_kernels_set(i); i++)
		if (!strcmp(exl_cpu_kernels_set(i), name))
			return 1;
	return 0;
}

static void list(void)
{
	const char *sep = "", *name;

	printf("CPU kernel sets run:");
	for (size_t i = 0; (name = exl_cpu_kernels_set(i)); i++)
		if (exl_cpu_kernels_available(name))
			printf(" %s", name);
	printf("; skipped (the CPU lacks their instructions):");
	for (size_t i = 0; (name = exl_cpu_kernels_set(i)); i++) {
		if (!exl_cpu_kernels_available(name)) {
			printf("%s %s", sep, name);
			sep = ",";
		}
	}
	if (!*sep)
		printf(" none");
	printf("\n");
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--list")) {
		list();
		return 0;
	}
	if (argc < 3) {
		fprintf(stderr, "usage: with-kernels SET COMMAND [ARG...] | --list\n");
		return 2;
	}
	if (!known(argv[1])) {
		fprintf(stderr, "with-kernels: unknown kernel set '%s'\n", argv[1]);
		return 2;
	}
	if (!exl_cpu_kernels_available(argv[1])) {
		printf("skipped: kernel set %s: this CPU lacks its instructions (or the OS does not enable them)\n", argv[1]);
		return SKIP_STATUS;
	}
	if (setenv("EXLD_CPU_KERNELS", argv[1], 1)) {
		fprintf(stderr, "with-kernels: setenv: %s\n", strerror(errno));
		return 2;
	}
	printf("kernel set %s\n", argv[1]);
	fflush(stdout);
	execvp(argv[2], argv + 2);
	fprintf(stderr, "with-kernels: %s: %s\n", argv[2], strerror(errno));
	return 2;
}
