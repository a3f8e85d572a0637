/* The chaos tests' shared check (chaos.h). */
#include <stdio.h>
#include <stdlib.h>

#include "chaos.h"
#include "exlclient.h"

int chaos_config(const struct daemon *d, const char *more, char *path, size_t len)
{
	FILE *f;

	snprintf(path, len, "%s/chaos.conf", d->dir);
	f = fopen(path, "w");
	if (!f) {
		perror(path);
		return -1;
	}
	fprintf(f, "max_running_jobs = 4\nmax_batch_tokens = 64\nprefill_chunk = 32\n%s", more);
	return fclose(f) ? -1 : 0;
}

int chaos_wait_idle(struct daemon *d)
{
	struct exl_connect_opts o = { .client_name = "check", .timeout_ms = 30000 };
	struct exl_client *c;
	char err[512];
	int jobs = -1;

	if (exl_connect(&c, d->sock, &o, err, sizeof(err))) {
		fprintf(stderr, "connect: %s\n", err);
		return -1;
	}
	for (int t = 0; t < 100 && jobs; t++) {
		struct exl_daemon_status st;

		if (exl_status(c, &st)) {
			fprintf(stderr, "status: %s\n", exl_errmsg(c));
			exl_close(c);
			return -1;
		}
		jobs = st.jobs;
		free(st.models);
		if (jobs)
			h_sleep_ms(100);
	}
	exl_close(c);
	if (jobs)
		fprintf(stderr, "%d jobs still there after every client left\n", jobs);
	return jobs ? -1 : 0;
}
