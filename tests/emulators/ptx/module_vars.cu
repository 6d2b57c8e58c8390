// Module-scope variables whose initializers nvcc writes as addresses, floats and byte arrays (test_module_vars.py).
struct S { int a; int* p; char c; double d; };
struct __attribute__((packed)) P { char c; int* p; };
typedef int (*fn)(int);

__device__ int a0[2] = {10, 11};
__device__ int a1[2] = {20, 21};
__device__ int* tab[2] = {a0, a1};                          // {generic(a0), generic(a1)}
__device__ int gv[4] = {1, 2, 3, 4};
__device__ int* gp = &gv[2];                                // generic(gv)+8
__device__ const char* const names[3] = {"ab", "cd", nullptr};   // string literals: {generic($str), generic($str$1), 0}
__device__ float gf = 1.5f;                                 // .f32 0f3FC00000
__constant__ double cd = 2.5;                               // .const .f64 0d4004000000000000
__constant__ int cgv[3] = {9, 8, 7};
__constant__ const int* cptr = cgv + 1;                     // .const .u64 generic(cgv)+4
__device__ S s = {7, &gv[1], 'x', -2.25};                   // .u64 {7, generic(gv)+4, 120, <bits of -2.25>}
__device__ P pk = {5, &gv[3]};                              // .u8 {5, 0xFF(generic(gv)+12), 0xFF00(...), ...}
__device__ int m2[2][3] = {{1, 2}, {4, 5, 6}};
__device__ long long ll[2] = {-5, 0x7fffffffffffffffLL};
__device__ int* pp_target = nullptr;
__device__ int** pp = &pp_target;                           // generic(pp_target)

__device__ __noinline__ int inc(int x) { return x + 1; }
__device__ fn ftab[1] = {inc};                              // {_Z3inci}: a function's address

extern "C" __global__ void ptab(int* y) { y[threadIdx.x] = tab[threadIdx.x & 1][threadIdx.x >> 1 & 1]; }
extern "C" __global__ void ptrinit(int* y) { y[threadIdx.x] = gp[threadIdx.x & 1]; }
extern "C" __global__ void strtab(int* y) {
  const char* s = names[threadIdx.x % 3];
  y[threadIdx.x] = s ? s[threadIdx.x >> 2 & 1] : -1;
}
extern "C" __global__ void fscal(float* y) { y[threadIdx.x] = gf * threadIdx.x + (float)cd; }
extern "C" __global__ void structs(long long* y) {
  y[0] = s.a; y[1] = *s.p; y[2] = s.c; y[3] = (long long)(s.d * 4);
  y[4] = pk.c; y[5] = *pk.p; y[6] = *cptr; y[7] = ll[0]; y[8] = ll[1];
  y[9] = m2[0][2] * 100 + m2[1][0] * 10 + m2[1][2]; y[10] = (*pp == nullptr);
}
extern "C" __global__ void fptr(int* y) { y[threadIdx.x] = ftab[0](y[threadIdx.x]); }
