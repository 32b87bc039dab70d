/* libFuzzer target: feeds each input, as a whole file image, to the three
 * binary-format parsers (safetensors, native model, training checkpoint).
 * They must return 0 or -1 without crashing, leaking or reading out of
 * bounds (built with ASan + UBSan by `make fuzz`). */
#include <stdint.h>
#include <stdlib.h>

#include "../../checkpoints/ckpt.h"
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
    return 0;
}
