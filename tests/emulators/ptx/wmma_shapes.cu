// The other nvcuda::wmma shapes and types (nvcc -O3 sm_80): m32n8k16 / m8n32k16 (f16, bf16, s8, u8), m16n16k8 tf32 and
// m8n8k4 double. wmma_shapes.ptx is that PTX, kept so the tests run without nvcc:
// regenerate with `nvcc --ptx -arch=sm_80 -O3 wmma_shapes.cu -o wmma_shapes.ptx`.
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
using namespace nvcuda;

// D = A B + C for one tile: A M x K with leading dimension lda, B K x N (ldb), C and D M x N (ldc, ldd), each stored
// row- or col-major (C and D's layout chosen at run time by ccol / dcol). Acc is the accumulator's element type.
template <int M, int N, int K, typename T, typename S, typename LA, typename LB, typename Acc>
__device__ void tile(const S* a, const S* b, const Acc* c, Acc* d, int lda, int ldb, int ldc, int ldd, int ccol, int dcol) {
  wmma::fragment<wmma::matrix_a, M, N, K, T, LA> fa;
  wmma::fragment<wmma::matrix_b, M, N, K, T, LB> fb;
  wmma::fragment<wmma::accumulator, M, N, K, Acc> fc;
  wmma::load_matrix_sync(fa, a, lda);
  wmma::load_matrix_sync(fb, b, ldb);
  wmma::load_matrix_sync(fc, c, ldc, ccol ? wmma::mem_col_major : wmma::mem_row_major);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(d, fc, ldd, dcol ? wmma::mem_col_major : wmma::mem_row_major);
}

#define TILE(name, M, N, K, T, S, LA, LB, Acc) \
  extern "C" __global__ void name(const S* a, const S* b, const Acc* c, Acc* d, int lda, int ldb, int ldc, int ldd, int ccol, int dcol) { \
    tile<M, N, K, T, S, wmma::LA, wmma::LB, Acc>(a, b, c, d, lda, ldb, ldc, ldd, ccol, dcol); }

TILE(h32x8_rr, 32, 8, 16, half, half, row_major, row_major, float)
TILE(h32x8_cc, 32, 8, 16, half, half, col_major, col_major, float)
TILE(h8x32_rc, 8, 32, 16, half, half, row_major, col_major, float)
TILE(h8x32_cr, 8, 32, 16, half, half, col_major, row_major, float)
TILE(b32x8_rc, 32, 8, 16, __nv_bfloat16, __nv_bfloat16, row_major, col_major, float)
TILE(b8x32_cr, 8, 32, 16, __nv_bfloat16, __nv_bfloat16, col_major, row_major, float)
TILE(s32x8_rc, 32, 8, 16, signed char, signed char, row_major, col_major, int)
TILE(s8x32_cr, 8, 32, 16, signed char, signed char, col_major, row_major, int)
TILE(u32x8_cc, 32, 8, 16, unsigned char, unsigned char, col_major, col_major, int)
TILE(u8x32_rr, 8, 32, 16, unsigned char, unsigned char, row_major, row_major, int)
TILE(d8x8_rr, 8, 8, 4, double, double, row_major, row_major, double)
TILE(d8x8_cc, 8, 8, 4, double, double, col_major, col_major, double)
TILE(t16x16_rc, 16, 16, 8, wmma::precision::tf32, float, row_major, col_major, float)

// tf32 as CUDA's documentation has it: the loaded floats rounded with __float_to_tf32 (cvt.rna.tf32.f32) before the mma
extern "C" __global__ void tf32_cvt(const float* a, const float* b, float* c, float* ra) {
  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::load_matrix_sync(fa, a, 8);
  wmma::load_matrix_sync(fb, b, 8);
  for (int i = 0; i < fa.num_elements; i++) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
  for (int i = 0; i < fb.num_elements; i++) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
  ra[threadIdx.x] = wmma::__float_to_tf32(a[threadIdx.x]);   // the rounding itself, per thread
}

// staged through shared memory (wmma.load/store .shared) and through a generic pointer that may be either (no space)
extern "C" __global__ void h32x8_shared(const half* a, const half* b, const float* c, float* d) {
  __shared__ half sa[32 * 16], sb[16 * 8];
  __shared__ float sc[32 * 8];
  for (int i = threadIdx.x; i < 512; i += 32) sa[i] = a[i];
  for (int i = threadIdx.x; i < 128; i += 32) sb[i] = b[i];
  for (int i = threadIdx.x; i < 256; i += 32) sc[i] = c[i];
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 32, 8, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 32, 8, 16, half, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 32, 8, 16, float> fc;
  wmma::load_matrix_sync(fa, sa, 16);
  wmma::load_matrix_sync(fb, sb, 8);
  wmma::load_matrix_sync(fc, sc, 8, wmma::mem_row_major);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(sc, fc, 8, wmma::mem_row_major);
  __syncwarp();
  for (int i = threadIdx.x; i < 256; i += 32) d[i] = sc[i];
}
extern "C" __global__ void s8x32_generic(const signed char* a, const signed char* b, const int* c, int* d, int use_shared) {
  __shared__ signed char sa[8 * 16];
  for (int j = 0; j < 4; j++) sa[threadIdx.x + 32 * j] = a[threadIdx.x + 32 * j];   // (blockDim.x == 32)
  __syncwarp();
  const signed char* pa = use_shared ? sa : a;
  wmma::fragment<wmma::matrix_a, 8, 32, 16, signed char, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 8, 32, 16, signed char, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 8, 32, 16, int> fc;
  wmma::load_matrix_sync(fa, pa, 16);
  wmma::load_matrix_sync(fb, b, 32);
  wmma::load_matrix_sync(fc, c, 32, wmma::mem_row_major);
  wmma::mma_sync(fc, fa, fb, fc, true);
  wmma::store_matrix_sync(d, fc, 32, wmma::mem_row_major);
}

// C (M x N, row-major) = A (M x K, row-major) B (K x N, col-major): one warp per TM x TN tile of C, a loop over K in steps
// of TK (the chain of one mma continues the previous one's), blockDim.x = 64
template <int TM, int TN, int TK, typename T, typename S, typename Acc>
__device__ void gemm(const S* A, const S* B, Acc* C, int M, int N, int K) {
  int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int tm = warp / (N / TN), tn = warp % (N / TN);
  if (tm * TM >= M) return;
  wmma::fragment<wmma::matrix_a, TM, TN, TK, T, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, TM, TN, TK, T, wmma::col_major> b;
  wmma::fragment<wmma::accumulator, TM, TN, TK, Acc> acc;
  wmma::fill_fragment(acc, Acc(0));
  for (int k = 0; k < K; k += TK) {
    wmma::load_matrix_sync(a, A + tm * TM * K + k, K);
    wmma::load_matrix_sync(b, B + tn * TN * K + k, K);
    wmma::mma_sync(acc, a, b, acc);
  }
  wmma::store_matrix_sync(C + tm * TM * N + tn * TN, acc, N, wmma::mem_row_major);
}
extern "C" __global__ void gemm_h32x8(const half* A, const half* B, float* C, int M, int N, int K) { gemm<32, 8, 16, half, half, float>(A, B, C, M, N, K); }
extern "C" __global__ void gemm_b8x32(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K) {
  gemm<8, 32, 16, __nv_bfloat16, __nv_bfloat16, float>(A, B, C, M, N, K); }
extern "C" __global__ void gemm_t16x16(const float* A, const float* B, float* C, int M, int N, int K) {
  gemm<16, 16, 8, wmma::precision::tf32, float, float>(A, B, C, M, N, K); }
extern "C" __global__ void gemm_d8x8(const double* A, const double* B, double* C, int M, int N, int K) { gemm<8, 8, 4, double, double, double>(A, B, C, M, N, K); }
