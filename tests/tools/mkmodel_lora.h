/* exld-mkmodel's --lora-for mode (mkmodel_lora.c). */
#ifndef MKMODEL_LORA_H
#define MKMODEL_LORA_H

#include <stdbool.h>
#include <stdint.h>

struct mkmodel_lora_opts {
	const char *base;     /* --lora-for */
	const char *out;      /* -o */
	int rank;             /* --rank, 8 */
	double alpha;         /* --alpha, 16 */
	uint64_t seed;        /* --seed, 1 */
	const char *targets;  /* --lora-targets: comma-separated, NULL for all */
	bool no_alpha;        /* --lora-no-alpha: leave adapter.lora.alpha out (tests) */
	bool bad_shape;       /* --lora-bad-shape: the first lora_a one column too wide */
};

int mkmodel_lora(const struct mkmodel_lora_opts *o);
/* The whole command line of the mode: the exit status. */
int mkmodel_lora_main(int argc, char **argv);

#endif
