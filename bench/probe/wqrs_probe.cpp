// bench/probe/wqrs_probe.cpp: a stand-alone check and timing of kernels/gemm_wqrs.cuh (the i4
// weight-only product with the weights as wgmma's register operand), outside the plan and the
// runtime, for the experiment in kernels/NOTES.md (thirty-sixth session). Not part of ffnc's
// build: bench/probe/build.sh compiles it and wqrs_kernel.cu (to a cubin, loaded through the
// driver API) with nvcc, here; it runs on the GPU machine:
//
//   wqrs_probe CUBIN M N K S G SPLITS [REPS [BM [STATS]]]
//
// Random codes (levels -7..7) and scales, random bf16 activations (seed printed); the outputs
// (poisoned first) and the rows' sums of squares are checked against a double-precision
// reference on 4096 sampled outputs (printed: the largest error relative to the outputs' RMS),
// then timed (median of REPS launches, CUDA events, after 300 ms of launches to raise the clocks).
#include <cuda.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "quant.cuh" // wqrs_smem_bytes


// host mirrors of kernels/common.cuh: GemmArgs, kernels/abi.cuh: TmaMaps, and the probe's functor
struct GemmArgs {
  const void *A, *B;
  int M, N, K, splits;
  float *ws;
  unsigned *counters;
  const float *sa, *sb;
  const void *tma;
  const float *qs;
  int qg;
};
struct alignas(128) TmaMaps {
  CUtensorMap a, b;
};
struct ProbeEpi {
  float *out, *stats;
  int M, N;
};

#define CK(x)                                                                                    \
  do {                                                                                           \
    CUresult e_ = (x);                                                                           \
    if (e_ != CUDA_SUCCESS) {                                                                    \
      const char *m_ = "?";                                                                      \
      cuGetErrorString(e_, &m_);                                                                 \
      fprintf(stderr, "wqrs_probe: %s failed: %s\n", #x, m_);                                    \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

// the packed place of code (row r, k) (kernels/quant.cuh: wq_tile_index and wq_tile_elem, i4)
static size_t code_place(long long r, long long k, long long tk, int *nibble) {
  const long long rb = r / 16, kt = k / 64, tile = (rb / 8 * tk + kt) * 8 + rb % 8;
  const int rr = (int)(r % 16), kk = (int)(k % 64), block = kk / 32, kb = kk % 32;
  const int g = rr % 8, h8 = rr / 8, t = kb / 8, rem = kb % 8, step = rem / 4, c = (rem % 4) / 2, half = rem % 2;
  const int lane = 4 * g + t, reg = h8 + 2 * c, word = 2 * block + step, e = 8 * word + 4 * half + reg;
  *nibble = e % 2;
  return (size_t)tile * 512 + lane * 16 + e / 2;
}

static float bf16_round(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

static int run(CUmodule mod, int BM, int S, int stats, int M, int N, int K, int G, int splits, int reps, unsigned seed) {
  const long long R = (long long)S * N, tk = (K + 63) / 64, crows = (R + 127) / 128 * 128;
  const int ng = G <= 0 || G >= K ? 1 : (K + G - 1) / G, glen = G <= 0 || G >= K ? K : G;
  srand(seed);
  std::vector<unsigned char> codes((size_t)crows * tk * 32, 0x88);
  std::vector<signed char> q((size_t)R * K);
  std::vector<float> sc((size_t)R * ng), x((size_t)M * K);
  std::vector<unsigned short> xb((size_t)M * K);
  for (long long r = 0; r < R; r++)
    for (int gi = 0; gi < ng; gi++) sc[r * ng + gi] = 0.002f + 0.01f * (rand() / (float)RAND_MAX);
  for (long long r = 0; r < R; r++)
    for (long long k = 0; k < K; k++) {
      const int lv = rand() % 15 - 7;
      q[r * K + k] = (signed char)lv;
      int nib;
      const size_t p = code_place(r, k, tk, &nib);
      codes[p] = (unsigned char)(nib ? (codes[p] & 0x0f) | ((lv + 8) << 4) : (codes[p] & 0xf0) | (lv + 8));
    }
  for (size_t i = 0; i < x.size(); i++) {
    x[i] = bf16_round(2.f * rand() / (float)RAND_MAX - 1.f);
    unsigned u;
    memcpy(&u, &x[i], 4);
    xb[i] = (unsigned short)(u >> 16);
  }
  CUdeviceptr dA, dB, dqs, dout, dst, dws, dcnt;
  const int tiles = (M + BM - 1) / BM * (int)((R + 127) / 128);
  CK(cuMemAlloc(&dA, xb.size() * 2));
  CK(cuMemAlloc(&dB, codes.size()));
  CK(cuMemAlloc(&dqs, sc.size() * 4));
  CK(cuMemAlloc(&dout, (size_t)S * M * N * 4));
  CK(cuMemAlloc(&dst, (size_t)M * 4));
  CK(cuMemAlloc(&dws, (size_t)tiles * splits * (BM * 128 + 2 * BM) * 4));
  CK(cuMemAlloc(&dcnt, (size_t)tiles * 4));
  CK(cuMemsetD8(dcnt, 0, (size_t)tiles * 4));
  CK(cuMemcpyHtoD(dA, xb.data(), xb.size() * 2));
  CK(cuMemcpyHtoD(dB, codes.data(), codes.size()));
  CK(cuMemcpyHtoD(dqs, sc.data(), sc.size() * 4));
  CK(cuMemsetD8(dout, 0xff, (size_t)S * M * N * 4)); // poisoned: NaN where nothing is written
  CK(cuMemsetD8(dst, 0xff, (size_t)M * 4));

  TmaMaps maps;
  memset(&maps, 0, sizeof maps);
  const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)M}, strides[1] = {(cuuint64_t)K * 2};
  const cuuint32_t box[2] = {64, (cuuint32_t)BM}, estr[2] = {1, 1};
  CUresult cr = cuTensorMapEncodeTiled(&maps.a, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)dA, dims, strides, box, estr,
                       CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (cr != CUDA_SUCCESS) {
    fprintf(stderr, "wqrs_probe: cuTensorMapEncodeTiled failed (%d)\n", (int)cr);
    return 1;
  }
  GemmArgs g;
  memset(&g, 0, sizeof g);
  g.A = (void *)dA, g.B = (void *)dB, g.M = M, g.N = N, g.K = K, g.splits = splits, g.ws = (float *)dws, g.counters = (unsigned *)dcnt;
  g.qs = (const float *)dqs, g.qg = G;
  ProbeEpi epi{(float *)dout, (float *)dst, M, N};
  const int smem = wqrs_smem_bytes(BM, 8);
  char name[32];
  snprintf(name, sizeof name, "probe_%d_%d_%d", BM, S, stats);
  CUfunction f;
  CK(cuModuleGetFunction(&f, mod, name));
  CK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem));
  void *params[] = {&g, &maps, &epi};
  CK(cuLaunchKernel(f, tiles, 1, splits, 384, 1, 1, smem, 0, params, NULL));
  CK(cuCtxSynchronize());
  std::vector<float> out((size_t)S * M * N), st(M);
  CK(cuMemcpyDtoH(out.data(), dout, out.size() * 4));
  CK(cuMemcpyDtoH(st.data(), dst, st.size() * 4));
  // reference on sampled outputs: merged row of stream s, column n is (n / 8) * 8 S + 8 s + n % 8
  double worst = 0, rms = 0, sworst = 0;
  std::vector<double> ref(4096), got(4096);
  for (int i = 0; i < 4096; i++) {
    const int m = rand() % M, n = rand() % N, s = rand() % S;
    const long long r = (long long)(n / 8) * 8 * S + 8 * s + n % 8;
    double acc = 0;
    for (int k = 0; k < K; k++) acc += (double)x[(size_t)m * K + k] * (double)((float)q[r * K + k] * sc[r * ng + k / glen]);
    ref[i] = acc, got[i] = out[((size_t)s * M + m) * N + n];
    rms += acc * acc;
  }
  rms = sqrt(rms / 4096);
  for (int i = 0; i < 4096; i++) {
    const double e = fabs(got[i] - ref[i]) / rms;
    if (!(e <= worst)) worst = e; // NaN too
  }
  for (int m = 0; m < M; m += (M + 7) / 8) {
    double ss = 0;
    for (int k = 0; k < K; k++) ss += (double)x[(size_t)m * K + k] * x[(size_t)m * K + k];
    const double e = fabs(st[m] - ss) / ss;
    if (!(e <= sworst)) sworst = e;
  }
  // timing
  CUevent e0, e1;
  CK(cuEventCreate(&e0, 0));
  CK(cuEventCreate(&e1, 0));
  auto timed = [&]() { // one launch, ms
    CK(cuEventRecord(e0, 0));
    CK(cuLaunchKernel(f, tiles, 1, splits, 384, 1, 1, smem, 0, params, NULL));
    CK(cuEventRecord(e1, 0));
    CK(cuEventSynchronize(e1));
    float ms;
    CK(cuEventElapsedTime(&ms, e0, e1));
    return ms;
  };
  float warm = 0; // at least 300 ms of launches first: the clocks rise from idle (host-side set-up)
  for (int i = 0; warm < 300.f && i < 100000; i++) warm += timed();
  std::vector<float> ts;
  for (int i = 0; i < reps; i++) ts.push_back(timed() * 1000.f);
  std::sort(ts.begin(), ts.end());
  const double us = ts[ts.size() / 2], flop = 2.0 * M * (double)R * K, bytes = (double)R * K / 2 + (double)R * ng * 4;
  const bool ok = worst < 1e-4 && (!stats || sworst < 1e-4); // f32 sums of squares over K
  printf("wqrs BM %d stats %d M %d N %d K %d S %d G %d splits %d seed %u: err %.2e (vs RMS), stats err %.2e %s; %.1f us, "
         "%.0f TFLOP/s, %.0f GB/s of codes\n",
         BM, stats, M, N, K, S, G, splits, seed, worst, sworst, ok ? "ok" : "FAIL", us, flop / us * 1e-6, bytes / us * 1e-3);
  cuMemFree(dA), cuMemFree(dB), cuMemFree(dqs), cuMemFree(dout), cuMemFree(dst), cuMemFree(dws), cuMemFree(dcnt);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc < 8) {
    fprintf(stderr, "usage: wqrs_probe CUBIN M N K S G SPLITS [REPS [BM [STATS]]]\n");
    return 2;
  }
  const int M = atoi(argv[2]), N = atoi(argv[3]), K = atoi(argv[4]), S = atoi(argv[5]), G = atoi(argv[6]),
            splits = atoi(argv[7]), reps = argc > 8 ? atoi(argv[8]) : 20, bm = argc > 9 ? atoi(argv[9]) : 128,
            stats = argc > 10 ? atoi(argv[10]) : 1;
  const unsigned seed = (unsigned)(M * 131 + N * 7 + K + S + G);
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuCtxCreate(&ctx, NULL, 0, dev));
  CK(cuModuleLoad(&mod, argv[1]));
  return run(mod, bm, S, stats, M, N, K, G, splits, reps, seed);
}
