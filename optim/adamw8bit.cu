/* AdamW step on the GPU: one thread block per 256-element quantization
 * block (grid-stride), the per-element arithmetic shared with the CPU
 * oracle through optim/adamw_math.h. */
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "../common/util.h"
}
#include "../kernels/cuda_common.cuh"
#include "../kernels/cuda_device.h"
#include "optim_cuda.h"

#define NO_BAD 0xffffffffffffffffull

typedef struct {
    long long offset, numel, state_offset, absmax_offset, first_block;
    int quantized;
    /* placed steps only (optim_cuda_set_places): where the parameters are */
    long long param_offset;
    int param_bf16, stochastic;
} DevSegment;
static_assert(sizeof(DevSegment) == OPTIM_DEV_SEGMENT_BYTES, "optim_device_bytes counts DevSegment's size");

/* Where a step finds the parameters: one buffer of one dtype at the
 * gradients' offsets, or per segment as optim_cuda_set_places said. */
typedef enum { PLACE_ALL_F32 = 0, PLACE_ALL_BF16 = 1, PLACE_SEGMENTS = 2 } PlaceMode;

typedef struct {
    float *f32;
    __nv_bfloat16 *b16;
    PlaceMode mode;
    unsigned long long sr_seed;
    long long step;
} ParamsArg;

struct OptimCuda {
    int nseg;
    long long nblocks, n_code, n_absmax, n_f32;
    OptimKind kind;
    OptimSegment *host_seg;
    DevSegment *seg;
    uint8_t *m_code, *v_code;
    float *m_absmax, *v_absmax, *m32, *v32;
    float *maps; /* code_m[256], code_v[256], mid_m[255], mid_v[255] */
    uint8_t zero_m, zero_v;
    unsigned long long *bad;
    int placed;
    unsigned long long sr_seed;
    OptimBadGrad last_bad;
    int sm_count;
};

__device__ __forceinline__ float load_f(const float *x, long long i) { return x[i]; }
__device__ __forceinline__ float load_f(const __nv_bfloat16 *x, long long i) { return __bfloat162float(x[i]); }

/* One segment's parameter element: its dtype and offset are uniform across
 * a thread block (a block never straddles segments), so no divergence. */
struct ParamRef {
    bool b16, stochastic;
    long long at;
};

__device__ __forceinline__ ParamRef param_ref(const ParamsArg &pa, const DevSegment &sg, long long j) {
    if (pa.mode == PLACE_SEGMENTS) return ParamRef{sg.param_bf16 != 0, sg.stochastic != 0, sg.param_offset + j};
    return ParamRef{pa.mode == PLACE_ALL_BF16, false, sg.offset + j};
}

__device__ __forceinline__ float param_load(const ParamsArg &pa, ParamRef r) {
    return r.b16 ? __bfloat162float(pa.b16[r.at]) : pa.f32[r.at];
}

/* index: the element's offset in the gradient buffer, the key of its random bits */
__device__ __forceinline__ void param_store(const ParamsArg &pa, ParamRef r, long long index, float v) {
    if (!r.b16) pa.f32[r.at] = v;
    else if (r.stochastic)
        pa.b16[r.at] = __float2bfloat16_rn(adamw_round_bf16_sr(v, adamw_sr_bits(pa.sr_seed, pa.step, index)));
    else pa.b16[r.at] = __float2bfloat16_rn(v);
}

__device__ __forceinline__ int segment_of(const DevSegment *seg, int nseg, long long b) {
    int lo = 0, hi = nseg - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (seg[mid].first_block <= b) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

template <typename G>
__global__ void adamw_check_kernel(const DevSegment *seg, int nseg, long long nblocks, const G *grads, AdamWScalars s,
                                   unsigned long long *bad) {
    for (long long b = blockIdx.x; b < nblocks; b += gridDim.x) {
        const DevSegment sg = seg[segment_of(seg, nseg, b)];
        long long j = (b - sg.first_block) * 256 + threadIdx.x;
        if (j < sg.numel && !adamw_grad_ok(&s, load_f(grads, sg.offset + j)))
            atomicMin(bad, (unsigned long long)(b * 256 + threadIdx.x));
    }
}

__device__ __forceinline__ float block_max(float x, float *scratch) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = x;
    __syncthreads();
    float r = scratch[0];
    for (int w = 1; w < 8; w++) r = fmaxf(r, scratch[w]);
    __syncthreads();
    return r;
}

template <typename G>
__global__ void __launch_bounds__(256)
    adamw_step_kernel(const DevSegment *seg, int nseg, long long nblocks, ParamsArg pa, const G *grads, uint8_t *m_code,
                      uint8_t *v_code, float *m_absmax, float *v_absmax, float *m32, float *v32, const float *maps,
                      uint8_t zero_m, uint8_t zero_v, AdamWScalars s, const unsigned long long *bad) {
    if (*bad != NO_BAD) return;
    __shared__ float code_m[256], code_v[256], mid_m[256], mid_v[256], scratch_m[8], scratch_v[8];
    const int t = threadIdx.x;
    code_m[t] = maps[t];
    code_v[t] = maps[256 + t];
    if (t < 255) mid_m[t] = maps[512 + t], mid_v[t] = maps[767 + t];
    __syncthreads();
    for (long long b = blockIdx.x; b < nblocks; b += gridDim.x) {
        const DevSegment sg = seg[segment_of(seg, nseg, b)];
        const long long j = (b - sg.first_block) * 256 + t;
        const bool valid = j < sg.numel;
        const float g = valid ? load_f(grads, sg.offset + j) : 0.0f;
        const ParamRef pr = param_ref(pa, sg, j);
        const float p = valid ? param_load(pa, pr) : 0.0f;
        if (!sg.quantized) { /* uniform across the thread block */
            if (valid) {
                float m = m32[sg.state_offset + j], v = v32[sg.state_offset + j];
                adamw_moments(&s, g, &m, &v);
                m32[sg.state_offset + j] = m;
                v32[sg.state_offset + j] = v;
                param_store(pa, pr, sg.offset + j, adamw_param(&s, p, m, v));
            }
            continue;
        }
        const long long qb = sg.absmax_offset + (b - sg.first_block);
        float m = 0.0f, v = 0.0f;
        if (valid) {
            m = AW_MUL(code_m[m_code[sg.state_offset + j]], m_absmax[qb]);
            v = AW_MUL(code_v[v_code[sg.state_offset + j]], v_absmax[qb]);
            adamw_moments(&s, g, &m, &v);
        }
        const float new_am = block_max(fabsf(m), scratch_m);
        const float new_av = block_max(fabsf(v), scratch_v);
        if (valid) {
            param_store(pa, pr, sg.offset + j, adamw_param(&s, p, m, v));
            m_code[sg.state_offset + j] = new_am > 0.0f ? adamw_quantize(mid_m, AW_DIV(m, new_am)) : zero_m;
            v_code[sg.state_offset + j] = new_av > 0.0f ? adamw_quantize(mid_v, AW_DIV(v, new_av)) : zero_v;
        }
        if (t == 0) m_absmax[qb] = new_am, v_absmax[qb] = new_av;
    }
}

extern "C" OptimCuda *optim_cuda_create(const Optimizer *h) {
    OptimCuda *o = (OptimCuda *)xcalloc(1, sizeof *o);
    o->nseg = h->nseg;
    o->kind = h->kind;
    o->nblocks = h->nblocks, o->n_code = h->n_code, o->n_absmax = h->n_absmax, o->n_f32 = h->n_f32;
    o->host_seg = (OptimSegment *)xcalloc((size_t)h->nseg + 1, sizeof(OptimSegment));
    memcpy(o->host_seg, h->seg, (size_t)h->nseg * sizeof(OptimSegment));
    DevSegment *ds = (DevSegment *)xcalloc((size_t)h->nseg + 1, sizeof(DevSegment));
    for (int i = 0; i < h->nseg; i++)
        ds[i] = DevSegment{h->seg[i].offset,
                           h->seg[i].numel,
                           h->seg[i].state_offset,
                           h->seg[i].absmax_offset,
                           h->seg[i].first_block,
                           h->seg[i].quantized,
                           h->seg[i].offset,
                           0,
                           0};
    CUDA_CHECK(cudaMalloc(&o->seg, ((size_t)h->nseg + 1) * sizeof(DevSegment)));
    cuda_memcpy_h2d(o->seg, ds, (size_t)h->nseg * sizeof(DevSegment));
    free(ds);
    CUDA_CHECK(cudaMalloc(&o->m_code, (size_t)h->n_code + 1));
    CUDA_CHECK(cudaMalloc(&o->v_code, (size_t)h->n_code + 1));
    CUDA_CHECK(cudaMalloc(&o->m_absmax, ((size_t)h->n_absmax + 1) * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&o->v_absmax, ((size_t)h->n_absmax + 1) * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&o->m32, ((size_t)h->n_f32 + 1) * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&o->v32, ((size_t)h->n_f32 + 1) * sizeof(float)));
    float maps[256 * 2 + 255 * 2];
    memcpy(maps, h->map_m.code, 256 * sizeof(float));
    memcpy(maps + 256, h->map_v.code, 256 * sizeof(float));
    memcpy(maps + 512, h->map_m.mid, 255 * sizeof(float));
    memcpy(maps + 767, h->map_v.mid, 255 * sizeof(float));
    CUDA_CHECK(cudaMalloc(&o->maps, sizeof maps));
    cuda_memcpy_h2d(o->maps, maps, sizeof maps);
    o->zero_m = h->map_m.zero_index, o->zero_v = h->map_v.zero_index;
    CUDA_CHECK(cudaMalloc(&o->bad, sizeof(unsigned long long)));
    CUDA_CHECK(cudaDeviceGetAttribute(&o->sm_count, cudaDevAttrMultiProcessorCount, 0));
    optim_cuda_upload(o, h);
    return o;
}

extern "C" void optim_cuda_free(OptimCuda *o) {
    if (!o) return;
    void *ptrs[] = {o->seg, o->m_code, o->v_code, o->m_absmax, o->v_absmax, o->m32, o->v32, o->maps, o->bad};
    for (void *p : ptrs) CUDA_CHECK(cudaFree(p));
    free(o->host_seg);
    free(o);
}

static void check_same_shape(const OptimCuda *o, const Optimizer *h) {
    KV_CHECK(h->kind == o->kind && h->nseg == o->nseg && h->n_code == o->n_code && h->n_absmax == o->n_absmax &&
                 h->n_f32 == o->n_f32,
             "optimizer: host and device states have different shapes (%s, %d segments vs %s, %d)",
             optim_kind_name(h->kind), h->nseg, optim_kind_name(o->kind), o->nseg);
}

extern "C" void optim_cuda_download(const OptimCuda *o, Optimizer *h) {
    check_same_shape(o, h);
    cuda_memcpy_d2h(h->m_code, o->m_code, (size_t)o->n_code);
    cuda_memcpy_d2h(h->v_code, o->v_code, (size_t)o->n_code);
    cuda_memcpy_d2h(h->m_absmax, o->m_absmax, (size_t)o->n_absmax * 4);
    cuda_memcpy_d2h(h->v_absmax, o->v_absmax, (size_t)o->n_absmax * 4);
    cuda_memcpy_d2h(h->m32, o->m32, (size_t)o->n_f32 * 4);
    cuda_memcpy_d2h(h->v32, o->v32, (size_t)o->n_f32 * 4);
}

extern "C" void optim_cuda_upload(OptimCuda *o, const Optimizer *h) {
    check_same_shape(o, h);
    cuda_memcpy_h2d(o->m_code, h->m_code, (size_t)o->n_code);
    cuda_memcpy_h2d(o->v_code, h->v_code, (size_t)o->n_code);
    cuda_memcpy_h2d(o->m_absmax, h->m_absmax, (size_t)o->n_absmax * 4);
    cuda_memcpy_h2d(o->v_absmax, h->v_absmax, (size_t)o->n_absmax * 4);
    cuda_memcpy_h2d(o->m32, h->m32, (size_t)o->n_f32 * 4);
    cuda_memcpy_h2d(o->v32, h->v32, (size_t)o->n_f32 * 4);
}

static unsigned int grid_of(const OptimCuda *o) {
    long long want = (long long)o->sm_count * 8;
    return (unsigned int)(o->nblocks < want ? o->nblocks : want);
}

/* Resets the verdict and launches the check of every gradient. */
static void launch_check(OptimCuda *o, const void *grads, OptimDtype gd, const AdamWScalars &s) {
    CUDA_CHECK(cudaMemset(o->bad, 0xff, sizeof(unsigned long long)));
    const unsigned int grid = grid_of(o);
    if (gd == OPTIM_F32)
        adamw_check_kernel<float><<<grid, 256>>>(o->seg, o->nseg, o->nblocks, (const float *)grads, s, o->bad);
    else
        adamw_check_kernel<__nv_bfloat16>
            <<<grid, 256>>>(o->seg, o->nseg, o->nblocks, (const __nv_bfloat16 *)grads, s, o->bad);
    CUDA_CHECK_LAUNCH();
}

/* The update; a no-op on the device when the check found a bad gradient. */
template <typename G>
static void launch_step(OptimCuda *o, const ParamsArg &pa, const void *grads, const AdamWScalars &s) {
    adamw_step_kernel<G><<<grid_of(o), 256>>>(o->seg, o->nseg, o->nblocks, pa, (const G *)grads, o->m_code, o->v_code,
                                              o->m_absmax, o->v_absmax, o->m32, o->v32, o->maps, o->zero_m, o->zero_v,
                                              s, o->bad);
    CUDA_CHECK_LAUNCH();
}

static float read_device_value(const void *buf, OptimDtype dt, long long i) {
    if (dt == OPTIM_F32) {
        float x;
        cuda_memcpy_d2h(&x, (const float *)buf + i, 4);
        return x;
    }
    __nv_bfloat16 x;
    cuda_memcpy_d2h(&x, (const __nv_bfloat16 *)buf + i, 2);
    return __bfloat162float(x);
}

/* The check's verdict (a synchronizing copy): 0, or 1 with last_bad naming
 * the first unusable gradient (segment, element, value). */
static int read_verdict(OptimCuda *o, const void *grads, OptimDtype gd) {
    unsigned long long bad;
    cuda_memcpy_d2h(&bad, o->bad, sizeof bad);
    if (bad == NO_BAD) return 0;
    int lo = 0, hi = o->nseg - 1;
    long long b = (long long)(bad / 256);
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (o->host_seg[mid].first_block <= b) lo = mid;
        else hi = mid - 1;
    }
    o->last_bad.segment = lo;
    o->last_bad.index = (long long)bad - o->host_seg[lo].first_block * 256;
    o->last_bad.value = read_device_value(grads, gd, o->host_seg[lo].offset + o->last_bad.index);
    return 1;
}

/* Both launches, then the check's verdict. */
static int step_params(OptimCuda *o, const ParamsArg &pa, const void *grads, OptimDtype gd, const AdamWHyper *h,
                       int64_t step) {
    AdamWScalars s = adamw_scalars(h, step);
    if (o->nblocks == 0) return 0;
    launch_check(o, grads, gd, s);
    if (gd == OPTIM_F32) launch_step<float>(o, pa, grads, s);
    else launch_step<__nv_bfloat16>(o, pa, grads, s);
    if (!read_verdict(o, grads, gd)) return 0;
    warnf("optimizer step %lld skipped (cuda): unusable gradient %g (x grad scale %g) at segment %d element %lld; "
          "parameters and optimizer states are unchanged",
          (long long)step, o->last_bad.value, h->grad_scale, o->last_bad.segment, (long long)o->last_bad.index);
    return 1;
}

extern "C" int optim_cuda_check(OptimCuda *o, const void *grads, OptimDtype gd, const AdamWHyper *h, int64_t step) {
    AdamWScalars s = adamw_scalars(h, step);
    if (o->nblocks == 0) return 0;
    launch_check(o, grads, gd, s);
    return read_verdict(o, grads, gd);
}

extern "C" int optim_cuda_step(OptimCuda *o, void *params, OptimDtype pd, const void *grads, OptimDtype gd,
                               const AdamWHyper *h, int64_t step) {
    ParamsArg pa = {NULL, NULL, pd == OPTIM_F32 ? PLACE_ALL_F32 : PLACE_ALL_BF16, 0, (long long)step};
    if (pd == OPTIM_F32) pa.f32 = (float *)params;
    else pa.b16 = (__nv_bfloat16 *)params;
    return step_params(o, pa, grads, gd, h, step);
}

extern "C" void optim_cuda_set_places(OptimCuda *o, const OptimPlace *place, uint64_t sr_seed) {
    DevSegment *ds = (DevSegment *)xcalloc((size_t)o->nseg + 1, sizeof(DevSegment));
    cuda_memcpy_d2h(ds, o->seg, (size_t)o->nseg * sizeof(DevSegment));
    for (int i = 0; i < o->nseg; i++) {
        KV_CHECK(place[i].offset >= 0 && (place[i].dtype == OPTIM_F32 || place[i].dtype == OPTIM_BF16) &&
                     (!place[i].stochastic || place[i].dtype == OPTIM_BF16),
                 "optimizer: segment %d placed at offset %lld, dtype %d, stochastic %d (stochastic rounding is "
                 "for bf16 parameters)",
                 i, (long long)place[i].offset, (int)place[i].dtype, place[i].stochastic);
        ds[i].param_offset = place[i].offset;
        ds[i].param_bf16 = place[i].dtype == OPTIM_BF16;
        ds[i].stochastic = place[i].stochastic != 0;
    }
    cuda_memcpy_h2d(o->seg, ds, (size_t)o->nseg * sizeof(DevSegment));
    free(ds);
    o->placed = 1;
    o->sr_seed = sr_seed;
}

extern "C" int optim_cuda_step_placed(OptimCuda *o, float *p32, void *p16, const void *grads, OptimDtype gd,
                                      const AdamWHyper *h, int64_t step) {
    KV_CHECK(o->placed, "optim_cuda_step_placed: call optim_cuda_set_places first");
    ParamsArg pa = {p32, (__nv_bfloat16 *)p16, PLACE_SEGMENTS, o->sr_seed, (long long)step};
    return step_params(o, pa, grads, gd, h, step);
}

extern "C" int64_t optim_cuda_bytes(const OptimCuda *o) {
    OptimStateCounts n = {o->n_code, o->n_absmax, o->n_f32};
    return optim_device_bytes(&n, o->nseg);
}

extern "C" const OptimBadGrad *optim_cuda_bad(const OptimCuda *o) { return &o->last_bad; }
