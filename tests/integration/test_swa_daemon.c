/* The daemon on a model that mixes sliding-window and global layers: a
 * gemma3 file from exld-mkmodel (6 layers, 5 local with a window of 8)
 * served with pages of 16, batches of 32 and 2 running jobs, so its local
 * KV pool holds 2 x 5 pages.  Two jobs of 200 tokens at once give exld
 * run's greedy ids (each alone, through a one-sequence pool), and the
 * status reply reports the local pool: its pages, all free again after,
 * and its bytes beside the global pool's, which exl status prints. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exlclient.h"
#include "harness.h"
#include "tests/common/check.h"

#define MODEL "gemma3_swa"
#define N_NEW 200
#define MAX_IDS 256

static const char *const prompts[2] = { "hello world this is a test of the window",
					 "a second prompt for the other job" };

int main(void)
{
	struct daemon d;
	struct exl_client *c = NULL;
	struct exl_daemon_status st;
	uint64_t job[2];
	int32_t want[2][MAX_IDS], got[2][MAX_IDS];
	int n_want[2], n_got[2] = { 0, 0 };
	char mdir[200], model_path[300], conf[300], mk[1024], out[65536], err[512];
	int ret = 1;

	if (!getenv("EXLD_BUILDDIR")) {
		printf("EXLD_BUILDDIR is not set (run it through meson test); skipping\n");
		return SKIP;
	}
	if (h_prepare(&d))
		return 1;
	snprintf(mdir, sizeof(mdir), "%s/models", d.dir);
	snprintf(model_path, sizeof(model_path), "%s/%s.gguf", mdir, MODEL);
	snprintf(mk, sizeof(mk), "%s/tests/tools/exld-mkmodel", getenv("EXLD_BUILDDIR"));
	REQUIRE(mkdir(mdir, 0700) == 0, "model directory");
	{
		char *argv[] = { mk, "--arch", "gemma3", "--dim", "64", "--layers", "6", "--heads",
				 "4", "--kv-heads", "2", "--ff", "128", "--swa", "8", "--threads",
				 "1", "-o", model_path, NULL };

		REQUIRE(h_run_capture(argv, out, sizeof(out)) == 0, "exld-mkmodel");
	}
	for (int i = 0; i < 2; i++) {
		char *argv[] = { (char *)h_exld(), "run", "--model", model_path, "--prompt",
				 (char *)prompts[i], "-n", "200", "--temperature", "0",
				 "--ignore-eos", "--threads", "1", "--json", NULL };

		REQUIRE(h_run_capture(argv, out, sizeof(out)) == 0, "exld run %d", i);
		n_want[i] = h_parse_ids(out, want[i], MAX_IDS);
		REQUIRE(n_want[i] == N_NEW, "exld run %d: %d ids", i, n_want[i]);
	}
	snprintf(conf, sizeof(conf), "%s/exld.conf", d.dir);
	FILE *f = fopen(conf, "w");
	REQUIRE(f, "config file");
	fprintf(f, "kv_tokens = 2048\nkv_page_size = 16\nmax_batch_tokens = 32\n"
		"prefill_chunk = 16\nmax_running_jobs = 2\n");
	fclose(f);
	{
		/* h_start's model directory is the shared one */
		char *argv[] = { (char *)h_exld(), "--config", conf, "--socket", d.sock,
				 "--models", mdir, "--threads", "1", "--load", MODEL, NULL };

		REQUIRE(h_spawn(&d, argv) == 0 && h_wait_notify(&d, "READY=1", 30000),
			"exld did not start");
	}
	REQUIRE(exl_connect(&c, d.sock, NULL, err, sizeof(err)) == 0, "connect: %s", err);
	for (int i = 0; i < 2; i++) {
		struct exl_gen_params p;

		exl_gen_params_init(&p);
		p.max_new_tokens = N_NEW;
		p.temperature = 0.0f;
		p.ignore_eos = 1;
		REQUIRE(exl_submit(c, &p, prompts[i], &job[i]) == 0, "submit %d: %s", i,
			exl_errmsg(c));
	}
	for (int left = 2; left > 0;) {
		struct exl_event ev;

		REQUIRE(exl_next(c, &ev, 60000) == 0, "next: %s", exl_errmsg(c));
		for (int i = 0; i < 2; i++) {
			if (ev.job != job[i])
				continue;
			if (ev.type == EXL_EVENT_DONE) {
				CHECK(!strcmp(ev.result->stop_reason, "max_new_tokens"),
				      "job %d ended with %s", i, ev.result->stop_reason);
				left--;
				break;
			}
			for (size_t k = 0; k < ev.n_ids && n_got[i] < MAX_IDS; k++)
				got[i][n_got[i]++] = ev.ids[k];
		}
	}
	for (int i = 0; i < 2; i++)
		CHECK(n_got[i] == N_NEW && !memcmp(got[i], want[i], sizeof(want[i][0]) * N_NEW),
		      "job %d: the daemon's %d ids differ from exld run's", i, n_got[i]);
	/* the figures are a snapshot the engine takes between steps, so the
	 * last DONE can reach us before the snapshot that follows it */
	for (int i = 0;; i++) {
		REQUIRE(exl_status(c, &st) == 0 && st.n_models == 1, "status: %s", exl_errmsg(c));
		if ((st.models[0].kv_local_pages_free == st.models[0].kv_local_pages &&
		     st.models[0].kv_pages_free == st.models[0].kv_pages) || i == 500)
			break;
		free(st.models);
		usleep(10000);
	}
	const struct exl_model_status *m = &st.models[0];
	/* window 8 + a page kept + a batch of 32 ahead: 5 pages of 16 a job */
	CHECK(m->kv_local_pages == 10 && m->kv_local_pages_free == 10 && m->kv_pages == 128 &&
	      m->kv_pages_free == 128, "pools: local %d/%d free, global %d/%d free",
	      m->kv_local_pages_free, m->kv_local_pages, m->kv_pages_free, m->kv_pages);
	/* 5 local layers of 10 pages, 1 global of 128: K and V of 16 positions
	 * of 2 KV heads of 16, F16, 2048 bytes a page and layer; one pool
	 * would hold 6 x 128 */
	CHECK(m->kv_local_bytes == 5ull * 10 * 2048 && m->kv_bytes == m->kv_local_bytes +
	      128ull * 2048, "bytes: %llu local of %llu", (unsigned long long)m->kv_local_bytes,
	      (unsigned long long)m->kv_bytes);
	printf("local pool: %d pages, %llu of %llu KV bytes\n", m->kv_local_pages,
	       (unsigned long long)m->kv_local_bytes, (unsigned long long)m->kv_bytes);
	free(st.models);
	{
		char exl[1024];
		char *argv[] = { exl, "--socket", d.sock, "status", NULL };

		/* exl status prints the local pool beside the KV cache's bytes */
		snprintf(exl, sizeof(exl), "%s/client/exl", getenv("EXLD_BUILDDIR"));
		CHECK(h_run_capture(argv, out, sizeof(out)) == 0 &&
		      strstr(out, "KV cache 356.0 KiB (100.0 KiB local, pages 0/10)"),
		      "exl status: %s", out);
	}
	exl_close(c);
	c = NULL;
	CHECK(h_stop(&d) == 0, "exld exit status");
	ret = 0;
out:
	if (c)
		exl_close(c);
	h_cleanup(&d);
	if (check_failures)
		ret = 1;
	return ret;
}
