/* A naive reference forward pass for tests: double precision, plain loops,
 * one sequence, written from the llama.cpp semantics of the llama (with
 * llama 3.1's rope_freqs and Mixtral's experts), qwen2, qwen3, qwen3moe,
 * phi3, gemma2 and gemma3 architectures rather than from
 * daemon/core/model/model_forward.c, so the two can be checked against each other.  It
 * reads F32 GGUFs through daemon/core/gguf/gguf.h and nothing else of the project.
 */
#ifndef EXL_TEST_REF_FORWARD_H
#define EXL_TEST_REF_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ref_model;

/* What the reference read from the file's metadata (for the tests to print
 * and to check against the loader). */
struct ref_hparams {
	char arch[32];
	bool neox;          /* all but llama: rotate the halves of each head, not pairs */
	int n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_rot;
	int n_ctx_train;
	double eps, freq_base, freq_scale;
	bool tied;          /* no output.weight: logits from token_embd */
	bool qkv_bias;
	bool fused;         /* phi3: attn_qkv, ffn_up holding gate and up */
	bool qk_norm;       /* qwen3, qwen3moe, gemma3 */
	bool gemma;         /* embedding scale, post norms, GELU */
	double attn_factor; /* rope.scaling.attn_factor */
	bool yarn;          /* rope.scaling.type yarn */
	double beta_fast, beta_slow, yarn_log_mul; /* YaRN (mistral3's keys) */
	double temp_scale;  /* mistral3's attention.temperature_scale */
	double logit_scale, resid_mul, embd_mul; /* granite's; 0: none */
	bool nope;          /* smollm3: every 4th layer without rope */
	bool glm4;          /* post norms and phi3's fused gate/up, q/k/v apart */
	bool olmo2;         /* post norms only, q/k normed whole, OLMo 3's windows */
	int n_ctx_orig;     /* rope.scaling.original_context_length, else n_ctx_train */
	const char *rope_factors; /* the factor tensor in use, or NULL */
	double attn_scale;
	double attn_softcap, final_softcap; /* 0: none */
	int n_swa;          /* sliding window of the local layers, 0: none */
	bool swa[1024];     /* which layers are local */
	double freq_base_swa, freq_scale_swa;
	int n_expert, n_expert_used, n_ff_exp; /* 0 experts: dense */
	double expert_weights_scale;
};

/* Opens an F32 llama or qwen2 GGUF; NULL with a message otherwise.
 * kv_f16: store K and V rounded to IEEE half precision, as a KV cache in
 * F16 does, so that what is left between the two engines is arithmetic
 * rounding alone. */
struct ref_model *ref_model_open(const char *path, bool kv_f16, char *err, size_t errlen);
void ref_model_free(struct ref_model *m);
const struct ref_hparams *ref_model_hparams(const struct ref_model *m);

/* K/V taken from the engine under test instead of rounded here.
 *
 * A reference that rounds its own double K/V to F16 is a discontinuous
 * function of the engine's float32 rounding: an element whose value lies
 * within the engine's arithmetic error of a midpoint between two halves
 * rounds up in one engine and down in the other, a jump of a whole F16 step
 * (2^-11 of the element) that later layers carry to the logits.  Which
 * elements do that changes with any change of summation order, so such a
 * comparison measures luck, not the forward pass.
 *
 * Given the engine's own cache ([n_layer][n_pos][n_head_kv * head_dim], the
 * stored halves as floats), the reference checks that every element is one
 * of the two halves neighbouring its own double value, counts those that
 * took the other one, and then attends over the engine's values.  What is
 * left between the two is float32 arithmetic alone.  k and v must stay valid
 * until ref_forward returns; NULL k takes the reference's own rounding
 * back. */
void ref_model_take_kv(struct ref_model *m, const float *k, const float *v, int n_pos);

/* What the check of taken K/V found in the last ref_forward. */
struct ref_kv_report {
	long n;           /* elements checked */
	long flips;       /* elements that are the other neighbouring half */
	double worst;     /* the largest |taken - reference| in F16 steps */
	int worst_layer;
	int worst_pos;
};
const struct ref_kv_report *ref_model_kv_report(const struct ref_model *m);

/* Logits at every position of tokens[0..n) (starting at position 0):
 * logits[i * n_vocab + v].  Returns 0, or -1 with a message (also when a
 * taken K/V element is not a neighbouring half of the reference's). */
int ref_forward(struct ref_model *m, const int32_t *tokens, int n, double *logits, char *err,
		size_t errlen);

#endif
