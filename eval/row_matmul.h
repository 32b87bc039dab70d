#ifndef KVCPT_ROW_MATMUL_H
#define KVCPT_ROW_MATMUL_H
/* The decode engine's linear layers: out (N, OC) = inp (N, IC) @ weight (OC, IC)^T
 * where every output is one dot product in a fixed order, whatever N is.
 * A row's result therefore does not depend on how many documents are decoded
 * together, which is what makes `kvcpt eval --batch N` bit-identical to
 * --batch 1. BLAS gives no such guarantee: OpenBLAS 0.3.21 switches kernels
 * with N, and a row of an sgemm with N = 2..64 differs in the last bits from
 * the same row computed with N = 1 (measured, docs/eval.md).
 * Each weight row is read once for all N rows: with N documents the weights
 * stream through the cache once per step instead of N times. */
#include <stdint.h>

void row_matmul_forward(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC);
#endif
