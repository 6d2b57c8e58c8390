// Device printf, assert, malloc and calls the emulator does not inline (test_printf_assert.py).
#include <cstdio>
#include <cassert>
#include <cstdint>

extern "C" __global__ void conversions(const int* x, const double* d, int* ret) {
  int t = threadIdx.x, v = x[t];
  long long ll = (long long)v * -1234567890123LL;
  unsigned long long ull = 0xFFFFFFFF00000000ULL + (unsigned)v;
  char c = 'a' + t;
  short sh = (short)(v * 1000);
  float f = (float)d[t];
  int r1 = printf("%d|%i|%u|%x|%X|%o|%c|%s|%f|%e|%g|%p|%p|%ld|%lld|%lu|%llu|%%|%5d|%-5d|%05d|%+d|% d|%.3d|%#x|%#o|",
                  v, -v, -v, v, v, v, c, "str", d[t], d[t], d[t], (void*)(uintptr_t)(0x1000 + t), (void*)0, (long)ll, ll, (unsigned long)ull, ull,
                  v, v, v, v, v, v, v, v);
  int r2 = printf("%10.4f|%-10.2e|%G|%hd|%hhu|%E|%.0f|%*d|%.*f|%-8s|%.2s|%F|%a\n", d[t], d[t], d[t], sh, v + 250, f, d[t], t + 3, v, t, d[t], "ab", "xyz",
                  d[t], d[t]);
  ret[t] = r1 * 100 + r2;
}

extern "C" __global__ void ordered(int* y) {
  int t = threadIdx.x, b = blockIdx.x;
  printf("block %d thread %d first\n", b, t);
  if (t & 1) printf("block %d thread %d odd\n", b, t);
  for (int i = 0; i < t; i++) printf("b%d t%d i%d\n", b, t, i);
  y[b * blockDim.x + t] = printf("no arguments\n");
}

extern "C" __global__ void many(int* y) {
  int t = threadIdx.x;
  y[t] = printf("%d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d\n",
                t, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32);
}

extern "C" __global__ void checked(const int* x, int* y) { int v = x[threadIdx.x]; assert(v < 100); y[threadIdx.x] = v * 2; }

extern "C" __global__ void heap(const int* x, int* y) {
  int t = threadIdx.x;
  if (x[t] > 0) { int* p = (int*)malloc(16); p[0] = t; y[t] = p[0]; free(p); }
  else y[t] = -t;
}

__device__ __noinline__ long long fib(int k) { return k < 2 ? k : fib(k - 1) + fib(k - 2); }
extern "C" __global__ void fibk(const int* x, long long* y) { y[threadIdx.x] = fib(x[threadIdx.x]); }

__device__ __noinline__ int f_add(int a, int b) { return a + b; }
__device__ __noinline__ int f_mul(int a, int b) { return a * b; }
extern "C" __global__ void fsel(const int* x, int* y) { int v = x[threadIdx.x]; int (*f)(int, int) = (v & 1) ? f_add : f_mul; y[threadIdx.x] = f(v, 7); }

extern "C" __global__ void plain(const int* x, int* y) { y[threadIdx.x] = x[threadIdx.x] + 1; }
