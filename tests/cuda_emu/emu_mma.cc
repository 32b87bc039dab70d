/* The emulated warp-level matrix instructions (see emu_mma.h): which lane
 * holds which element, and how mma accumulates.
 *
 * Layouts, from the PTX ISA's chapter "Warp Level Matrix Multiply-Accumulate
 * Instructions": the sections "Matrix Fragments for mma.m16n8k16 with
 * floating point type" and "Warp-level matrix load instruction: ldmatrix".
 * With groupID = laneid >> 2 and threadID_in_group = laneid % 4 (g, t below),
 * and a 32-bit register holding two 16-bit elements, the lower-numbered one
 * in the low half:
 *   A (16 x 16, row):  a_i, i = 0..7 (registers a0..a3 hold a0a1, a2a3, ...)
 *                      row = g      for i < 2 or 4 <= i < 6, g + 8 otherwise
 *                      col = 2t + (i & 1) for i < 4, 2t + (i & 1) + 8 otherwise
 *     so a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
 *   B (16 x 8, col):   b_i, i = 0..3 (registers b0 = b0b1, b1 = b2b3)
 *                      row (k) = 2t + (i & 1) for i < 2, 2t + (i & 1) + 8 otherwise
 *                      col (n) = g
 *   C, D (16 x 8 f32): c_i, i = 0..3: row = g for i < 2, g + 8 otherwise;
 *                      col = 2t + (i & 1)
 *   ldmatrix .m8n8 .b16, .x1/.x2/.x4: lanes 8j..8j+7 give the addresses of
 *   rows 0..7 of matrix j (16 contiguous bytes each); register j of lane l
 *   receives row g, elements 2t and 2t+1 of matrix j; with .trans, elements
 *   (2t, g) and (2t+1, g), i.e. the matrix transposed. */
#include "emu_mma.h"

#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

namespace emu {

namespace {

float bf16_value(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
uint16_t half_of(uint32_t reg, unsigned int hi) { return (uint16_t)(hi ? reg >> 16 : reg & 0xffffu); }

} // namespace

/* D = A B + C, each element accumulated in fp32 in k order: d = c, then for
 * k = 0..15, d = fmaf(a[m][k], b[k][n], d). A product of two bf16 values has
 * at most 16 significant bits, so it is exact in fp32 (outside fp32's range:
 * fmaf keeps it exact anyway) and fmaf rounds once, to nearest even, after
 * each add: 16 roundings, in a fixed order. NVIDIA does not specify the
 * hardware's internal order and precision bit for bit (docs/emulator.md), so
 * tests compare with a tolerance; this order is a definite, reproducible
 * choice whose error is within the same bound. */
void mma_m16n8k16_bf16_warp(const void *const in[32], void *const out[32]) {
    float A[16][16], B[16][8], C[16][8];
    for (unsigned int l = 0; l < 32; l++) {
        const MmaBf16Lane *p = (const MmaBf16Lane *)in[l];
        unsigned int g = l >> 2, t = l & 3u;
        for (unsigned int i = 0; i < 8; i++) {
            unsigned int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
            unsigned int col = 2 * t + (i & 1u) + (i < 4 ? 0 : 8);
            A[row][col] = bf16_value(half_of(p->a[i / 2], i & 1u));
        }
        for (unsigned int i = 0; i < 4; i++) {
            unsigned int k = 2 * t + (i & 1u) + (i < 2 ? 0 : 8);
            B[k][g] = bf16_value(half_of(p->b[i / 2], i & 1u));
        }
        for (unsigned int i = 0; i < 4; i++) C[i < 2 ? g : g + 8][2 * t + (i & 1u)] = p->c[i];
    }
    float D[16][8];
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            float d = C[m][n];
            for (int k = 0; k < 16; k++) d = fmaf(A[m][k], B[k][n], d);
            D[m][n] = d;
        }
    for (unsigned int l = 0; l < 32; l++) {
        float *d = (float *)out[l];
        unsigned int g = l >> 2, t = l & 3u;
        for (unsigned int i = 0; i < 4; i++) d[i] = D[i < 2 ? g : g + 8][2 * t + (i & 1u)];
    }
}

void ldmatrix_m8n8_warp(unsigned int num, bool trans, const void *const in[32], void *const out[32]) {
    /* M[j][r][c]: element (r, c) of matrix j, row r from lane 8j + r */
    uint16_t M[4][8][8];
    for (unsigned int j = 0; j < num; j++)
        for (unsigned int r = 0; r < 8; r++) memcpy(M[j][r], in[8 * j + r], 16);
    for (unsigned int l = 0; l < 32; l++) {
        uint32_t *reg = (uint32_t *)out[l];
        unsigned int g = l >> 2, t = l & 3u;
        for (unsigned int j = 0; j < num; j++) {
            uint16_t lo = trans ? M[j][2 * t][g] : M[j][g][2 * t];
            uint16_t hi = trans ? M[j][2 * t + 1][g] : M[j][g][2 * t + 1];
            reg[j] = (uint32_t)lo | (uint32_t)hi << 16;
        }
    }
}

} // namespace emu
