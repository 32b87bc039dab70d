#ifndef KVCPT_QMAP_H
#define KVCPT_QMAP_H
/* The 8-bit dynamic quantization maps of bitsandbytes' blockwise optimizers
 * (create_dynamic_map): 256 sorted fp32 codes in [-1, 1] (signed, for Adam's
 * first moment) or [0, 1] (unsigned, for the second moment). A value x of a
 * block with absmax a is stored as the index of the code nearest to x / a. */
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QMAP_CODES 256

typedef struct {
    float code[QMAP_CODES];        /* ascending */
    float mid[QMAP_CODES - 1];     /* mid[i] = (code[i] + code[i+1]) / 2 in fp32 */
    uint8_t zero_index;            /* code[zero_index] == 0 */
} QuantMap;

/* Builds the signed (m) or unsigned (v) map; see docs/optim.md. */
void qmap_build(QuantMap *q, int is_signed);

#ifdef __cplusplus
}
#endif
#endif
