// CUDA C that uses the toolkit's libraries and intrinsics (cub, libcu++ atomics / barriers / pipelines, cooperative
// groups, fp8, half intrinsics written as inline asm, the SIMD intrinsics): what nvcc -O3 -arch=sm_80 emits for them
// runs on the mock NV (tests/emulators/ptx/test_cuda_libs.py).
#include <cub/cub.cuh>
#include <cuda/atomic>
#include <cuda/functional>
#include <cuda/barrier>
#include <cuda/pipeline>
#include <cuda_fp8.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
#include <cooperative_groups/memcpy_async.h>
namespace cg = cooperative_groups;
using barrier = cuda::barrier<cuda::thread_scope_block>;

extern "C" __global__ void cub_reduce_scan(const int* x, int* sum, int* incl, int* excl) {
  typedef cub::BlockReduce<int, 128> BR;
  typedef cub::BlockScan<int, 128> BS;
  __shared__ typename BR::TempStorage tr;
  __shared__ typename BS::TempStorage ts;
  int v = x[blockIdx.x * 128 + threadIdx.x];
  int s = BR(tr).Sum(v);
  if (threadIdx.x == 0) sum[blockIdx.x] = s;
  int a, b;
  BS(ts).InclusiveSum(v, a);
  __syncthreads();
  BS(ts).ExclusiveScan(v, b, 0, cuda::maximum<>());
  incl[blockIdx.x * 128 + threadIdx.x] = a;
  excl[blockIdx.x * 128 + threadIdx.x] = b;
}
extern "C" __global__ void cub_sort(const unsigned* x, unsigned* y) {
  typedef cub::BlockRadixSort<unsigned, 64, 4> S;
  __shared__ typename S::TempStorage t;
  unsigned k[4];
  for (int i = 0; i < 4; i++) k[i] = x[threadIdx.x * 4 + i];
  S(t).Sort(k);
  for (int i = 0; i < 4; i++) y[threadIdx.x * 4 + i] = k[i];
}
extern "C" __global__ void cub_warp(const float* x, float* y) {
  typedef cub::WarpReduce<float> WR;
  __shared__ typename WR::TempStorage t[4];
  float v = x[threadIdx.x];
  float m = WR(t[threadIdx.x / 32]).Reduce(v, cuda::maximum<>());
  if (threadIdx.x % 32 == 0) y[threadIdx.x / 32] = m;
}
extern "C" __global__ void atomref(int* c, unsigned long long* u, float* f) {
  cuda::atomic_ref<int, cuda::thread_scope_device> a(*c);
  a.fetch_add(threadIdx.x, cuda::memory_order_relaxed);
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_block> b(*u);
  b.fetch_max(threadIdx.x * 3ull, cuda::memory_order_acq_rel);
  cuda::atomic_ref<float, cuda::thread_scope_system> d(*f);
  d.fetch_add(0.25f);
  int old = a.load(cuda::memory_order_acquire);
  a.store(old, cuda::memory_order_release);
}
extern "C" __global__ void fp8(const float* x, unsigned char* e4, unsigned char* e5, float* back) {
  int t = threadIdx.x;
  __nv_fp8_e4m3 a(x[t]); __nv_fp8_e5m2 b(x[t]);
  e4[t] = a.__x; e5[t] = b.__x;
  back[t] = float(a) + float(b);
}

extern "C" __global__ void bar_async(const float* in, float* out) {
  __shared__ float sm[256];
  #pragma nv_diag_suppress static_var_with_dynamic_init
  __shared__ barrier bar;
  auto block = cg::this_thread_block();
  if (block.thread_rank() == 0) init(&bar, block.size());
  block.sync();
  cuda::memcpy_async(block, sm, in + blockIdx.x * 256, sizeof(float) * 256, bar);
  bar.arrive_and_wait();
  out[blockIdx.x * 256 + threadIdx.x] = sm[255 - threadIdx.x] * 2.0f;
}
extern "C" __global__ void pipeline_stages(const int* in, int* out) {
  __shared__ int sm[2][128];
  auto block = cg::this_thread_block();
  #pragma nv_diag_suppress static_var_with_dynamic_init
  __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, 2> st;
  auto p = cuda::make_pipeline(block, &st);
  int acc = 0;
  for (int s = 0; s < 4; s++) {
    p.producer_acquire();
    cuda::memcpy_async(block, sm[s % 2], in + s * 128, sizeof(int) * 128, p);
    p.producer_commit();
    p.consumer_wait();
    acc += sm[s % 2][(threadIdx.x * 3) % 128];
    p.consumer_release();
  }
  out[threadIdx.x] = acc;
}
extern "C" __global__ void cgred(const int* in, int* out, float* fo) {
  auto block = cg::this_thread_block();
  auto tile = cg::tiled_partition<32>(block);
  int v = in[threadIdx.x];
  int s = cg::reduce(tile, v, cg::plus<int>());
  int m = cg::reduce(tile, v, cg::greater<int>());
  float f = cg::reduce(tile, (float)v * 0.5f, cg::plus<float>());
  auto t4 = cg::tiled_partition<4>(tile);
  int s4 = cg::inclusive_scan(t4, v);
  if (tile.thread_rank() == 0) { out[tile.meta_group_rank() * 2] = s; out[tile.meta_group_rank() * 2 + 1] = m; fo[tile.meta_group_rank()] = f; }
  out[8 + threadIdx.x] = s4;
}
extern "C" __global__ void cgasync(const float* in, float* out) {
  __shared__ float sm[128];
  auto block = cg::this_thread_block();
  cg::memcpy_async(block, sm, in, sizeof(float) * 128);
  cg::wait(block);
  out[threadIdx.x] = sm[(threadIdx.x + 1) % 128];
}

extern "C" __global__ void halfs(const __half2* a, const __half2* b, __half2* c, const float* f, __nv_bfloat16* bf, __half* h, int n) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  c[t] = __hfma2(a[t], b[t], __hmul2(a[t], a[t]));
  c[t + n] = __hmax2(a[t], b[t]);
  bf[t] = __float2bfloat16(f[t] * 3.0f);
  h[t] = __float2half_rz(f[t]) + __hadd(__low2half(a[t]), __high2half(b[t]));
}
extern "C" __global__ void h2atom(__half2* acc, const __half2* x, int n) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) atomicAdd(acc, x[t]);
}

// every SIMD intrinsic of device_functions.h, in name order: out[t * N + i] = intrinsic i of (a[t], b[t])
#define SIMD_ALL(X1, X2) X1(__vabs2) X1(__vabs4) X2(__vabsdiffs2) X2(__vabsdiffs4) X2(__vabsdiffu2) X2(__vabsdiffu4) X1(__vabsss2) X1(__vabsss4) X2(__vadd2) X2(__vadd4) X2(__vaddss2) X2(__vaddss4) X2(__vaddus2) X2(__vaddus4) X2(__vavgs2) X2(__vavgs4) X2(__vavgu2) X2(__vavgu4) X2(__vcmpeq2) X2(__vcmpeq4) X2(__vcmpges2) X2(__vcmpges4) X2(__vcmpgeu2) X2(__vcmpgeu4) X2(__vcmpgts2) X2(__vcmpgts4) X2(__vcmpgtu2) X2(__vcmpgtu4) X2(__vcmples2) X2(__vcmples4) X2(__vcmpleu2) X2(__vcmpleu4) X2(__vcmplts2) X2(__vcmplts4) X2(__vcmpltu2) X2(__vcmpltu4) X2(__vcmpne2) X2(__vcmpne4) X2(__vhaddu2) X2(__vhaddu4) X2(__vmaxs2) X2(__vmaxs4) X2(__vmaxu2) X2(__vmaxu4) X2(__vmins2) X2(__vmins4) X2(__vminu2) X2(__vminu4) X1(__vneg2) X1(__vneg4) X1(__vnegss2) X1(__vnegss4) X2(__vsads2) X2(__vsads4) X2(__vsadu2) X2(__vsadu4) X2(__vseteq2) X2(__vseteq4) X2(__vsetges2) X2(__vsetges4) X2(__vsetgeu2) X2(__vsetgeu4) X2(__vsetgts2) X2(__vsetgts4) X2(__vsetgtu2) X2(__vsetgtu4) X2(__vsetles2) X2(__vsetles4) X2(__vsetleu2) X2(__vsetleu4) X2(__vsetlts2) X2(__vsetlts4) X2(__vsetltu2) X2(__vsetltu4) X2(__vsetne2) X2(__vsetne4) X2(__vsub2) X2(__vsub4) X2(__vsubss2) X2(__vsubss4) X2(__vsubus2) X2(__vsubus4)
extern "C" __global__ void simd(const unsigned* a, const unsigned* b, unsigned* o) {
  int t = threadIdx.x, i = 0; unsigned x = a[t], y = b[t];
  unsigned* w = o + t * 82;
#define X1(f) w[i++] = f(x);
#define X2(f) w[i++] = f(x, y);
  SIMD_ALL(X1, X2)
#undef X1
#undef X2
}
