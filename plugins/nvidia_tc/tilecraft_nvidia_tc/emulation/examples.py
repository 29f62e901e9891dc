"""Hand-written CUDA kernels in the code generator's format (``#include "tilecraft_cuda.h"``,
one ``extern "C" __global__`` entry, buffers as typed pointers): the emulator's test cases, and
examples of what it runs.

>>> cuda_source("k", VECTOR_ADD % {"n": 3}, (1, 1, 1), (32, 1, 1), []).meta["block"]
[32, 1, 1]
"""

from __future__ import annotations

from tilecraft.target.base import Source


def cuda_source(name: str, body: str, grid, block, params, dynamic_shared: int = 0) -> Source:
    """A :class:`Source` of the interface: ``params`` are (name, dtype, shape, output)."""
    return Source("nvidia_tc", name, "cuda", '#include "tilecraft_cuda.h"\n' + body, name,
                  suffix="cu",
                  meta={"entry": name, "grid": list(grid), "block": list(block),
                        "dynamic_shared_bytes": dynamic_shared,
                        "params": [{"name": p, "dtype": d, "shape": list(s), "output": o}
                                   for p, d, s, o in params]})


VECTOR_ADD = """
extern "C" __global__ void vector_add(const float* __restrict__ A, const float* __restrict__ B,
                                      float* __restrict__ C) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < %(n)d) C[i] = A[i] + B[i];
}
"""

BLOCK_ROW_SUM = """
extern "C" __global__ void row_sum(const float* __restrict__ X, float* __restrict__ Y) {
  __shared__ float partial[128];
  unsigned t = threadIdx.x, row = blockIdx.x;
  float sum = 0.0f;
  for (unsigned j = t; j < %(cols)d; j += 128) sum += X[row * %(cols)d + j];
  partial[t] = sum;
  %(barrier)s
  for (unsigned stride = 64; stride > 0; stride >>= 1) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) Y[row] = partial[0];
}
"""

WARP_ROW_MAX = """
extern "C" __global__ void row_max(const float* __restrict__ X, float* __restrict__ Y) {
  unsigned lane = threadIdx.x, row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row < %(rows)d) {  // uniform across the warp: one warp per row
    float best = -INFINITY;
    for (unsigned j = lane; j < %(cols)d; j += 32) best = fmaxf(best, X[row * %(cols)d + j]);
    for (int offset = 16; offset > 0; offset >>= 1)
      best = fmaxf(best, __shfl_down_sync(0xffffffffu, best, offset));
    best = __shfl_sync(0xffffffffu, best, 0);
    unsigned positive = __ballot_sync(0xffffffffu, X[row * %(cols)d + lane %% %(cols)d] > 0.0f);
    if (lane == 0) { Y[2 * row] = best; Y[2 * row + 1] = (float)__popc(positive); }
  }
}
"""

TILED_GEMM = """
#define TILE %(tile)d
extern "C" __global__ void tiled_gemm(const %(in_type)s* __restrict__ A,
                                      const %(in_type)s* __restrict__ B, float* __restrict__ C) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  unsigned tx = threadIdx.x, ty = threadIdx.y;
  unsigned row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
  float sum = 0.0f;
  for (unsigned k0 = 0; k0 < %(K)d; k0 += TILE) {
    As[ty][tx] = (row < %(M)d && k0 + tx < %(K)d) ? (float)A[row * %(K)d + k0 + tx] : 0.0f;
    Bs[ty][tx] = (k0 + ty < %(K)d && col < %(N)d) ? (float)B[(k0 + ty) * %(N)d + col] : 0.0f;
    __syncthreads();
    for (unsigned k = 0; k < TILE; ++k) sum += As[ty][k] * Bs[k][tx];
    %(second_barrier)s
  }
  if (row < %(M)d && col < %(N)d) C[row * %(N)d + col] = sum;
}
"""

WMMA_GEMM = """
using namespace nvcuda;
extern "C" __global__ void wmma_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                     float* __restrict__ C) {
  // one warp per 16x16 tile of C; blockDim (32, WARPS): warp y of block x
  unsigned tile = blockIdx.x * blockDim.y + threadIdx.y;
  unsigned tile_m = tile / (%(N)d / 16), tile_n = tile %% (%(N)d / 16);
  if (tile_m >= %(M)d / 16) return;  // whole warps only
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::%(b_layout)s> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (unsigned k = 0; k < %(K)d; k += 16) {
    wmma::load_matrix_sync(a, A + tile_m * 16 * %(K)d + k, %(K)d);
    wmma::load_matrix_sync(b, %(b_address)s, %(b_ldm)d);
    wmma::mma_sync(acc, a, b, acc);
  }
  wmma::store_matrix_sync(C + tile_m * 16 * %(N)d + tile_n * 16, acc, %(N)d, wmma::mem_row_major);
}
"""

CP_ASYNC_SCALE = """
// out[i] = in[i] + in[the mirror of i in its chunk], chunk by chunk of 4 * blockDim floats,
// the next chunk copied by cp.async (16 bytes a thread) while this one is read
extern "C" __global__ void cp_async_mirror(const float* __restrict__ X, float* __restrict__ Y) {
  extern __shared__ unsigned char tc_dynamic_smem[];
  float* buffers = reinterpret_cast<float*>(tc_dynamic_smem);
  const unsigned chunk = 4 * blockDim.x, t = threadIdx.x;
  const unsigned chunks = %(chunks)d, base = blockIdx.x * chunks * chunk;
  tc_cp_async_16(buffers + 4 * t, X + base + 4 * t);
  tc_cp_async_commit();
  for (unsigned c = 0; c < chunks; ++c) {
    float* current = buffers + (c %% 2) * chunk;
    if (c + 1 < chunks) {
      float* next = buffers + ((c + 1) %% 2) * chunk;
      tc_cp_async_16(next + 4 * t, X + base + (c + 1) * chunk + 4 * t);
      tc_cp_async_commit();
      %(wait_one)s
    } else {
      %(wait_all)s
    }
    __syncthreads();
    for (unsigned e = 0; e < 4; ++e) {
      unsigned i = 4 * t + e;
      Y[base + c * chunk + i] = current[i] + current[chunk - 1 - i];
    }
    __syncthreads();
  }
}
"""

DIVERGENT_BARRIER = """
extern "C" __global__ void divergent(const float* __restrict__ X, float* __restrict__ Y) {
  __shared__ float s[64];
  s[threadIdx.x] = X[threadIdx.x];
  if (threadIdx.x < 16) return;
  __syncthreads();
  Y[threadIdx.x] = s[63 - threadIdx.x];
}
"""

BARRIERS_ON_TWO_LINES = """
extern "C" __global__ void two_barriers(const float* __restrict__ X, float* __restrict__ Y) {
  if (threadIdx.x % 2) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  Y[threadIdx.x] = X[threadIdx.x];
}
"""

HALF_ROUND_TRIP = """
extern "C" __global__ void round_trip(const float* __restrict__ X, __half* __restrict__ H,
                                      __nv_bfloat16* __restrict__ B, float* __restrict__ S) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < %(n)d) {
    H[i] = __float2half(X[i]);
    B[i] = __float2bfloat16(X[i]);
    __half h = H[i];
    S[i] = __half2float(h * h + h) + __bfloat162float(B[i]);
  }
}
"""

ATOMIC_SUM = """
extern "C" __global__ void atomic_sum(const float* __restrict__ X, float* __restrict__ Y) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < %(n)d) atomicAdd(Y, X[i]);
}
"""
