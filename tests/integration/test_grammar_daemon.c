/* Constrained decoding through a real exld and libexlclient: generate's
 * json_schema, regex, grammar and filter_prefer_eos reach the job (each
 * sampled result, from several clients at once, equals what `exld run`
 * gives for the same seed and constraint), and a bad constraint comes
 * back as bad_request naming the constraint and the place. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exlclient.h"
#include "common/json_parse.h"
#include "harness.h"
#include "tests/common/check.h"

#define MODEL "stories260K"
#define PROMPT "Once upon a time"
#define N_JOBS 12

static const char schema[] =
	"{\"type\":\"object\",\"properties\":{"
	"\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":10},"
	"\"age\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":99},"
	"\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":3}},"
	"\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";
static const char grammar[] =
	"root ::= word ( \" \" word ){0,3} \"!\"\nword ::= [a-z]{1,6}\n";
static const char regex[] = "[A-Z][a-z]{1,8}, [0-9]{1,3}\\.";

struct job {
	int kind;               /* 0 schema, 1 grammar, 2 regex */
	int seed;
	bool prefer;
	char *want_text;
	char want_reason[24];
	char msg[1024];
	bool ok;
	const char *sock;
	const char *file;       /* the schema / grammar file for exld run */
};

static int write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f);
}

/* exld run's --json result for the job: text and stop reason. */
static int expected(struct job *j, const char *model_path)
{
	char seed[16];
	int pipefd[2];
	size_t len = 0, cap = 65536;
	char *out = malloc(cap);
	char err[256];

	if (!out || pipe(pipefd) < 0) {
		free(out);
		return -1;
	}
	snprintf(seed, sizeof(seed), "%d", j->seed);
	pid_t pid = fork();

	if (pid == 0) {
		const char *opt = j->kind == 0 ? "--json-schema" : j->kind == 1 ? "--grammar" : "--regex";
		const char *val = j->kind == 2 ? regex : j->file;
		char *argv[] = { (char *)h_exld(), "run", "--model", (char *)model_path, "--prompt",
				 PROMPT, "-n", "1024", "--temperature", "1", "--seed", seed, "--threads",
				 "1", "--completion-only", "--json", (char *)opt, (char *)val,
				 j->prefer ? "--prefer-eos" : NULL, NULL };
		int null = open("/dev/null", O_WRONLY);

		dup2(pipefd[1], 1);
		close(pipefd[0]);
		close(pipefd[1]);
		if (null >= 0)
			dup2(null, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pipefd[1]);
	for (;;) {
		ssize_t r = read(pipefd[0], out + len, cap - len - 1);

		if (r <= 0)
			break;
		len += (size_t)r;
		if (len + 1 >= cap)
			break;
	}
	close(pipefd[0]);
	int status;

	waitpid(pid, &status, 0);
	out[len] = 0;
	struct exl_json_doc *d = exl_json_parse(out, len, err, sizeof(err));
	const struct exl_json *t = d ? exl_json_get(exl_json_root(d), "text") : NULL;
	const struct exl_json *r = d ? exl_json_get(exl_json_root(d), "stop_reason") : NULL;
	int rc = -1;

	if (WIFEXITED(status) && !WEXITSTATUS(status) && t && r && t->type == EXL_JSON_STRING &&
	    r->type == EXL_JSON_STRING) {
		j->want_text = strdup(t->str);
		snprintf(j->want_reason, sizeof(j->want_reason), "%s", r->str);
		rc = j->want_text ? 0 : -1;
	} else {
		fprintf(stderr, "exld run failed: %s\n", out);
	}
	exl_json_free(d);
	free(out);
	return rc;
}

static void *worker(void *arg)
{
	struct job *j = arg;
	struct exl_connect_opts o = { .client_name = "grammar-test", .timeout_ms = 60000 };
	struct exl_client *c = NULL;
	struct exl_gen_params p;
	struct exl_result r = { 0 };
	char err[256];

	if (exl_connect(&c, j->sock, &o, err, sizeof(err))) {
		snprintf(j->msg, sizeof(j->msg), "connect: %s", err);
		return NULL;
	}
	exl_gen_params_init(&p);
	p.temperature = 1;
	p.has_seed = true;
	p.seed = (uint64_t)j->seed;
	p.max_new_tokens = 1024;
	p.completion_only = 1;
	p.filter_prefer_eos = j->prefer;
	if (j->kind == 0)
		p.json_schema = schema;
	else if (j->kind == 1)
		p.grammar = grammar;
	else
		p.regex = regex;
	if (exl_generate(c, &p, PROMPT, &r)) {
		snprintf(j->msg, sizeof(j->msg), "generate: %s", exl_errmsg(c));
	} else if (strcmp(r.text, j->want_text) || strcmp(r.stop_reason, j->want_reason)) {
		snprintf(j->msg, sizeof(j->msg), "kind %d seed %d: daemon '%s' (%s), exld run '%s' (%s)",
			 j->kind, j->seed, r.text, r.stop_reason, j->want_text, j->want_reason);
	} else {
		j->ok = true;
	}
	exl_result_free(&r);
	exl_close(c);
	return NULL;
}

/* A request that must fail with bad_request and a message holding want. */
static int refused(const char *sock, const struct exl_gen_params *p, const char *want)
{
	struct exl_connect_opts o = { .client_name = "grammar-test", .timeout_ms = 60000 };
	struct exl_client *c = NULL;
	struct exl_result r = { 0 };
	char err[512];
	int rc, ok;

	if (exl_connect(&c, sock, &o, err, sizeof(err))) {
		fprintf(stderr, "connect: %s\n", err);
		return -1;
	}
	rc = exl_generate(c, p, PROMPT, &r);
	ok = rc == EXL_E_BAD_REQUEST && strstr(exl_errmsg(c), want);
	if (!ok)
		fprintf(stderr, "FAIL: status %d '%s', want bad_request with '%s'\n", rc,
			exl_errmsg(c), want);
	exl_result_free(&r);
	exl_close(c);
	return ok ? 0 : -1;
}

int main(void)
{
	struct daemon d;
	struct job jobs[N_JOBS];
	pthread_t th[N_JOBS];
	char schema_path[200], grammar_path[200], model_path[512];
	struct exl_gen_params p;
	int ret = 1, ok = 0;

	if (!h_models_dir()) {
		printf("EXLD_MODELS has no stories260K.gguf; skipping\n");
		return SKIP;
	}
	memset(jobs, 0, sizeof(jobs));
	snprintf(model_path, sizeof(model_path), "%s/%s.gguf", h_models_dir(), MODEL);
	if (h_prepare(&d))
		return 1;
	snprintf(schema_path, sizeof(schema_path), "%s/schema.json", d.dir);
	snprintf(grammar_path, sizeof(grammar_path), "%s/words.gbnf", d.dir);
	REQUIRE(!write_file(schema_path, schema) && !write_file(grammar_path, grammar), "files");
	for (int i = 0; i < N_JOBS; i++) {
		jobs[i].kind = i % 3;
		jobs[i].seed = 100 + i;
		jobs[i].prefer = i % 2;
		jobs[i].sock = d.sock;
		jobs[i].file = jobs[i].kind == 0 ? schema_path : grammar_path;
		REQUIRE(!expected(&jobs[i], model_path), "exld run for job %d", i);
		REQUIRE(!strcmp(jobs[i].want_reason, "end_filter") ||
			!strcmp(jobs[i].want_reason, "stop_token"), "job %d: exld run ended with %s", i,
			jobs[i].want_reason);
	}
	REQUIRE(!h_start(&d, MODEL, NULL), "exld did not start");
	for (int i = 0; i < N_JOBS; i++)
		pthread_create(&th[i], NULL, worker, &jobs[i]);
	for (int i = 0; i < N_JOBS; i++) {
		pthread_join(th[i], NULL);
		if (!jobs[i].ok)
			fprintf(stderr, "FAIL: %s\n", jobs[i].msg);
		ok += jobs[i].ok;
	}
	REQUIRE(ok == N_JOBS, "%d of %d constrained jobs matched exld run", ok, N_JOBS);

	exl_gen_params_init(&p);
	p.max_new_tokens = 8;
	p.json_schema = "{\"type\":\"integer\",\"multipleOf\":2}";
	REQUIRE(!refused(d.sock, &p, "generate: json_schema: at #/multipleOf: keyword 'multipleOf' is "
		       "not supported"), "bad schema");
	p.json_schema = NULL;
	p.grammar = "root ::= [a-";
	REQUIRE(!refused(d.sock, &p, "generate: grammar: line 1, column 10: unterminated character "
		       "class"), "bad grammar");
	p.grammar = NULL;
	p.regex = "a(?=b)";
	REQUIRE(!refused(d.sock, &p, "generate: regex: at offset 1: lookaround assertions are not "
		       "supported"), "bad regex");
	p.grammar = "root ::= \"x\"";
	REQUIRE(!refused(d.sock, &p, "give at most one of grammar, json_schema and regex"),
		"two constraints");
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0 after SIGTERM");
	printf("%d constrained jobs from concurrent clients equal exld run; bad constraints refused\n",
	       N_JOBS);
	ret = 0;
out:
	for (int i = 0; i < N_JOBS; i++)
		free(jobs[i].want_text);
	h_cleanup(&d);
	return ret;
}
