/* A reply's reasoning block (daemon/server/http/reasoning.c), <think> or
 * Mistral's [THINK]: where the reasoning and the content are, whole and
 * while streaming, with the block opened by the reply or by the prompt;
 * which templates and prompts open one. */
#include <stdio.h>
#include <string.h>

#include "daemon/server/http/reasoning.h"
#include "tests/common/check.h"

static void split_tags(enum exl_reasoning_tags tags, const char *text, bool open, bool final,
		       const char *want_r, const char *want_c)
{
	struct exl_reasoning r;
	size_t n = strlen(text);
	char got_r[256], got_c[256];

	exl_reasoning_split(tags, text, n, open, final, 0, &r);
	CHECK(r.r_start <= r.r_end && r.r_end <= n && r.c_start <= n, "'%s': %zu %zu %zu", text,
	      r.r_start, r.r_end, r.c_start);
	snprintf(got_r, sizeof(got_r), "%.*s", (int)(r.r_end - r.r_start), text + r.r_start);
	snprintf(got_c, sizeof(got_c), "%s", text + r.c_start);
	CHECK(!strcmp(got_r, want_r) && !strcmp(got_c, want_c),
	      "'%s' (%s%s): reasoning '%s' content '%s', want '%s' '%s'", text, open ? "open" : "",
	      final ? " final" : "", got_r, got_c, want_r, want_c);
}

static void split(const char *text, bool open, bool final, const char *want_r, const char *want_c)
{
	split_tags(EXL_REASONING_THINK, text, open, final, want_r, want_c);
}

int main(void)
{
	/* whole replies */
	split("<think>\nhmm\n</think>\n\nHello!", false, true, "hmm", "Hello!");
	split("  <think>a</think>b", false, true, "a", "b");
	split("Hello <think>x</think>", false, true, "", "Hello <think>x</think>");
	split("<think>cut short", false, true, "cut short", "");
	split("<think>\n\n</think>\n\nOnly this.", false, true, "", "Only this.");
	split("step 1\n</think>\n\nSunny.", true, true, "step 1", "Sunny.");
	split("no close", true, true, "no close", "");
	split("", false, true, "", "");
	/* streaming: undecided openings, a closing tag cut in two */
	split("<thi", false, false, "", "");
	split("  ", false, false, "", "");
	split("<thin!", false, false, "", "<thin!");
	split("Hello, and more than the tag's length", false, false, "",
	      "Hello, and more than the tag's length");
	split("<think>abc</thi", false, false, "abc", "");
	split("<think>abc\n", false, false, "abc", "");
	split("<think>abc</think>\n", false, false, "abc", "");
	split("<think>abc</think>\nX", false, false, "abc", "X");
	split("a</", true, false, "a", "");

	/* Mistral's tags (Magistral, Ministral 3 Reasoning) */
	split_tags(EXL_REASONING_MISTRAL, "[THINK]Let me see.[/THINK]Paris.", false, true,
		   "Let me see.", "Paris.");
	split_tags(EXL_REASONING_MISTRAL, "[THINK]abc[/THI", false, false, "abc", "");
	split_tags(EXL_REASONING_MISTRAL, "[TH", false, false, "", "");
	split_tags(EXL_REASONING_MISTRAL, "<think>x</think>y", false, true, "", "<think>x</think>y");
	split_tags(EXL_REASONING_THINK, "[THINK]x[/THINK]y", false, true, "", "[THINK]x[/THINK]y");
	split_tags(EXL_REASONING_NONE, "<think>x</think>y", false, true, "", "<think>x</think>y");

	CHECK(exl_reasoning_template("{{ '<think>' }}", 15) == EXL_REASONING_THINK, "template");
	CHECK(exl_reasoning_template("{{- '[THINK]' + t + '[/THINK]' }}", 33) ==
	      EXL_REASONING_MISTRAL, "mistral template");
	CHECK(exl_reasoning_template("<|im_start|>", 12) == EXL_REASONING_NONE, "no template");
	CHECK(exl_reasoning_needs_special(EXL_REASONING_MISTRAL) &&
	      !exl_reasoning_needs_special(EXL_REASONING_THINK), "control tokens");
	CHECK(exl_reasoning_prompt_open(EXL_REASONING_THINK, "<|Assistant|><think>\n", 21), "open");
	CHECK(!exl_reasoning_prompt_open(EXL_REASONING_THINK, "<think>\n\n</think>\n\n", 19),
	      "closed");
	CHECK(exl_reasoning_prompt_open(EXL_REASONING_MISTRAL, "[INST]q[/INST][THINK]", 21),
	      "mistral open");
	CHECK(!exl_reasoning_prompt_open(EXL_REASONING_NONE, "<think>", 7), "none open");
	if (check_failures)
		fprintf(stderr, "%d check(s) failed\n", check_failures);
	return check_failures ? 1 : 0;
}
