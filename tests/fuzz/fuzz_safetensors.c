/* fuzz_safetensors.c — libFuzzer target for the runtime's two model-file parsers: the input is
 * a safetensors header (its JSON text, with a data section of the input's length) and, the same
 * bytes, a config.json. Neither may crash, leak or read out of bounds on any input; errors are
 * expected. Build and run: make fuzz-safetensors && build/fuzz_safetensors -max_total_time=60 */
#include "model.h"
#include "safetensors.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kt_st_tensor *t = NULL;
    int n = 0;
    size_t cap = 0;
    kt_st_parse_header("fuzz", (const char *)data, size, size, 0, &t, &n, &cap);
    for (int i = 0; i < n; i++) free(t[i].name);
    free(t);
    kt_model_config c;
    kt_model_config_parse("fuzz", (const char *)data, size, &c);
    return 0;
}
