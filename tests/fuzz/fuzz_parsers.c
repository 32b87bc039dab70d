/* libFuzzer target: feeds each input, as a whole file image, to the four
 * binary-format parsers (safetensors, native model, training checkpoint,
 * GGUF; a GGUF that parses has its tensors dequantized too).
 * They must return 0 or -1 without crashing, leaking or reading out of
 * bounds (built with ASan + UBSan by `make fuzz`). */
#include <stdint.h>
#include <stdlib.h>

#include "../../checkpoints/ckpt.h"
#include "../../checkpoints/gguf.h"
#include "../../checkpoints/gguf_dequant.h"
#include "../../checkpoints/native_model.h"
#include "../../checkpoints/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[ST_ERR_LEN];
    StHeader h;
    if (st_parse(&h, data, (int64_t)size, "fuzz", err, sizeof err) == 0) st_header_free(&h);
    NmFile nm;
    if (nm_parse(&nm, data, (int64_t)size, "fuzz", err, sizeof err) == 0) nm_close(&nm);
    CkptReader r;
    if (ckpt_parse(&r, data, (int64_t)size, "fuzz", err, sizeof err) == 0) free(r.s);
    GgufHeader g;
    char gerr[GGUF_ERR_LEN];
    if (gguf_parse(&g, data, (int64_t)size, "fuzz", gerr, sizeof gerr) == 0) {
        for (int64_t i = 0; i < g.n_tensors; i++) {
            if (!ggml_type_dequantizable(g.t[i].type) || g.t[i].numel > 4096) continue;
            float *out = malloc((size_t)g.t[i].numel * sizeof(float) + 1);
            ggml_dequantize(g.t[i].type, data + g.data_start + g.t[i].offset, out, g.t[i].numel);
            free(out);
        }
        gguf_header_free(&g);
    }
    return 0;
}
