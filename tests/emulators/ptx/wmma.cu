// Tensor-core kernels through CUDA's wmma API (nvcc -O3 sm_80 emits wmma.load / wmma.mma / wmma.store); wmma.ptx is that
// PTX, kept so the tests run without nvcc: regenerate with `nvcc --ptx -arch=sm_80 -O3 wmma.cu -o wmma.ptx`.
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
using namespace nvcuda;

// C (M x N, row-major) = alpha * A (M x K, row-major) B (K x N, row-major); one warp per 16x16 tile of C, blockDim.x = 64
extern "C" __global__ void hgemm(const half* A, const half* B, float* C, int M, int N, int K, float alpha) {
  int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int tm = warp / (N / 16), tn = warp % (N / 16);
  if (tm * 16 >= M) return;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int k = 0; k < K; k += 16) {
    wmma::load_matrix_sync(a, A + tm * 16 * K + k, K);
    wmma::load_matrix_sync(b, B + k * N + tn * 16, N);
    wmma::mma_sync(acc, a, b, acc);
  }
  for (int i = 0; i < acc.num_elements; i++) acc.x[i] = __fmul_rn(acc.x[i], alpha);
  wmma::store_matrix_sync(C + tm * 16 * N + tn * 16, acc, N, wmma::mem_row_major);
}

// D = A (bf16, col-major) x B (bf16, col-major) + C (f32, loaded col-major), staged through shared memory, stored col-major
extern "C" __global__ void bgemm_shared(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C, float* D) {
  __shared__ __nv_bfloat16 sa[256], sb[256];
  __shared__ float sc[256];
  for (int i = threadIdx.x; i < 256; i += 32) { sa[i] = A[i]; sb[i] = B[i]; sc[i] = C[i]; }
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::load_matrix_sync(a, sa, 16);
  wmma::load_matrix_sync(b, sb, 16);
  wmma::load_matrix_sync(c, sc, 16, wmma::mem_col_major);
  wmma::mma_sync(c, a, b, c);
  wmma::store_matrix_sync(D, c, 16, wmma::mem_col_major);
}

// int8 tensor cores: D = A x B + C in s32, wrapping (igemm) or saturating (.satfinite, ugemm)
extern "C" __global__ void igemm(const signed char* a, const signed char* b, int* c) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, int> fc;
  wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}
extern "C" __global__ void ugemm_sat(const unsigned char* a, const unsigned char* b, int* c) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, unsigned char, wmma::col_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, unsigned char, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, int> fc;
  wmma::load_matrix_sync(fc, c, 16, wmma::mem_col_major);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc, true);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_col_major);
}
