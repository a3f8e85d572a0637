/* The CUDA entry points of a build with CUDA (kernels/cuda/backend_cuda.h and
 * exl_backend_cuda_create): the first call loads the backend module,
 * libexld-cuda.so (kernels/cuda/cuda_module.h), and every call forwards to
 * it.  Until then nothing of CUDA is mapped, so a process that never asks
 * for a GPU pays for neither cudart nor cuBLAS.
 *
 * Where the module is looked for, first file that exists wins:
 *   1. $EXLD_CUDA_MODULE, a path to the file (then nowhere else);
 *   2. the build tree, when this program runs from the build tree it was
 *      built in (an uninstalled run: the tests, build/daemon/exld);
 *   3. <prefix>/<libdir>/exld/, as configured.
 * A file that exists but does not load, or is not a matching exld module,
 * is an error; later places are not tried.  The outcome of the first
 * attempt, the module or the message, holds for the life of the process,
 * and the module is never unloaded.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_module.h"
#include "kernels/cuda/cuda_module_config.h"

#define LOAD_ERR_MAX 2048

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const struct exl_cuda_module *loaded;
static char load_err[LOAD_ERR_MAX];

_Static_assert(sizeof(exl_cuda_module_entry_fn) == sizeof(void *),
	       "a function pointer travels through dlsym's void *");

/* True when this program runs from inside the build tree it was built in:
 * only then is the module looked for there. */
static bool in_build_tree(void)
{
	char exe[PATH_MAX], root[PATH_MAX];
	size_t n;

	if (!realpath("/proc/self/exe", exe) || !realpath(EXL_CUDA_MODULE_BUILD_ROOT, root))
		return false;
	n = strlen(root);
	return n > 1 && !strncmp(exe, root, n) && exe[n] == '/';
}

/* load_err = "<what> <path>: <dlerror>", or "<what>: <dlerror>" when
 * dlerror's text starts with the path already. */
static void dl_failed(const char *what, const char *path)
{
	const char *why = dlerror();

	if (!why)
		why = "unknown dynamic loader error";
	if (!strncmp(why, path, strlen(path)))
		snprintf(load_err, sizeof(load_err), "%s: %s", what, why);
	else
		snprintf(load_err, sizeof(load_err), "%s %s: %s", what, path, why);
}

/* 1 with `loaded` set, 0 when there is no file at `path`, -1 with the
 * reason in load_err. */
static int try_load(const char *path)
{
	const struct exl_cuda_module *m;
	exl_cuda_module_entry_fn entry;
	void *h, *sym;

	if (access(path, F_OK) != 0 && (errno == ENOENT || errno == ENOTDIR))
		return 0;
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		dl_failed("cannot load CUDA backend module", path);
		return -1;
	}
	dlerror();
	sym = dlsym(h, EXL_CUDA_MODULE_ENTRY);
	if (!sym) {
		dl_failed("not an exld CUDA backend module", path);
		goto fail;
	}
	memcpy(&entry, &sym, sizeof(entry));
	m = entry();
	if (!m) {
		snprintf(load_err, sizeof(load_err),
			 "CUDA backend module %s: " EXL_CUDA_MODULE_ENTRY "() returned no table",
			 path);
		goto fail;
	}
	if (m->abi != EXL_CUDA_MODULE_ABI || m->table_size != sizeof(*m) ||
	    m->ops_size != sizeof(struct exl_backend_ops)) {
		snprintf(load_err, sizeof(load_err),
			 "CUDA backend module %s does not fit this exld (ABI %u, table %zu bytes, "
			 "op table %zu bytes; expected %u, %zu, %zu)", path, m->abi,
			 m->table_size, m->ops_size, (unsigned int)EXL_CUDA_MODULE_ABI,
			 sizeof(*m), sizeof(struct exl_backend_ops));
		goto fail;
	}
	if (!m->version || strcmp(m->version, EXL_CUDA_MODULE_VERSION)) {
		snprintf(load_err, sizeof(load_err),
			 "CUDA backend module %s is from exld %.32s, this is exld %s", path,
			 m->version ? m->version : "(unknown)", EXL_CUDA_MODULE_VERSION);
		goto fail;
	}
	if (!m->create || !m->device_count || !m->mem_info || !m->device_name ||
	    !m->backend_device || !m->backend_error) {
		snprintf(load_err, sizeof(load_err),
			 "CUDA backend module %s: its table lacks an entry point", path);
		goto fail;
	}
	loaded = m;
	return 1;
fail:
	dlclose(h);
	return -1;
}

static void load_module(void)
{
	const char *env = secure_getenv("EXLD_CUDA_MODULE");
	const char *sep = "";
	char looked[LOAD_ERR_MAX / 2];
	int rc;

	looked[0] = '\0';
	if (env && *env) {
		if (!strchr(env, '/') || strlen(env) >= PATH_MAX) {
			snprintf(load_err, sizeof(load_err),
				 "EXLD_CUDA_MODULE=\"%.256s\": expected the path of %s",
				 env, EXL_CUDA_MODULE_FILE);
			return;
		}
		if (try_load(env) == 0)
			snprintf(load_err, sizeof(load_err),
				 "CUDA backend module not found (looked in %s, from EXLD_CUDA_MODULE)",
				 env);
		return;
	}
	if (in_build_tree()) {
		rc = try_load(EXL_CUDA_MODULE_BUILT);
		if (rc)
			return;
		snprintf(looked, sizeof(looked), "%s", EXL_CUDA_MODULE_BUILT);
		sep = ", ";
	}
	rc = try_load(EXL_CUDA_MODULE_INSTALLED);
	if (rc)
		return;
	snprintf(load_err, sizeof(load_err), "CUDA backend module not found (looked in %s%s%s)",
		 looked, sep, EXL_CUDA_MODULE_INSTALLED);
}

/* The module, or NULL with the reason in err. */
static const struct exl_cuda_module *cuda_module(char *err, size_t errlen)
{
	if (pthread_once(&load_once, load_module)) {
		snprintf(err, errlen, "cannot load the CUDA backend module: pthread_once failed");
		return NULL;
	}
	if (!loaded)
		snprintf(err, errlen, "%s", load_err);
	return loaded;
}

/* The module behind a CUDA backend, which only it can have made. */
static const struct exl_cuda_module *module_of(const struct exl_backend *be)
{
	if (!be || !be->ops || !be->ops->name || strcmp(be->ops->name, "cuda"))
		return NULL;
	if (pthread_once(&load_once, load_module))
		return NULL;
	return loaded;
}

struct exl_backend *exl_backend_cuda_create(int device, char *err, size_t errlen)
{
	const struct exl_cuda_module *m = cuda_module(err, errlen);

	return m ? m->create(device, err, errlen) : NULL;
}

int exl_cuda_device_count(char *err, size_t errlen)
{
	const struct exl_cuda_module *m = cuda_module(err, errlen);

	return m ? m->device_count(err, errlen) : -1;
}

int exl_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes,
		      char *err, size_t errlen)
{
	const struct exl_cuda_module *m = cuda_module(err, errlen);

	if (m)
		return m->mem_info(device, free_bytes, total_bytes, err, errlen);
	*free_bytes = 0;
	*total_bytes = 0;
	return -1;
}

int exl_cuda_device_name(int device, char *name, size_t namelen, int *major, int *minor,
			 char *err, size_t errlen)
{
	const struct exl_cuda_module *m = cuda_module(err, errlen);

	if (m)
		return m->device_name(device, name, namelen, major, minor, err, errlen);
	if (namelen)
		name[0] = '\0';
	*major = 0;
	*minor = 0;
	return -1;
}

int exl_backend_cuda_device(const struct exl_backend *be)
{
	const struct exl_cuda_module *m = module_of(be);

	return m ? m->backend_device(be) : -1;
}

const char *exl_backend_cuda_error(const struct exl_backend *be)
{
	const struct exl_cuda_module *m = module_of(be);

	return m ? m->backend_error(be) : NULL;
}
