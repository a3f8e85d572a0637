/* exld-mkmodel for fuzz targets (fuzz_mkmodel.h). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/fuzz/fuzz_mkmodel.h"

static const char *tool_path(char *buf, size_t len)
{
	const char *env = getenv("EXLD_MKMODEL");
	ssize_t n;

	if (env && *env)
		return env;
	/* build/tests/fuzz/<target> -> build/tests/tools/exld-mkmodel */
	n = readlink("/proc/self/exe", buf, len - 1);
	if (n <= 0)
		return NULL;
	buf[n] = 0;
	char *slash = strrchr(buf, '/');
	if (!slash || (size_t)(slash - buf) + sizeof("/../tools/exld-mkmodel") > len)
		return NULL;
	strcpy(slash, "/../tools/exld-mkmodel");
	return buf;
}

void fuzz_mkmodel(const char *who, const char *const *a, const char *const *b, const char *out)
{
	char tool[4096];
	const char *mk = tool_path(tool, sizeof(tool));
	const char *argv[48];
	int n = 0, status;
	pid_t pid;

	if (!mk) {
		fprintf(stderr, "%s: cannot find exld-mkmodel: set EXLD_MKMODEL\n", who);
		abort();
	}
	argv[n++] = mk;
	for (int k = 0; a[k] && n < 40; k++)
		argv[n++] = a[k];
	for (int k = 0; b && b[k] && n < 44; k++)
		argv[n++] = b[k];
	argv[n++] = "-o";
	argv[n++] = out;
	argv[n] = NULL;
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "%s: fork failed\n", who);
		abort();
	}
	if (pid == 0) {
		int devnull = open("/dev/null", O_WRONLY);

		if (devnull >= 0) {
			dup2(devnull, 1);
			dup2(devnull, 2);
		}
		execv(mk, (char *const *)argv);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "%s: %s failed for %s (EXLD_MKMODEL?)\n", who, mk, out);
		abort();
	}
}
