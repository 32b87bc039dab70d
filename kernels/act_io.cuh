#ifndef KVCPT_ACT_IO_CUH
#define KVCPT_ACT_IO_CUH
/* Loads and stores of activation tensors whose element type is a template
 * parameter: float in the fp32 engine, bf16 in the bf16 one
 * (model/decoder_layer.h). A kernel reads either into fp32 registers, computes
 * in fp32 and rounds once (nearest even) when it stores bf16. */
#include "bf16.h"

__device__ __forceinline__ float act_f32(float x) { return x; }
__device__ __forceinline__ float act_f32(bf16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T act_from_f32(float x);
template <> __device__ __forceinline__ float act_from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 act_from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }
#endif
