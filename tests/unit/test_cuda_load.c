/* Loading the CUDA backend module (kernels/cuda_module_load.c), one case per
 * process since the first attempt's outcome holds for the process:
 *
 *   lazy MODULE        nothing of CUDA is mapped until the first CUDA call,
 *                      which maps the module and cudart; the module's
 *                      symbols stay out of the global scope; the calls give
 *                      a device or "no CUDA device: ...", which names the
 *                      missing driver library when there is none
 *   threads MODULE     first use from many threads at once: one outcome
 *   buildtree MODULE   without $EXLD_CUDA_MODULE a program in the build tree
 *                      finds the build tree's module (MODULE)
 *   missing MODULE     $EXLD_CUDA_MODULE names no file: "not found", and it
 *                      stays so after the variable names MODULE
 *   relative           $EXLD_CUDA_MODULE without a '/': refused
 *   notelf FILE        a file that is not a shared object: dlerror's text
 *   nosym FAKE         a shared object without the entry point
 *   badabi FAKE        an entry point with another ABI number
 *   badversion FAKE    a module from another exld version
 *   empty FAKE         a table without functions
 *   none               a build without CUDA says so
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/backend_select.h"
#include "kernels/cuda/backend_cuda.h"
#include "tests/common/check.h"

static const char no_device[] = "no CUDA device: ";
static const char no_driver[] = "no CUDA device: no NVIDIA driver found (libcuda.so.1 not loadable: ";

/* On a machine without the NVIDIA driver library the message must say so,
 * not repeat cudart's "driver version is insufficient". */
static bool driver_missing(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!h)
		return true;
	dlclose(h);
	return false;
}

/* Whether a line of /proc/self/maps names a file containing `what`. */
static bool mapped(const char *what)
{
	char line[PATH_MAX + 256];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

static bool starts_with(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

/* Every CUDA entry point, once the module is in: a device, or each call
 * failing with "no CUDA device: ...". */
static int check_loaded_calls(void)
{
	struct exl_backend *be = NULL;
	char err[512], name[128];
	size_t fr = 1, tot = 1;
	int n, major = -1, minor = -1;

	err[0] = '\0';
	n = exl_cuda_device_count(err, sizeof(err));
	if (n < 0) {
		REQUIRE(starts_with(err, no_device), "device count: \"%s\"", err);
		if (driver_missing())
			REQUIRE(starts_with(err, no_driver) && !strstr(err, "insufficient"),
				"no driver library, but the message is \"%s\"", err);
		err[0] = '\0';
		REQUIRE(exl_backend_create_by_name("cuda:0", 0, &be, err, sizeof(err)) == -1 &&
			!be && starts_with(err, no_device), "create: \"%s\"", err);
		err[0] = '\0';
		REQUIRE(exl_cuda_mem_info(0, &fr, &tot, err, sizeof(err)) == -1 && fr == 0 &&
			tot == 0 && starts_with(err, no_device), "mem_info: \"%s\"", err);
		err[0] = '\0';
		REQUIRE(exl_cuda_device_name(0, name, sizeof(name), &major, &minor, err,
					   sizeof(err)) == -1 && name[0] == '\0' &&
			major == 0 && minor == 0 && starts_with(err, no_device),
			"device_name: \"%s\"", err);
		printf("module loaded; no device: %s\n", err);
		return 0;
	}
	REQUIRE(n >= 1, "device count %d", n);
	REQUIRE(exl_cuda_device_name(0, name, sizeof(name), &major, &minor, err,
				   sizeof(err)) == 0 && major > 0, "device_name: %s", err);
	REQUIRE(exl_cuda_mem_info(0, &fr, &tot, err, sizeof(err)) == 0 && tot > 0 && fr <= tot,
		"mem_info: %s", err);
	REQUIRE(exl_backend_create_by_name("cuda:0", 0, &be, err, sizeof(err)) == 0 && be,
		"create: %s", err);
	REQUIRE(!strcmp(be->ops->name, "cuda"), "backend name %s", be->ops->name);
	REQUIRE(exl_backend_cuda_device(be) == 0, "device %d", exl_backend_cuda_device(be));
	REQUIRE(exl_backend_cuda_error(be) == NULL, "fresh backend has error %s",
		exl_backend_cuda_error(be));
	REQUIRE(exl_backend_error(be) == NULL, "fresh backend has error %s", exl_backend_error(be));
	be->ops->destroy(be);
	printf("module loaded; %d device(s), 0: %s (%d.%d)\n", n, name, major, minor);
	return 0;
out:
	return 1;
}

static int case_lazy(const char *module)
{
	char err[512];
	struct exl_backend *cpu;

	setenv("EXLD_CUDA_MODULE", module, 1);
	REQUIRE(!mapped("libexld-cuda") && !mapped("libcudart") && !mapped("libcublas"),
		"CUDA mapped before any CUDA call");

	/* CPU work and CUDA queries about a CPU backend load nothing. */
	cpu = exl_backend_cpu_create(1, err, sizeof(err));
	REQUIRE(cpu, "cpu backend: %s", err);
	REQUIRE(exl_backend_cuda_error(cpu) == NULL, "cuda error of a cpu backend");
	REQUIRE(exl_backend_cuda_device(cpu) == -1, "cuda device of a cpu backend");
	REQUIRE(exl_backend_cuda_device(NULL) == -1, "cuda device of NULL");
	cpu->ops->destroy(cpu);
	REQUIRE(!mapped("libexld-cuda") && !mapped("libcudart"),
		"CUDA mapped by CPU-only calls");

	if (check_loaded_calls())
		return 1;
	REQUIRE(mapped("libexld-cuda.so") && mapped("libcudart") && mapped("libcublas"),
		"module or cudart/cublas not mapped after the first CUDA call");
	/* RTLD_LOCAL, and only the entry point exported in any case. */
	REQUIRE(dlsym(RTLD_DEFAULT, "exl_cuda_module_v2") == NULL,
		"the module's entry point is in the global scope");
	return 0;
out:
	return 1;
}

struct thread_result {
	int rc;
	char err[512];
};

static pthread_barrier_t start_line;

static void *first_use(void *arg)
{
	struct thread_result *r = arg;

	r->err[0] = '\0';
	pthread_barrier_wait(&start_line);
	r->rc = exl_cuda_device_count(r->err, sizeof(r->err));
	return NULL;
}

static int case_threads(const char *module)
{
	enum { N = 8 };
	struct thread_result res[N];
	pthread_t th[N];
	int i;

	setenv("EXLD_CUDA_MODULE", module, 1);
	REQUIRE(pthread_barrier_init(&start_line, NULL, N) == 0, "barrier");
	for (i = 0; i < N; i++)
		REQUIRE(pthread_create(&th[i], NULL, first_use, &res[i]) == 0, "thread %d", i);
	for (i = 0; i < N; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&start_line);
	for (i = 0; i < N; i++) {
		REQUIRE(res[i].rc == res[0].rc, "thread %d got %d, thread 0 %d", i, res[i].rc,
			res[0].rc);
		REQUIRE(res[i].rc >= 1 || starts_with(res[i].err, no_device),
			"thread %d: %d \"%s\"", i, res[i].rc, res[i].err);
		if (res[i].rc < 0)
			REQUIRE(!strcmp(res[i].err, res[0].err), "thread %d: \"%s\" vs \"%s\"", i,
				res[i].err, res[0].err);
	}
	REQUIRE(mapped("libexld-cuda.so"), "module not mapped");
	printf("%d threads: %d (%s)\n", N, res[0].rc, res[0].rc < 0 ? res[0].err : "devices");
	return 0;
out:
	return 1;
}

static int case_buildtree(const char *module)
{
	char want[PATH_MAX];

	unsetenv("EXLD_CUDA_MODULE");
	REQUIRE(realpath(module, want), "no module at %s", module);
	if (check_loaded_calls())
		return 1;
	REQUIRE(mapped(want), "%s is not the module that was loaded", want);
	return 0;
out:
	return 1;
}

/* The first CUDA call fails with exactly `want` (or, want_prefix: a message
 * that starts with it and says more), and so does every later one. */
static int expect_failure(const char *want, bool want_prefix, const char *also)
{
	static struct exl_backend not_null;
	struct exl_backend *be = &not_null;
	char err[2048];
	size_t fr = 1, tot = 1;

	err[0] = '\0';
	REQUIRE(exl_cuda_device_count(err, sizeof(err)) == -1, "device count succeeded");
	if (want_prefix)
		REQUIRE(starts_with(err, want) && strlen(err) > strlen(want),
			"got \"%s\", want \"%s...\"", err, want);
	else
		REQUIRE(!strcmp(err, want), "got \"%s\", want \"%s\"", err, want);
	if (also)
		REQUIRE(strstr(err, also), "\"%s\" does not mention \"%s\"", err, also);
	printf("message: %s\n", err);

	err[0] = '\0';
	REQUIRE(exl_backend_create_by_name("cuda", 0, &be, err, sizeof(err)) == -1 && !be &&
		starts_with(err, want), "create: \"%s\"", err);
	err[0] = '\0';
	REQUIRE(exl_cuda_mem_info(0, &fr, &tot, err, sizeof(err)) == -1 && fr == 0 && tot == 0 &&
		starts_with(err, want), "mem_info: \"%s\"", err);
	REQUIRE(!mapped("libcudart") && !mapped("libcublas"), "CUDA libraries mapped after a failed load");
	return 0;
out:
	return 1;
}

static int case_missing(const char *module)
{
	static const char gone[] = "/nonexistent-exld-test/libexld-cuda.so";
	char want[256];

	setenv("EXLD_CUDA_MODULE", gone, 1);
	snprintf(want, sizeof(want),
		 "CUDA backend module not found (looked in %s, from EXLD_CUDA_MODULE)", gone);
	if (expect_failure(want, false, NULL))
		return 1;
	/* The outcome of the first attempt holds for the process. */
	setenv("EXLD_CUDA_MODULE", module, 1);
	return expect_failure(want, false, NULL);
}

static int case_relative(void)
{
	setenv("EXLD_CUDA_MODULE", "libexld-cuda.so", 1);
	return expect_failure("EXLD_CUDA_MODULE=\"libexld-cuda.so\": expected the path of "
			      "libexld-cuda.so", false, NULL);
}

static int case_bad(const char *kind, const char *path)
{
	char want[PATH_MAX + 128];
	const char *also = NULL;
	bool prefix = true;

	setenv("EXLD_CUDA_MODULE", path, 1);
	if (!strcmp(kind, "notelf")) {
		/* dlerror's text names the file itself */
		snprintf(want, sizeof(want), "cannot load CUDA backend module: %s: ", path);
	} else if (!strcmp(kind, "nosym")) {
		snprintf(want, sizeof(want), "not an exld CUDA backend module: %s: ", path);
		also = "exl_cuda_module_v2";
	} else if (!strcmp(kind, "badabi")) {
		snprintf(want, sizeof(want), "CUDA backend module %s does not fit this exld (ABI 999,",
			 path);
	} else if (!strcmp(kind, "badversion")) {
		snprintf(want, sizeof(want),
			 "CUDA backend module %s is from exld 0.0.0-fake, this is exld ", path);
	} else {
		snprintf(want, sizeof(want), "CUDA backend module %s: its table lacks an entry point",
			 path);
		prefix = false;
	}
	return expect_failure(want, prefix, also);
}

static int case_none(void)
{
	static const char want[] = "exld was built without CUDA support";
	struct exl_backend *be = NULL;
	char err[256];

	REQUIRE(exl_cuda_device_count(err, sizeof(err)) == -1 && !strcmp(err, want),
		"device count: \"%s\"", err);
	REQUIRE(exl_backend_create_by_name("cuda:1", 0, &be, err, sizeof(err)) == -1 && !be &&
		!strcmp(err, want), "create: \"%s\"", err);
	printf("message: %s\n", err);
	return 0;
out:
	return 1;
}

int main(int argc, char **argv)
{
	const char *c = argc > 1 ? argv[1] : "";
	const char *arg = argc > 2 ? argv[2] : NULL;

	if (!strcmp(c, "none"))
		return case_none();
	if (!strcmp(c, "relative"))
		return case_relative();
	if (!arg) {
		fprintf(stderr, "usage: test_cuda_load none | relative | "
			"{lazy|threads|buildtree|missing|notelf|nosym|badabi|badversion|empty} PATH\n");
		return 2;
	}
	if (!strcmp(c, "lazy"))
		return case_lazy(arg);
	if (!strcmp(c, "threads"))
		return case_threads(arg);
	if (!strcmp(c, "buildtree"))
		return case_buildtree(arg);
	if (!strcmp(c, "missing"))
		return case_missing(arg);
	if (!strcmp(c, "notelf") || !strcmp(c, "nosym") || !strcmp(c, "badabi") ||
	    !strcmp(c, "badversion") || !strcmp(c, "empty"))
		return case_bad(c, arg);
	fprintf(stderr, "unknown case \"%s\"\n", c);
	return 2;
}
