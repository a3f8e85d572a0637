/* A reply's reasoning (daemon/server/http/reasoning.c), a <think> or
 * Mistral's [THINK] block or gpt-oss's harmony analysis messages: where
 * the reasoning and the content are, whole and while streaming (harmony:
 * every prefix), with the block opened by the reply or by the prompt;
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

#define H_ANALYSIS "<|channel|>analysis<|message|>"
#define H_FINAL "<|start|>assistant<|channel|>final<|message|>"
#define H_CALL "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
#define H_CALL2 " to=functions.get_weather<|channel|>commentary json<|message|>"

static void harmony(const char *text, bool final, const char *want_r, const char *want_c)
{
	split_tags(EXL_REASONING_HARMONY, text, false, final, want_r, want_c);
}

/* A harmony reply streamed as http_gen.c streams it, a byte at a time
 * (tokens are never shorter): each split from the reasoning sent so far;
 * the reasoning goes out as it grows, the content's start is kept once it
 * is known.  What went out must be the whole reply's split, and no
 * prefix may claim content the whole reply does not have there. */
static void harmony_stream(const char *text, const char *want_r, const char *want_c)
{
	size_t n = strlen(text), sent = 0, content_at = 0;
	char got_r[512] = "";
	struct exl_reasoning whole, r;

	exl_reasoning_split(EXL_REASONING_HARMONY, text, n, false, true, 0, &whole);
	for (size_t len = 0; len <= n; len++) {
		bool final = len == n;

		if (content_at && !final)
			continue;
		exl_reasoning_split(EXL_REASONING_HARMONY, text, len, false, final, sent, &r);
		/* the same split without the hint */
		struct exl_reasoning r0;
		exl_reasoning_split(EXL_REASONING_HARMONY, text, len, false, final, 0, &r0);
		CHECK(r0.r_start == r.r_start && r0.r_end == r.r_end && r0.c_start == r.c_start,
		      "'%.*s': from %zu changes the split", (int)len, text, sent);
		CHECK(r.r_start <= r.r_end && r.r_end <= len && r.c_start <= len &&
		      (r.r_end == r.r_start || r.c_start >= r.r_end), "'%.*s': %zu %zu %zu", (int)len,
		      text, r.r_start, r.r_end, r.c_start);
		if (sent < r.r_start)
			sent = r.r_start;
		CHECK(r.r_end >= sent || r.r_end == r.r_start, "'%.*s': reasoning %zu back from %zu",
		      (int)len, text, r.r_end, sent);
		if (r.r_end > sent) {
			CHECK(r.r_start == whole.r_start && r.r_end <= whole.r_end,
			      "'%.*s': reasoning %zu-%zu, not the whole's %zu-%zu", (int)len, text,
			      r.r_start, r.r_end, whole.r_start, whole.r_end);
			strncat(got_r, text + sent, r.r_end - sent);
			sent = r.r_end;
		}
		if (r.c_start < len) {
			CHECK(r.c_start == whole.c_start, "'%.*s': content from %zu, the whole's from %zu",
			      (int)len, text, r.c_start, whole.c_start);
			content_at = r.c_start;
		}
	}
	CHECK(!strcmp(got_r, want_r) && !strcmp(text + whole.c_start, want_c),
	      "'%s' streamed: reasoning '%s' content '%s', want '%s' '%s'", text, got_r,
	      text + whole.c_start, want_r, want_c);
}

static void test_harmony(void)
{
	/* analysis, then final */
	harmony(H_ANALYSIS "The user asks.\n<|end|>" H_FINAL "It is sunny.", true, "The user asks.",
		"It is sunny.");
	/* final only; a commentary preamble is content */
	harmony("<|channel|>final<|message|>It is sunny.", true, "", "It is sunny.");
	harmony("<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant" H_CALL "{}",
		true, "", "Checking.<|end|><|start|>assistant" H_CALL "{}");
	/* a call, the recipient after the channel or before it: the content
	 * (for the tool-call reader) from its header */
	harmony(H_ANALYSIS "Need the weather.<|end|><|start|>assistant" H_CALL "{\"location\":\"Tokyo\"}",
		true, "Need the weather.", H_CALL "{\"location\":\"Tokyo\"}");
	harmony(H_ANALYSIS "Need the weather.<|end|><|start|>assistant" H_CALL2 "{\"location\":\"Tokyo\"}",
		true, "Need the weather.", H_CALL2 "{\"location\":\"Tokyo\"}");
	harmony(H_CALL "{}", true, "", H_CALL "{}");
	harmony(H_CALL2 "{}", true, "", H_CALL2 "{}");
	/* two analysis messages: one span; gpt-oss-20b's stray commentary
	 * channel before analysis, and to=assistant, are no call */
	harmony(H_ANALYSIS "A<|end|><|start|>assistant" H_ANALYSIS "B<|end|>" H_FINAL "C", true,
		"A<|end|><|start|>assistant" H_ANALYSIS "B", "C");
	harmony("<|channel|>commentary to=assistant<|channel|>analysis<|message|>x<|end|>" H_FINAL "y",
		true, "x", "y");
	/* cut short: an unclosed analysis is all reasoning; after a closed
	 * one, nothing more is no content */
	harmony(H_ANALYSIS "cut short", true, "cut short", "");
	harmony(H_ANALYSIS "done<|end|>", true, "done", "");
	harmony(H_ANALYSIS "done<|end|><|start|>assistant<|channel|>fin", true, "done",
		"<|channel|>fin");
	/* not harmony: all content */
	harmony("It is sunny.", true, "", "It is sunny.");
	harmony("Hello <|channel|>x", true, "", "Hello <|channel|>x");
	harmony("<b>bold</b>", true, "", "<b>bold</b>");
	harmony("to be or not", true, "", "to be or not");
	harmony("", true, "", "");
	/* streaming: undecided while a header or a marker is incomplete */
	harmony("<|chan", false, "", "");
	harmony("<|channel|>analysis", false, "", "");
	harmony(H_ANALYSIS "abc<|en", false, "abc", "");
	harmony(H_ANALYSIS "abc<|end|><|start|>assis", false, "abc", "");
	harmony(H_ANALYSIS "abc<|end|><|start|>assistant<|channel|>commentary to=functions.get_w",
		false, "abc", "");
	harmony(H_ANALYSIS "abc<|end|>" H_FINAL " ", false, "abc", "");
	harmony(H_ANALYSIS "abc<|end|>" H_FINAL "S", false, "abc", "S");
	harmony(" t", false, "", "");
	harmony("Sun", false, "", "Sun");

	/* every prefix of whole replies */
	harmony_stream(H_ANALYSIS "The user asks about Tokyo.<|end|>" H_FINAL "It is sunny.",
		       "The user asks about Tokyo.", "It is sunny.");
	harmony_stream(H_ANALYSIS "Weather: call.<|end|><|start|>assistant" H_CALL "{\"location\":1}",
		       "Weather: call.", H_CALL "{\"location\":1}");
	harmony_stream(H_ANALYSIS "Weather: call.<|end|><|start|>assistant" H_CALL2 "{}",
		       "Weather: call.", H_CALL2 "{}");
	harmony_stream(H_ANALYSIS "A <|end|><|start|>assistant" H_ANALYSIS "B<|end|>" H_FINAL "C",
		       "A <|end|><|start|>assistant" H_ANALYSIS "B", "C");
	harmony_stream(H_ANALYSIS "never closed <|en", "never closed <|en", "");
	harmony_stream("<|channel|>final<|message|>Hi <|end|> there", "", "Hi <|end|> there");
	harmony_stream("Plain text, <|channel|> and all.", "", "Plain text, <|channel|> and all.");

	CHECK(exl_reasoning_template("{{- '<|start|>assistant<|channel|>final<|message|>' }}", 52) ==
	      EXL_REASONING_HARMONY, "harmony template");
	CHECK(!exl_reasoning_needs_special(EXL_REASONING_HARMONY), "harmony: markers are text");
	CHECK(!exl_reasoning_prompt_open(EXL_REASONING_HARMONY, "<|start|>assistant", 18),
	      "harmony open");
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
	test_harmony();
	if (check_failures)
		fprintf(stderr, "%d check(s) failed\n", check_failures);
	return check_failures ? 1 : 0;
}
