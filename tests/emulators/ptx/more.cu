#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void mathk(const float* x, float* y, double* z, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    y[i] = expf(v) + logf(fabsf(v) + 1.f) + sinf(v) * cosf(v) + sqrtf(fabsf(v)) + tanhf(v) + powf(fabsf(v), 1.5f) + erff(v) + fminf(v, 0.5f) + __expf(v) + rsqrtf(fabsf(v) + 1) + floorf(v) + roundf(v);
    z[i] = exp((double)v) + sqrt((double)v * v) + (double)v / 3.0;
  }
}
extern "C" __global__ void misc(const int* x, int* y, __nv_bfloat16* b, long long* w, unsigned long long* u, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int c = __syncthreads_count(i < n && x[i] > 0);
  if (i < n) {
    y[i] = __popc(x[i]) + __clz(x[i]) + __brev(x[i]) + __ffs(x[i]) + abs(x[i]) + min(x[i], 3) + __mulhi(x[i], 7) + c + __any_sync(0xffffffff, x[i] > 5);
    b[i] = __float2bfloat16((float)x[i] * 0.1f);
    w[i] = (long long)x[i] * x[i] % 1000003LL;
    atomicMax((int*)&y[0], x[i]); atomicCAS((int*)y, 0, 1); atomicExch((int*)y + 1, 2);
    u[i] = atomicAdd(u, 1ULL);
    float f = __int_as_float(x[i]); y[i] ^= __float_as_int(f * 2.f) ; y[i] += __float2int_rn(f) ;
  }
}
