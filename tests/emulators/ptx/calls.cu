// Kernels whose nvcc -O3 sm_80 PTX has .func and call (calls.ptx is that PTX, kept so the tests run without nvcc:
// regenerate with `nvcc --ptx -arch=sm_80 -O3 calls.cu -o calls.ptx`).
#include <cuda_fp16.h>

// sin/cos of doubles: large arguments take nvcc's __internal_trig_reduction_slowpathd (a .func with a .local depot)
extern "C" __global__ void dsincos(double* out, const double* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { out[2 * i] = sin(x[i]); out[2 * i + 1] = cos(x[i]); }
}

__device__ __noinline__ float axpb(float a, int b) { return a * b + 1.0f; }
__device__ __noinline__ int collatz(unsigned v) {   // a loop and early returns inside the callee
  int k = 0;
  while (v != 1) { if (k > 1000) return -1; v = (v & 1) ? 3 * v + 1 : v / 2; k++; }
  return k;
}
__device__ __noinline__ float twice(float a, int b) { return axpb(a, b) + axpb(-a, b + 1); }   // a call inside a callee

extern "C" __global__ void calls(float* out, int* steps, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = axpb(x[i], i) - twice(x[i], 3);    // three call sites of axpb once inlined
  steps[i] = (i % 3 == 0) ? collatz(i + 1) : -2;   // a call in a divergent branch
}
