#include <cuda_fp16.h>
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void reduce_sum(const float* x, float* out, int n) {
  __shared__ float s[256];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) { if (t < k) s[t] += s[t + k]; __syncthreads(); }
  if (t == 0) out[blockIdx.x] = s[0];
}
extern "C" __global__ void warp_sum(const int* x, int* out) {
  int v = x[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}
extern "C" __global__ void histo(const unsigned* x, unsigned* h, int n) {
  __shared__ unsigned s[16];
  if (threadIdx.x < 16) s[threadIdx.x] = 0;
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&s[x[i] % 16], 1u);
  __syncthreads();
  if (threadIdx.x < 16) atomicAdd(&h[threadIdx.x], s[threadIdx.x]);
}
extern "C" __global__ void collatz(const int* x, int* steps, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = x[i], c = 0;
  while (v > 1) { v = (v % 2) ? 3 * v + 1 : v / 2; c++; }
  steps[i] = c;
}
extern "C" __global__ void idiv(const int* a, const int* b, int* q, int* r, unsigned* uq, long long* w, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { q[i] = a[i] / b[i]; r[i] = a[i] % b[i]; uq[i] = (unsigned)a[i] / (unsigned)b[i]; w[i] = (long long)a[i] * b[i] / 7; }
}
extern "C" __global__ void casts(const float* x, int* i32, unsigned char* u8, double* d, __half* h, float* f2, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { i32[i] = (int)x[i]; u8[i] = (unsigned char)x[i]; d[i] = (double)x[i] * 3.0; h[i] = __float2half(x[i]); f2[i] = (float)(long long)x[i]; }
}
extern "C" __global__ void halfmath(const __half* a, const __half* b, __half* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = __hadd(__hmul(a[i], b[i]), a[i]);
}
#define T 16
extern "C" __global__ void matmul(const float* A, const float* B, float* C, int N) {
  __shared__ float As[T][T], Bs[T][T];
  int r = blockIdx.y * T + threadIdx.y, c = blockIdx.x * T + threadIdx.x;
  float acc = 0.f;
  for (int k0 = 0; k0 < N; k0 += T) {
    As[threadIdx.y][threadIdx.x] = (r < N && k0 + threadIdx.x < N) ? A[r * N + k0 + threadIdx.x] : 0.f;
    Bs[threadIdx.y][threadIdx.x] = (c < N && k0 + threadIdx.y < N) ? B[(k0 + threadIdx.y) * N + c] : 0.f;
    __syncthreads();
    for (int k = 0; k < T; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (r < N && c < N) C[r * N + c] = acc;
}
extern "C" __global__ void i128(const long long* a, long long* y, int n) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  __int128 x = ((__int128)a[4 * t] << 64) | (unsigned long long)a[4 * t + 1];
  __int128 z = ((__int128)a[4 * t + 2] << 64) | (unsigned long long)a[4 * t + 3];
  __int128 q = x / z, r = x % z;
  unsigned __int128 uq = (unsigned __int128)x / (unsigned __int128)z;
  long long* o = y + t * 6;
  o[0] = (long long)(q >> 64); o[1] = (long long)q; o[2] = (long long)(r >> 64); o[3] = (long long)r;
  o[4] = (long long)(uq >> 64); o[5] = (long long)uq;
}
