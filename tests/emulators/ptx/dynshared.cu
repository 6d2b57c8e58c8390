// extern __shared__ (dynamic shared memory, sized by the launch): nvcc declares it at module scope. dynshared.ptx is
// this file's PTX, kept so the tests run without nvcc: regenerate with `nvcc --ptx -arch=sm_80 -O3 dynshared.cu -o dynshared.ptx`.
extern "C" __global__ void tree_sum(const float* x, float* out, int n) {
  extern __shared__ float s[];
  int t = threadIdx.x;
  s[t] = (t < n) ? x[blockIdx.x * blockDim.x + t] : 0.f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) { if (t < k) s[t] += s[t + k]; __syncthreads(); }
  if (t == 0) out[blockIdx.x] = s[0];
}
