/* libFuzzer's entry point for a target written against fuzz_target.h: the
 * same fuzz_one() the deterministic driver (fuzz_driver.c) runs. */
#include "tests/fuzz/fuzz_target.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return fuzz_one(data, size);
}
