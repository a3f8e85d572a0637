/* exl chat's conversation formats: each built-in template on one
 * conversation (system, user, assistant, user) against the text llama.cpp's
 * llama_chat_apply_template gives for the same template name (recorded
 * from its prebuilt library), detection from real models' Jinja templates,
 * names, and the plain format. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/exl/exl_chat_template.h"
#include "tests/common/check.h"

static const struct chat_msg conv[] = {
	{ "system", "You are a helpful assistant" },
	{ "user", "Hello" },
	{ "assistant", " Hi there " },
	{ "user", "Who are you" },
};

static const struct {
	const char *name;
	const char *text;
} formatted[] = {
	{ "chatml",
	  "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n Hi there <|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n" },
	{ "phi4",
	  "<|im_start|>system<|im_sep|>You are a helpful assistant<|im_end|><|im_start|>user<|im_sep|>Hello<|im_end|><|im_start|>assistant<|im_sep|> Hi there <|im_end|><|im_start|>user<|im_sep|>Who are you<|im_end|><|im_start|>assistant<|im_sep|>" },
	{ "llama2",
	  "[INST] You are a helpful assistant\nHello [/INST] Hi there </s>[INST] Who are you [/INST]" },
	{ "llama2-sys",
	  "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s>[INST] Who are you [/INST]" },
	{ "llama2-sys-bos",
	  "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are you [/INST]" },
	{ "llama2-sys-strip",
	  "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are you [/INST]" },
	{ "mistral-v1",
	  " [INST] You are a helpful assistant\n\nHello [/INST]  Hi there </s> [INST] Who are you [/INST]" },
	{ "mistral-v3",
	  "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST]" },
	{ "mistral-v3-tekken",
	  "[INST]You are a helpful assistant\n\nHello[/INST] Hi there </s>[INST]Who are you[/INST]" },
	{ "mistral-v7",
	  "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST]  Hi there </s>[INST] Who are you[/INST]" },
	{ "llama3",
	  "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n" },
	{ "zephyr",
	  "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n<|assistant|>\n Hi there <|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n<|assistant|>\n" },
	{ "phi3",
	  "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\n Hi there <|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n" },
	{ "gemma",
	  "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\n" },
	{ "plain",
	  "You are a helpful assistant\n\nUser: Hello\nAssistant: Hi there\nUser: Who are you\nAssistant:" },
};

/* Jinja templates (abridged to the parts detection looks at) and the
 * format llama.cpp picks for them. */
static const struct {
	const char *jinja;
	const char *name;     /* NULL: none of the built-in formats */
} detected[] = {
	{ "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
	  "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}", "chatml" },
	{ "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}"
	  "{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + '<|assistant|>' + "
	  "'\\n'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + "
	  "'\\n'}}{% endif %}{% endfor %}", "phi3" },
	{ "{% for message in messages %}{% if message['role'] == 'user' %}{{ bos_token + "
	  "'[INST] ' + message['content'].strip() + ' [/INST]' }}{% elif message['role'] == "
	  "'system' %}{{ '<<SYS>>\\n' + message['content'].strip() + '\\n<</SYS>>\\n\\n' }}"
	  "{% endif %}{% endfor %}", "llama2-sys-bos" },
	{ "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
	  "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
	  "'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}", "llama2" },
	{ "{{- bos_token }}{%- for message in loop_messages %}{%- if loop.first and "
	  "system_message is defined %}{{- ' [INST] ' + system_message + '\\n\\n' + "
	  "message['content'] + ' [/INST]' }}{%- endif %}{%- endfor %}", "mistral-v1" },
	{ "{{ bos_token }}{% for message in messages %}{{ '[INST]' + message['content'] + "
	  "'[/INST]' }}[AVAILABLE_TOOLS]{% endfor %}", "mistral-v3" },
	{ "{% for message in messages %}{{ '[SYSTEM_PROMPT]' + message['content'] + "
	  "'[/SYSTEM_PROMPT]' }}{{ '[INST]' + message['content'] + '[/INST]' }}{% endfor %}",
	  "mistral-v7" },
	{ "{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
	  "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
	  "'<|eot_id|>' %}{{ content }}{% endfor %}", "llama3" },
	{ "{% for message in messages %}{{'<start_of_turn>' + role + '\\n' + message['content'] "
	  "| trim + '<end_of_turn>\\n'}}{% endfor %}{{'<start_of_turn>model\\n'}}", "gemma" },
	{ "{% for message in messages %}{{ '<|user|>\\n' + message['content'] + "
	  "'<|endoftext|>' }}{% endfor %}", "zephyr" },
	{ "{% for message in messages %}{{'<|im_start|>' + message['role'] + '<|im_sep|>' + "
	  "message['content'] + '<|im_end|>'}}{% endfor %}", "phi4" },
	/* Falcon 3 / GLM-Edge: llama.cpp has formats for them, exl does not. */
	{ "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\\n' + "
	  "message['content'] + '\\n'}}{% endfor %}<|assistant|><|user|>", NULL },
	{ "{{ 'USER: ' + message['content'] + ' ASSISTANT: ' }}", NULL },
	{ "{{ messages }}", NULL },
};

static void test_formats(void)
{
	size_t n = sizeof(formatted) / sizeof(formatted[0]);

	CHECK(n == TMPL_COUNT, "%zu formats checked of %d", n, TMPL_COUNT);
	for (size_t i = 0; i < n; i++) {
		int t = chat_template_by_name(formatted[i].name);
		CHECK(t != TMPL_UNKNOWN, "no template %s", formatted[i].name);
		if (t == TMPL_UNKNOWN)
			continue;
		CHECK(!strcmp(chat_template_name(t), formatted[i].name), "name of %s",
		      formatted[i].name);
		char *s = chat_format(t, conv, 4);
		CHECK(s && !strcmp(s, formatted[i].text), "%s:\n got  [%s]\n want [%s]",
		      formatted[i].name, s ? s : "(null)", formatted[i].text);
		free(s);
	}
}

static void test_detect(void)
{
	for (size_t i = 0; i < sizeof(detected) / sizeof(detected[0]); i++) {
		int t = chat_template_detect(detected[i].jinja);
		const char *want = detected[i].name ? detected[i].name : "unknown";
		CHECK(!strcmp(chat_template_name(t), want), "case %zu: detected %s, want %s", i,
		      chat_template_name(t), want);
	}
}

static void test_edges(void)
{
	char *s;

	CHECK(chat_template_by_name("mistral") == chat_template_by_name("mistral-v3"), "alias");
	CHECK(chat_template_by_name("nonesuch") == TMPL_UNKNOWN, "unknown name");
	/* No messages: just the opened assistant turn. */
	s = chat_format(TMPL_CHATML, NULL, 0);
	CHECK(s && !strcmp(s, "<|im_start|>assistant\n"), "empty chatml: %s", s ? s : "(null)");
	free(s);
	s = chat_format(TMPL_PLAIN, NULL, 0);
	CHECK(s && !strcmp(s, "Assistant:"), "empty plain: %s", s ? s : "(null)");
	free(s);
	/* gemma: a system message alone waits for a user turn. */
	static const struct chat_msg sys_only[] = { { "system", " Be brief " } };
	s = chat_format(TMPL_GEMMA, sys_only, 1);
	CHECK(s && !strcmp(s, "<start_of_turn>model\n"), "gemma system only: %s", s ? s : "(null)");
	free(s);
	CHECK(!strcmp(chat_turn_end(TMPL_CHATML), "<|im_end|>") &&
	      !strcmp(chat_turn_end(TMPL_LLAMA3), "<|eot_id|>") &&
	      !strcmp(chat_turn_end(TMPL_PHI3), "<|end|>") &&
	      !strcmp(chat_turn_end(TMPL_GEMMA), "<end_of_turn>") &&
	      !strcmp(chat_turn_end(TMPL_LLAMA2), "</s>") &&
	      !strcmp(chat_turn_end(TMPL_PLAIN), "\nUser:"), "turn ends");
}

int main(void)
{
	test_formats();
	test_detect();
	test_edges();
	if (check_failures) {
		fprintf(stderr, "%d failures\n", check_failures);
		return 1;
	}
	printf("chat templates: ok\n");
	return 0;
}
