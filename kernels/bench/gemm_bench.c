// gemm_bench.c: kernel-variant bench for kernels/gemm_sm80.cuh, kernels/gemm_sm90.cuh (its
// cp.async form) and kernels/gemm_simt.cuh (llm.c dev/cuda style). The TMA kinds (SM90T, SM90P, SM90C)
// need tensor maps from the runtime: `ffnc bench` times them. Each variant is NVRTC-compiled the way ffnc compiles generated code
// (the templates passed as headers by file name, no CUDA headers), checked against an f64 CPU
// reference on fresh random data with the output poisoned with NaN first, then timed with CUDA
// events (median of many launches, inputs rotated across buffers larger than L2).
//
//   make -C kernels/bench && kernels/bench/build/gemm_bench [options]
//     --compile-only      compile every kernel (no GPU needed) into the cache and stop
//     --arch N            compile for sm_N (default: the device's, or 90 without one); the
//                         gemm_sm90 variants exist only for 90 and are compiled for sm_90a
//     --ms LIST           time only these M (comma-separated; default: all of the plan)
//     --cache DIR         cubin cache directory (default kernels/bench/cache)
//     --no-check / --no-time / --quick   skip the checks / skip the timings / fewer timings
//     --filter STR        only kernels whose name contains STR
//     --csv FILE          also write the timing table as CSV
//     --ptxas-v           print ptxas's registers / spills for every kernel (bypasses the cache)
//     --list              print the configuration names (recommended first) and stop
//     --lib / --no-lib    time only memcpy and cuBLASLt / only our kernels (default: both)
//     --refcache DIR      keep the timing shapes' CPU references in DIR (shared between processes)
//     --filter accepts several substrings separated by commas (a kernel matching any is kept)
#define _GNU_SOURCE
#include <cuda.h>
#include <cublasLt.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../gemm_host.h"

// ---- error checks: one macro per API, with the failing call and its error string --------------

#define CU_CHECK(x) cu_check((x), #x, __FILE__, __LINE__)
#define NVRTC_CHECK(x) nvrtc_check((x), #x, __FILE__, __LINE__)
static void cu_check(CUresult r, const char *call, const char *file, int line) {
  if (r == CUDA_SUCCESS) return;
  const char *name = NULL, *str = NULL;
  cuGetErrorName(r, &name);
  cuGetErrorString(r, &str);
  fprintf(stderr, "%s:%d: %s failed: %s: %s\n", file, line, call, name ? name : "?", str ? str : "?");
  exit(2);
}
static void nvrtc_check(nvrtcResult r, const char *call, const char *file, int line) {
  if (r == NVRTC_SUCCESS) return;
  fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, call, nvrtcGetErrorString(r));
  exit(2);
}
static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "out of host memory (%zu bytes)\n", n);
    exit(2);
  }
  return p;
}
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// ---- options -----------------------------------------------------------------------------------

static struct {
  int compile_only, no_check, no_time, quick, arch, ptxas_v, list;
  int lib; // -1: kernels and libraries, 0: kernels only (--no-lib), 1: libraries only (--lib)
  const char *cache, *filter, *csv, *refcache;
  int ms[32], nms; // --ms: the M values to time (none: all)
  char kdir[4200]; // kernels/
  int nthreads;
} opt;

// ---- element types -----------------------------------------------------------------------------

typedef enum { DT_BF16, DT_F16, DT_F32 } dtype;
static const char *dt_name[] = {"bf16", "f16", "f32"};
static const char *dt_cxx[] = {"ffn::bf16", "ffn::f16", "float"};
static size_t dt_size(dtype t) { return t == DT_F32 ? 4 : 2; }

static float bf16_to_f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static float f16_to_f(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 0) v = ldexpf((float)m, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = ldexpf((float)(m | 1024), e - 25);
  return s ? -v : v;
}
static float load_elem(const void *p, size_t i, dtype t) {
  if (t == DT_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return t == DT_BF16 ? bf16_to_f(h) : f16_to_f(h);
}

// ---- kernels -----------------------------------------------------------------------------------

typedef struct {
  ffn_gemm_config cfg;
  int S, stats;
  dtype t;
  int recommended; // from gemm_host.h's table
  char name[128];
  char *src;
  char *cubin;
  size_t cubin_size;
  double compile_s;
  int failed;
  CUmodule mod;
  CUfunction fn;
  int regs, local_bytes, occupancy;
  size_t smem;
} Kernel;

static Kernel *kernels;
static int nkernels, kcap;

// Extra variants measured beside gemm_host.h's recommendations.
static const ffn_gemm_config extra_configs[] = {
    {"sm80_16x128x64", FFN_GEMM_SM80, 16, 128, 64, 16, 32, 4, 128, 3, 3, 0},
    {"sm80_16x256x64", FFN_GEMM_SM80, 16, 256, 64, 16, 32, 3, 256, 1, 2, 0},
    {"sm80_64x256x64", FFN_GEMM_SM80, 64, 256, 64, 32, 64, 3, 256, 1, 1, 0},
    {"sm80_128x128x32", FFN_GEMM_SM80, 128, 128, 32, 64, 64, 4, 128, 1, 2, 0},
    {"sm80_128x128x32w8", FFN_GEMM_SM80, 128, 128, 32, 64, 32, 4, 256, 1, 1, 0},
    {"sm80_128x128x64", FFN_GEMM_SM80, 128, 128, 64, 64, 64, 3, 128, 1, 2, 0},
    {"sm80_128x256x32", FFN_GEMM_SM80, 128, 256, 32, 64, 64, 4, 256, 1, 1, 0},
    {"sm80_128x256x32s3", FFN_GEMM_SM80, 128, 256, 32, 64, 64, 3, 256, 1, 1, 0},
    {"sm80_256x128x32", FFN_GEMM_SM80, 256, 128, 32, 64, 64, 4, 256, 1, 1, 0},
    {"simt_128x128x8", FFN_GEMM_SIMT, 128, 128, 8, 8, 8, 2, 256, 1, 1, 0},
};

// (Candidates for gemm_host.h's table, compiled in every (S, STATS, type) combination like the
// recommended ones, were listed here: the persistent cp.async trial of 2026-11-29, whose TMA form
// is now gemm_host.h's FFN_GEMM_SM90P.)

static int is_sm90(const ffn_gemm_config *c) { return c->kind == FFN_GEMM_SM90 || c->kind == FFN_GEMM_SM90P; }

static int filtered(const char *name) {
  if (!opt.filter) return 0;
  for (const char *f = opt.filter; *f;) {
    const char *e = strchr(f, ',');
    size_t n = e ? (size_t)(e - f) : strlen(f);
    char tok[128];
    if (n >= sizeof tok) n = sizeof tok - 1;
    memcpy(tok, f, n);
    tok[n] = 0;
    if (n && strstr(name, tok)) return 0;
    if (!e) break;
    f = e + 1;
  }
  return 1;
}

static Kernel *find_kernel(const char *cfg, int S, int stats, dtype t) {
  for (int i = 0; i < nkernels; i++) {
    Kernel *k = &kernels[i];
    if (!strcmp(k->cfg.name, cfg) && k->S == S && k->stats == stats && k->t == t) return k;
  }
  return NULL;
}

static void add_kernel(const ffn_gemm_config *c, int S, int stats, dtype t, int recommended) {
  if (find_kernel(c->name, S, stats, t)) return;
  if (ffn_gemm_tma(c)) return; // TMA: timed by ffnc bench
  if (c->kind == FFN_GEMM_WQD) return;
  if (c->kind != FFN_GEMM_SIMT && t == DT_F32) return;
  if (is_sm90(c) && opt.arch != 90) return; // wgmma: sm_90a only
  char name[128];
  snprintf(name, sizeof name, "%s_s%d_st%d_%s", c->name, S, stats, dt_name[t]);
  if (filtered(name)) return;
  if (nkernels == kcap) {
    kcap = kcap ? 2 * kcap : 64;
    kernels = realloc(kernels, kcap * sizeof *kernels);
  }
  Kernel *k = &kernels[nkernels++];
  memset(k, 0, sizeof *k);
  k->cfg = *c;
  k->S = S;
  k->stats = stats;
  k->t = t;
  k->recommended = recommended;
  strcpy(k->name, name);
  // Generated-style source: a kernel per (GEMM, config) with its epilogue functor, as ffnc emits.
  char call[256];
  if (c->kind == FFN_GEMM_SM90)
    snprintf(call, sizeof call, "ffn::gemm_sm90<%d, %d, %d, %d, %d, %d, %s, %d, %d>(g, epi, smem);", c->bm, c->bn,
             c->bk, c->stages, S, stats, dt_cxx[t], c->bm / c->wm, c->min_blocks);
  else if (c->kind == FFN_GEMM_SM80)
    snprintf(call, sizeof call, "ffn::gemm_sm80<%d, %d, %d, %d, %d, %d, %d, %d, %s>(g, epi, smem);", c->bm, c->bn,
             c->bk, c->wm, c->wn, c->stages, S, stats, dt_cxx[t]);
  else
    snprintf(call, sizeof call, "ffn::gemm_simt<%d, %d, %d, %d, %d, %d, %d, %s>(g, epi, smem);", c->bm, c->bn, c->bk,
             c->wm, c->wn, S, stats, dt_cxx[t]);
  size_t n = 2048;
  k->src = xmalloc(n);
  // FFN_SM90_WATCHDOG: a stuck pipeline traps (the test fails) instead of hanging the device call
  snprintf(k->src, n,
           "%s#include \"%s\"\n#include \"bench_epi.cuh\"\n"
           "extern \"C\" __global__ void __launch_bounds__(%d, %d) %s(ffn::GemmArgs g, BenchEpi<%d, %d, %s> epi) {\n"
           "  extern __shared__ __align__(128) char smem[];\n  %s\n}\n",
           is_sm90(c) ? "#define FFN_SM90_WATCHDOG 1\n" : "",
           c->kind == FFN_GEMM_SM90 ? "gemm_sm90.cuh"
           : c->kind == FFN_GEMM_SM80 ? "gemm_sm80.cuh"
                                      : "gemm_simt.cuh",
           c->threads, c->min_blocks, name, S, stats,
           dt_cxx[t], call);
}

static void build_kernel_list(void) {
  int n;
  const ffn_gemm_config *rec = ffn_gemm_configs(&n);
  // Recommended: every (S, STATS, type) combination. Extras: the two timed FFN GEMMs
  // (gate/up: S=2 with fused RMSNorm statistics; down: S=1, no statistics).
  for (int i = 0; i < n; i++) {
    const ffn_gemm_config *c = &rec[i];
    if (c->kind == FFN_GEMM_WQ) continue; // quantized B: timed through ffnc bench, not here
    for (int S = 1; S <= 2; S++)
      for (int st = 0; st <= 2; st++) {
        if (c->kind != FFN_GEMM_SIMT) {
          add_kernel(c, S, st, DT_BF16, 1);
          add_kernel(c, S, st, DT_F16, 1);
        } else {
          add_kernel(c, S, st, DT_F32, 1);
        }
      }
    if (c->kind == FFN_GEMM_SIMT) add_kernel(c, 2, 1, DT_BF16, 1);
  }
  for (size_t i = 0; i < sizeof extra_configs / sizeof extra_configs[0]; i++) {
    const ffn_gemm_config *c = &extra_configs[i];
    dtype t = c->kind != FFN_GEMM_SIMT ? DT_BF16 : DT_F32;
    add_kernel(c, 2, 1, t, 0);
    add_kernel(c, 1, 0, t, 0);
  }
}

// ---- NVRTC, with a cubin cache keyed by a hash of everything that goes into the compile ---------

// bench_epi.cuh lives here in kernels/bench/ (see bench_header), the others in kernels/
static const char *hdr_names[] = {"common.cuh", "gemm_sm80.cuh", "gemm_simt.cuh", "bench_epi.cuh",
                                  "gemm_sm90.cuh", "abi.cuh", "opmath.cuh"};
enum { NHDR = 7 };
static int bench_header(int i) { return i == 3; }
static char *hdr_text[NHDR];

static char *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *b = xmalloc(n + 1);
  size_t got = fread(b, 1, n, f);
  fclose(f);
  b[got] = 0;
  if (size) *size = got;
  return b;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
  return h;
}

// sm90a: the wgmma kernels, which need the architecture-specific target (wgmma, setmaxnreg)
static void compile_options(const char **o, int *n, char *archbuf, int sm90a) {
  if (sm90a) sprintf(archbuf, "-arch=sm_90a");
  else sprintf(archbuf, "-arch=sm_%d", opt.arch);
  o[0] = "--std=c++17";
  o[1] = "-default-device";
  o[2] = archbuf;
  *n = 3;
  if (opt.ptxas_v) o[(*n)++] = "--ptxas-options=-v";
}

static pthread_mutex_t compile_lock = PTHREAD_MUTEX_INITIALIZER;
static int compile_next;

static void compile_one(Kernel *k) {
  const char *o[8];
  int no;
  char archbuf[32];
  compile_options(o, &no, archbuf, is_sm90(&k->cfg));
  int major, minor;
  nvrtcVersion(&major, &minor);
  uint64_t h = 1469598103934665603ull;
  h = fnv(h, k->src, strlen(k->src));
  for (int i = 0; i < NHDR; i++) h = fnv(h, hdr_text[i], strlen(hdr_text[i]));
  for (int i = 0; i < no; i++) h = fnv(h, o[i], strlen(o[i]));
  h = fnv(h, &major, sizeof major);
  h = fnv(h, &minor, sizeof minor);
  char path[4600];
  snprintf(path, sizeof path, "%s/%s-%016llx.cubin", opt.cache, k->name, (unsigned long long)h);
  if (!opt.ptxas_v) {
    k->cubin = read_file(path, &k->cubin_size);
    if (k->cubin) return;
  }

  double t0 = now_s();
  nvrtcProgram prog;
  NVRTC_CHECK(nvrtcCreateProgram(&prog, k->src, k->name, NHDR, (const char *const *)hdr_text, hdr_names));
  nvrtcResult r = nvrtcCompileProgram(prog, no, o);
  size_t logn = 0;
  nvrtcGetProgramLogSize(prog, &logn);
  char *log = xmalloc(logn + 1);
  log[0] = 0;
  nvrtcGetProgramLog(prog, log);
  if (r != NVRTC_SUCCESS) {
    pthread_mutex_lock(&compile_lock);
    fprintf(stderr, "nvrtcCompileProgram(%s) failed: %s\n--- log ---\n%s\n--- source ---\n%s\n", k->name,
            nvrtcGetErrorString(r), log, k->src);
    pthread_mutex_unlock(&compile_lock);
    k->failed = 1;
  } else {
    if (opt.ptxas_v) { // one line per kernel from ptxas's report
      const char *u = strstr(log, "Used "), *sp = strstr(log, "bytes stack frame");
      int regs = u ? atoi(u + 5) : -1, stack = -1, st = -1, ld = -1;
      if (sp) {
        const char *b = sp;
        while (b > log && b[-1] != '.') b--;
        sscanf(b, " %d bytes stack frame, %d bytes spill stores, %d bytes spill loads", &stack, &st, &ld);
      }
      pthread_mutex_lock(&compile_lock);
      printf("ptxas %s %-40s regs %3d  stack %4d  spill stores %4d  loads %4d%s\n", archbuf + 6, k->name, regs, stack,
             st, ld, st > 0 || ld > 0 ? "  SPILLS" : "");
      // ptxas's advisories: setmaxnreg ignored (C7508), wgmma serialized, and the like
      if (strstr(log, "warning") || strstr(log, "Performance")) printf("ptxas log for %s:\n%s\n", k->name, log);
      pthread_mutex_unlock(&compile_lock);
    } else if (logn > 1 && strstr(log, "warning")) {
      pthread_mutex_lock(&compile_lock);
      fprintf(stderr, "NVRTC warnings for %s:\n%s\n", k->name, log);
      pthread_mutex_unlock(&compile_lock);
    }
    NVRTC_CHECK(nvrtcGetCUBINSize(prog, &k->cubin_size));
    k->cubin = xmalloc(k->cubin_size);
    NVRTC_CHECK(nvrtcGetCUBIN(prog, k->cubin));
    char tmp[4700];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (f) {
      fwrite(k->cubin, 1, k->cubin_size, f);
      fclose(f);
      rename(tmp, path);
    }
  }
  free(log);
  nvrtcDestroyProgram(&prog);
  k->compile_s = now_s() - t0;
}

static void *compile_worker(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&compile_lock);
    int i = compile_next++;
    pthread_mutex_unlock(&compile_lock);
    if (i >= nkernels) return NULL;
    compile_one(&kernels[i]);
  }
}

static void compile_all(void) {
  mkdir(opt.cache, 0755);
  double t0 = now_s();
  int nt = opt.nthreads < nkernels ? opt.nthreads : nkernels;
  pthread_t th[64];
  if (nt > 64) nt = 64;
  for (int i = 0; i < nt; i++) pthread_create(&th[i], NULL, compile_worker, NULL);
  for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
  int failed = 0, compiled = 0;
  for (int i = 0; i < nkernels; i++) {
    failed += kernels[i].failed;
    compiled += kernels[i].compile_s > 0;
  }
  printf("compiled %d kernels for sm_%d (%d from cache) in %.1f s on %d threads, %d failed\n", nkernels, opt.arch,
         nkernels - compiled - failed, now_s() - t0, nt, failed);
  if (failed) exit(1);
}

// ---- device state ------------------------------------------------------------------------------

static CUdevice dev;
static CUcontext ctx;
static CUstream stream;
static int num_sms, l2_bytes, max_smem_optin;
static CUfunction fn_fill[3], fn_colsum[3];
static CUmodule util_mod;

static const char *util_src =
    "#include \"common.cuh\"\n"
    "__device__ __forceinline__ unsigned mix(unsigned long long i, unsigned seed) {\n"
    "  unsigned long long x = i * 0x9E3779B97F4A7C15ull ^ ((unsigned long long)seed << 32 | seed);\n"
    "  x ^= x >> 31; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 27; x *= 0x94D049BB133111EBull; x ^= x >> 33;\n"
    "  return (unsigned)x;\n}\n"
    "template <class T> __device__ void fill(T *p, unsigned long long n, unsigned seed, float scale, float offset) {\n"
    "  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;\n"
    "       i += (unsigned long long)gridDim.x * blockDim.x) {\n"
    "    float u = (float)(mix(i, seed) >> 8) * (2.0f / 16777216.0f) - 1.0f;\n"
    "    p[i] = ffn::from_f32<T>(u * scale + offset);\n  }\n}\n"
    "extern \"C\" __global__ void fill_bf16(ffn::bf16 *p, unsigned long long n, unsigned s, float a, float b) { fill(p, n, s, a, b); }\n"
    "extern \"C\" __global__ void fill_f16(ffn::f16 *p, unsigned long long n, unsigned s, float a, float b) { fill(p, n, s, a, b); }\n"
    "extern \"C\" __global__ void fill_f32(float *p, unsigned long long n, unsigned s, float a, float b) { fill(p, n, s, a, b); }\n"
    // column sums of B rows (one warp per row), for the LayerNorm epilogue's mean correction
    "template <class T> __device__ void rowsum(const T *b, float *out, int rows, int K) {\n"
    "  int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;\n"
    "  if (r >= rows) return;\n"
    "  float s = 0.f;\n"
    "  for (int k = threadIdx.x % 32; k < K; k += 32) s += ffn::to_f32(b[(size_t)r * K + k]);\n"
    "  s = ffn::warp_sum(s);\n"
    "  if (threadIdx.x % 32 == 0) out[r] = s;\n}\n"
    "extern \"C\" __global__ void rowsum_bf16(const ffn::bf16 *b, float *o, int r, int K) { rowsum(b, o, r, K); }\n"
    "extern \"C\" __global__ void rowsum_f16(const ffn::f16 *b, float *o, int r, int K) { rowsum(b, o, r, K); }\n"
    "extern \"C\" __global__ void rowsum_f32(const float *b, float *o, int r, int K) { rowsum(b, o, r, K); }\n";

static void compile_util(const char *path);
static void load_util(void) {
  const char *o[8];
  int no;
  char archbuf[32], path[4600];
  compile_options(o, &no, archbuf, 0);
  int major, minor;
  nvrtcVersion(&major, &minor);
  uint64_t h = fnv(1469598103934665603ull, util_src, strlen(util_src));
  for (int i = 0; i < NHDR; i++) h = fnv(h, hdr_text[i], strlen(hdr_text[i]));
  for (int i = 0; i < no; i++) h = fnv(h, o[i], strlen(o[i]));
  h = fnv(h, &major, sizeof major);
  h = fnv(h, &minor, sizeof minor);
  snprintf(path, sizeof path, "%s/util-%016llx.cubin", opt.cache, (unsigned long long)h);
  char *cached = read_file(path, NULL);
  if (cached) {
    CU_CHECK(cuModuleLoadData(&util_mod, cached));
    free(cached);
  } else {
    compile_util(path);
  }
  const char *fills[] = {"fill_bf16", "fill_f16", "fill_f32"}, *sums[] = {"rowsum_bf16", "rowsum_f16", "rowsum_f32"};
  for (int i = 0; i < 3; i++) {
    CU_CHECK(cuModuleGetFunction(&fn_fill[i], util_mod, fills[i]));
    CU_CHECK(cuModuleGetFunction(&fn_colsum[i], util_mod, sums[i]));
  }
}

static void compile_util(const char *path) {
  nvrtcProgram prog;
  NVRTC_CHECK(nvrtcCreateProgram(&prog, util_src, "util.cu", NHDR, (const char *const *)hdr_text, hdr_names));
  const char *o[8];
  int no;
  char archbuf[32];
  compile_options(o, &no, archbuf, 0);
  nvrtcResult r = nvrtcCompileProgram(prog, no, o);
  if (r != NVRTC_SUCCESS) {
    size_t n;
    nvrtcGetProgramLogSize(prog, &n);
    char *log = xmalloc(n + 1);
    nvrtcGetProgramLog(prog, log);
    fprintf(stderr, "util compile failed: %s\n%s\n", nvrtcGetErrorString(r), log);
    exit(2);
  }
  size_t n;
  NVRTC_CHECK(nvrtcGetCUBINSize(prog, &n));
  char *cubin = xmalloc(n);
  NVRTC_CHECK(nvrtcGetCUBIN(prog, cubin));
  nvrtcDestroyProgram(&prog);
  char tmp[4700];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (f) {
    fwrite(cubin, 1, n, f);
    fclose(f);
    rename(tmp, path);
  }
  if (!opt.compile_only) CU_CHECK(cuModuleLoadData(&util_mod, cubin));
  free(cubin);
}

static void fill(CUdeviceptr p, size_t n, dtype t, unsigned seed, float scale, float offset) {
  unsigned long long nn = n;
  void *args[] = {&p, &nn, &seed, &scale, &offset};
  CU_CHECK(cuLaunchKernel(fn_fill[t], num_sms * 8, 1, 1, 256, 1, 1, 0, stream, args, NULL));
}

static void load_kernels(void) {
  for (int i = 0; i < nkernels; i++) {
    Kernel *k = &kernels[i];
    CU_CHECK(cuModuleLoadData(&k->mod, k->cubin));
    CU_CHECK(cuModuleGetFunction(&k->fn, k->mod, k->name));
    k->smem = ffn_gemm_smem_bytes(&k->cfg, 2);
    CU_CHECK(cuFuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)k->smem));
    CU_CHECK(cuFuncGetAttribute(&k->regs, CU_FUNC_ATTRIBUTE_NUM_REGS, k->fn));
    CU_CHECK(cuFuncGetAttribute(&k->local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, k->fn));
    CU_CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&k->occupancy, k->fn, k->cfg.threads, k->smem));
    printf("kernel %-40s regs %3d local %4d B smem %6zu B  %d CTA/SM%s\n", k->name, k->regs, k->local_bytes, k->smem,
           k->occupancy, k->occupancy != k->cfg.ctas_per_sm ? "  (table says otherwise)" : "");
  }
}

// ---- the problem: buffers, launch --------------------------------------------------------------

// Host mirrors of ffn::GemmArgs and BenchEpi (same layout: pointers are 64-bit).
typedef struct {
  CUdeviceptr A, B;
  int M, N, K, splits;
  CUdeviceptr ws, counters;
} GemmArgsH;
typedef struct {
  CUdeviceptr out, res, wsum;
  int N, K;
  float eps;
} EpiH;

typedef struct {
  int M, N, K, S, stats;
  dtype t;
  size_t brows; // rows of B: S * N rounded up to a multiple of 8
  CUdeviceptr A, B, res, out, wsum;
} Problem;

static size_t brows_of(int N, int S) { return (size_t)S * ((N + 7) / 8 * 8); }

static void problem_alloc(Problem *p, int M, int N, int K, int S, int stats, dtype t) {
  memset(p, 0, sizeof *p);
  p->M = M, p->N = N, p->K = K, p->S = S, p->stats = stats, p->t = t;
  p->brows = brows_of(N, S);
  size_t es = dt_size(t);
  CU_CHECK(cuMemAlloc(&p->A, (size_t)M * K * es));
  CU_CHECK(cuMemAlloc(&p->B, p->brows * K * es));
  CU_CHECK(cuMemAlloc(&p->res, (size_t)M * N * es));
  CU_CHECK(cuMemAlloc(&p->out, (size_t)M * N * es));
  CU_CHECK(cuMemAlloc(&p->wsum, p->brows * 4));
}
static void problem_free(Problem *p) {
  cuMemFree(p->A), cuMemFree(p->B), cuMemFree(p->res), cuMemFree(p->out), cuMemFree(p->wsum);
}
// Fresh random data: A ~ U(-1,1) (+0.25 offset with LayerNorm statistics, so the mean matters),
// B ~ U(-1,1) * sqrt(3/K) (unit-variance dot products), residual ~ U(-1,1).
static void problem_fill(Problem *p, unsigned seed) {
  fill(p->A, (size_t)p->M * p->K, p->t, seed * 7 + 1, 1.0f, p->stats == 2 ? 0.25f : 0.f);
  fill(p->B, p->brows * p->K, p->t, seed * 7 + 2, sqrtf(3.0f / p->K), 0.f);
  fill(p->res, (size_t)p->M * p->N, p->t, seed * 7 + 3, 1.0f, 0.f);
  int rows = (int)p->brows, K = p->K;
  void *args[] = {&p->B, &p->wsum, &rows, &K};
  CU_CHECK(cuLaunchKernel(fn_colsum[p->t], (rows + 7) / 8, 1, 1, 256, 1, 1, 0, stream, args, NULL));
}

// Split-K scratch shared by all launches (stream-ordered); counters zeroed once.
static CUdeviceptr ws_buf, counter_buf;
static size_t ws_cap, counter_cap;
static void ensure_scratch(size_t ws_floats, size_t counters) {
  if (ws_floats > ws_cap) {
    CU_CHECK(cuStreamSynchronize(stream)); // queued launches may still use the old one
    if (ws_buf) CU_CHECK(cuMemFree(ws_buf));
    CU_CHECK(cuMemAlloc(&ws_buf, ws_floats * 4));
    ws_cap = ws_floats;
  }
  if (counters > counter_cap) {
    CU_CHECK(cuStreamSynchronize(stream));
    if (counter_buf) CU_CHECK(cuMemFree(counter_buf));
    CU_CHECK(cuMemAlloc(&counter_buf, counters * 4));
    CU_CHECK(cuMemsetD32(counter_buf, 0, counters));
    counter_cap = counters;
  }
}

// force_grid > 0: persistent kernels get at most that many CTAs (each then loops over many work items)
static unsigned force_grid;

static void launch(Kernel *k, const Problem *p, int splits) {
  const ffn_gemm_config *c = &k->cfg;
  ensure_scratch(ffn_gemm_ws_floats(c, p->M, p->N, p->S, splits), ffn_gemm_num_tiles(c, p->M, p->N, p->S));
  GemmArgsH g = {p->A, p->B, p->M, p->N, p->K, splits, ws_buf, counter_buf};
  EpiH e = {p->out, p->res, p->wsum, p->N, p->K, 1e-5f};
  unsigned grid[3];
  ffn_gemm_launch_grid(c, p->M, p->N, p->S, splits, num_sms, grid);
  if (force_grid && c->kind == FFN_GEMM_SM90P && grid[0] > force_grid) grid[0] = force_grid;
  void *args[] = {&g, &e};
  CU_CHECK(cuLaunchKernel(k->fn, grid[0], grid[1], grid[2], c->threads, 1, 1, (unsigned)k->smem, stream, args, NULL));
}

// ---- CPU f64 reference --------------------------------------------------------------------------

typedef struct {
  const Problem *p;
  const float *A, *B, *res, *wsum; // host copies, as float (exact for bf16/f16)
  const int *rows;
  int nrows;
  double *ref; // [nrows][N]
  int next;
  pthread_mutex_t lock;
} RefJob;

static double silu_d(double x) { return x / (1.0 + exp(-x)); }

static void *ref_worker(void *arg) {
  RefJob *j = arg;
  const Problem *p = j->p;
  const int N = p->N, K = p->K, S = p->S;
  for (;;) {
    pthread_mutex_lock(&j->lock);
    int i = j->next++;
    pthread_mutex_unlock(&j->lock);
    if (i >= j->nrows) return NULL;
    const int r = j->rows[i];
    const float *x = j->A + (size_t)r * K;
    double sum = 0, sumsq = 0;
    for (int k = 0; k < K; k++) sum += x[k], sumsq += (double)x[k] * x[k];
    double scale = 1, mean = 0;
    if (p->stats == 1) scale = 1.0 / sqrt(sumsq / K + 1e-5);
    if (p->stats == 2) {
      mean = sum / K;
      double var = sumsq / K - mean * mean;
      scale = 1.0 / sqrt((var > 0 ? var : 0) + 1e-5);
    }
    for (int c = 0; c < N; c++) {
      double y[2];
      for (int s = 0; s < S; s++) {
        size_t m = (size_t)(c / 8) * 8 * S + s * 8 + c % 8;
        const float *w = j->B + m * K;
        double d0 = 0, d1 = 0, d2 = 0, d3 = 0;
        int k = 0;
        for (; k + 4 <= K; k += 4) {
          d0 += (double)x[k] * w[k];
          d1 += (double)x[k + 1] * w[k + 1];
          d2 += (double)x[k + 2] * w[k + 2];
          d3 += (double)x[k + 3] * w[k + 3];
        }
        for (; k < K; k++) d0 += (double)x[k] * w[k];
        double dot = (d0 + d1) + (d2 + d3);
        y[s] = scale * (dot - mean * (p->stats == 2 ? j->wsum[m] : 0.0));
      }
      double o = S == 2 ? silu_d(y[0]) * y[1] : y[0];
      j->ref[(size_t)i * N + c] = o + j->res[(size_t)r * N + c];
    }
  }
}

typedef struct {
  int nrows;
  int *rows;
  double *ref;
  double ref_rms;
} Reference;

static float *download_as_float(CUdeviceptr d, size_t n, dtype t) {
  size_t es = dt_size(t);
  void *raw = xmalloc(n * es);
  CU_CHECK(cuMemcpyDtoH(raw, d, n * es));
  float *f = xmalloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) f[i] = load_elem(raw, i, t);
  free(raw);
  return f;
}

// Reference for all rows when M <= full_rows, else for the first 8, last 8 and `extra` spread rows.
static Reference reference(const Problem *p, int full_rows, int extra) {
  Reference R;
  memset(&R, 0, sizeof R);
  CU_CHECK(cuStreamSynchronize(stream));
  int M = p->M;
  R.rows = xmalloc(sizeof(int) * (M + 16 + extra));
  if (M <= full_rows) {
    for (int i = 0; i < M; i++) R.rows[R.nrows++] = i;
  } else {
    for (int i = 0; i < 8; i++) R.rows[R.nrows++] = i;
    for (int i = 0; i < extra; i++) R.rows[R.nrows++] = 8 + (int)((long)(M - 16) * (2 * i + 1) / (2 * extra));
    for (int i = M - 8; i < M; i++) R.rows[R.nrows++] = i;
  }
  float *A = download_as_float(p->A, (size_t)M * p->K, p->t);
  float *B = download_as_float(p->B, p->brows * p->K, p->t);
  float *res = download_as_float(p->res, (size_t)M * p->N, p->t);
  float *wsum = xmalloc(p->brows * 4);
  CU_CHECK(cuMemcpyDtoH(wsum, p->wsum, p->brows * 4));
  R.ref = xmalloc(sizeof(double) * R.nrows * p->N);
  RefJob j = {p, A, B, res, wsum, R.rows, R.nrows, R.ref, 0, PTHREAD_MUTEX_INITIALIZER};
  int nt = opt.nthreads > 64 ? 64 : opt.nthreads;
  pthread_t th[64];
  for (int i = 0; i < nt; i++) pthread_create(&th[i], NULL, ref_worker, &j);
  for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
  double ss = 0;
  for (size_t i = 0; i < (size_t)R.nrows * p->N; i++) ss += R.ref[i] * R.ref[i];
  R.ref_rms = sqrt(ss / ((double)R.nrows * p->N));
  free(A), free(B), free(res), free(wsum);
  return R;
}
static void reference_free(Reference *R) { free(R->rows), free(R->ref); }

// Tolerances. 16-bit outputs: norm-wise ||out-ref||/||ref|| <= 1e-2 and per element
// |out-ref| <= 1e-2 * (|ref| + rms(ref)) (the output rounding alone is 2^-9 relative).
// f32 outputs: norm-wise 1e-5 and per element 1e-4 * (|ref| + rms(ref)).
typedef struct {
  double norm_err, max_elem;
  long bad, unwritten;
  int ok;
} CheckResult;

static CheckResult check_output(const Problem *p, const Reference *R, uint16_t **raw16, float **raw32) {
  CheckResult cr;
  memset(&cr, 0, sizeof cr);
  size_t n = (size_t)p->M * p->N, es = dt_size(p->t);
  void *raw = xmalloc(n * es);
  CU_CHECK(cuMemcpyDtoH(raw, p->out, n * es));
  // Every element must have been written (the poison is NaN), also in rows not compared.
  for (size_t i = 0; i < n; i++)
    if (isnan(load_elem(raw, i, p->t))) cr.unwritten++;
  double tol_norm = p->t == DT_F32 ? 1e-5 : 1e-2, tol_elem = p->t == DT_F32 ? 1e-4 : 1e-2;
  double se = 0, sr = 0;
  for (int i = 0; i < R->nrows; i++)
    for (int c = 0; c < p->N; c++) {
      double ref = R->ref[(size_t)i * p->N + c];
      double got = load_elem(raw, (size_t)R->rows[i] * p->N + c, p->t);
      double d = fabs(got - ref);
      if (isnan(got)) continue;
      se += d * d, sr += ref * ref;
      double rel = d / (fabs(ref) + R->ref_rms);
      if (rel > cr.max_elem) cr.max_elem = rel;
      if (d > tol_elem * (fabs(ref) + R->ref_rms)) cr.bad++;
    }
  cr.norm_err = sr > 0 ? sqrt(se / sr) : sqrt(se);
  cr.ok = cr.unwritten == 0 && cr.bad == 0 && cr.norm_err <= tol_norm;
  if (raw16 && es == 2) *raw16 = raw;
  else if (raw32 && es == 4) *raw32 = raw;
  else free(raw);
  return cr;
}

static int counters_zero(void) {
  unsigned *h = xmalloc(counter_cap * 4);
  CU_CHECK(cuMemcpyDtoH(h, counter_buf, counter_cap * 4));
  int ok = 1;
  for (size_t i = 0; i < counter_cap; i++) ok &= h[i] == 0;
  free(h);
  return ok;
}

static void poison(const Problem *p) {
  size_t n = (size_t)p->M * p->N;
  if (p->t == DT_F32) CU_CHECK(cuMemsetD32Async(p->out, 0xFFFFFFFFu, n, stream));
  else CU_CHECK(cuMemsetD16Async(p->out, 0xFFFF, n, stream));
}

// Run k on p with `splits`, check; for split-K, run again and require bitwise-equal output.
static int run_check(Kernel *k, const Problem *p, const Reference *R, int splits, const char *tag) {
  poison(p);
  launch(k, p, splits);
  CU_CHECK(cuStreamSynchronize(stream));
  void *first = NULL;
  CheckResult cr = check_output(p, R, (uint16_t **)&first, (float **)&first);
  int deterministic = 1, zero = counters_zero();
  if (splits > 1) {
    poison(p);
    launch(k, p, splits);
    CU_CHECK(cuStreamSynchronize(stream));
    size_t bytes = (size_t)p->M * p->N * dt_size(p->t);
    void *second = xmalloc(bytes);
    CU_CHECK(cuMemcpyDtoH(second, p->out, bytes));
    deterministic = first && !memcmp(first, second, bytes);
    free(second);
    zero &= counters_zero();
  }
  free(first);
  int ok = cr.ok && deterministic && zero;
  printf("%s %-40s %s M=%5d N=%5d K=%5d splits=%2d  err %.2e  max_elem %.2e  bad %ld unwritten %ld%s%s\n",
         ok ? "PASS" : "FAIL", k->name, tag, p->M, p->N, p->K, splits, cr.norm_err, cr.max_elem, cr.bad,
         cr.unwritten, deterministic ? "" : "  NONDETERMINISTIC", zero ? "" : "  COUNTERS-NOT-ZERO");
  return ok;
}

// ---- correctness suite --------------------------------------------------------------------------

static int checks_run, checks_failed;

static void correctness(void) {
  // Odd M (1, 7, 1000), M a multiple of nothing, N not a multiple of the tile (704) or of 8 (700),
  // K not a multiple of BK (264, 520, 1032, 2056) or, for SIMT, of 8 (263). The longer K at small M
  // run the deeper pipelines (gemm_sm90: up to 8 stages) around their ring more than once.
  static const int shapes16[][3] = {{1, 704, 2056}, {7, 700, 1032}, {64, 704, 520}, {1000, 700, 264}, {4096, 704, 256}};
  static const int shapes32[][3] = {{1, 700, 263}, {7, 704, 256}, {64, 700, 1000}, {1000, 704, 263}, {4096, 704, 256}};
  unsigned seed = (unsigned)time(NULL);
  printf("\n== correctness (seed base %u) ==\n", seed);
  for (int i = 0; i < nkernels; i++) {
    Kernel *k = &kernels[i];
    for (int si = 0; si < 5; si++) {
      const int *sh = k->t == DT_F32 ? shapes32[si] : shapes16[si];
      Problem p;
      problem_alloc(&p, sh[0], sh[1], sh[2], k->S, k->stats, k->t);
      problem_fill(&p, seed++);
      Reference R = reference(&p, 1000, 48);
      int ktiles = (p.K + k->cfg.bk - 1) / k->cfg.bk;
      int picked = ffn_gemm_pick_splits(p.M, p.N, p.S, p.K, &k->cfg, num_sms);
      int splits_list[3] = {1, ktiles >= 3 ? 3 : ktiles, picked};
      for (int s = 0; s < 3; s++) {
        if (s > 0 && splits_list[s] <= 1) continue;
        if (s == 2 && splits_list[2] == splits_list[1]) continue;
        checks_run++;
        checks_failed += !run_check(k, &p, &R, splits_list[s], "");
      }
      // splits > k-tiles: some splits get no k-tiles and must still take part in the reduction
      if (si == 0) {
        checks_run++;
        checks_failed += !run_check(k, &p, &R, ktiles + 2, "(empty splits)");
      }
      // persistent: few CTAs, so that each loops over many items (odd counts: both ping-pong
      // warpgroups end on different items), with and without split-K
      if (k->cfg.kind == FFN_GEMM_SM90P) {
        const unsigned grids[2] = {1, 3};
        for (int gi = 0; gi < 2; gi++)
          for (int s = 0; s < 2; s++) {
            int sp = s ? (ktiles >= 3 ? 3 : ktiles) : 1;
            if (s && sp <= 1) continue;
            char tag[32];
            snprintf(tag, sizeof tag, "(grid %u)", grids[gi]);
            force_grid = grids[gi];
            checks_run++;
            checks_failed += !run_check(k, &p, &R, sp, tag);
            force_grid = 0;
          }
      }
      reference_free(&R);
      problem_free(&p);
    }
  }
  printf("correctness: %d checks, %d failed\n", checks_run, checks_failed);
}

// ---- timing -------------------------------------------------------------------------------------

typedef struct {
  char what[64], kernel[48];
  int M, N, K, S, splits;
  double ms, tflops, gbs_w, gbs_all;
  const char *status;
} Row;
static Row *rows;
static int nrows_t, rows_cap;

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

// Median of `iters` launches timed one by one with events, after `warm` launches; rotates problems.
typedef void (*LaunchFn)(void *ctx, int set);
static double time_median(LaunchFn f, void *c, int nsets, int warm, int iters) {
  CUevent ev[2 * 200];
  if (iters > 200) iters = 200;
  for (int i = 0; i < 2 * iters; i++) CU_CHECK(cuEventCreate(&ev[i], CU_EVENT_DEFAULT));
  for (int i = 0; i < warm; i++) f(c, i % nsets);
  for (int i = 0; i < iters; i++) {
    CU_CHECK(cuEventRecord(ev[2 * i], stream));
    f(c, (warm + i) % nsets);
    CU_CHECK(cuEventRecord(ev[2 * i + 1], stream));
  }
  CU_CHECK(cuStreamSynchronize(stream));
  float t[200];
  for (int i = 0; i < iters; i++) CU_CHECK(cuEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]));
  for (int i = 0; i < 2 * iters; i++) cuEventDestroy(ev[i]);
  qsort(t, iters, sizeof t[0], cmp_f);
  return t[iters / 2];
}

typedef struct {
  Kernel *k;
  Problem *sets;
  int splits;
} GemmLaunch;
static void gemm_launch_fn(void *c, int set) {
  GemmLaunch *g = c;
  launch(g->k, &g->sets[set], g->splits);
}

static void emit_row(const Row *r);
static Row *new_row(const char *what, const char *kernel, int M, int N, int K, int S, int splits, double ms, dtype t,
                    const char *status) {
  if (nrows_t == rows_cap) {
    rows_cap = rows_cap ? 2 * rows_cap : 256;
    rows = realloc(rows, rows_cap * sizeof *rows);
  }
  Row *r = &rows[nrows_t++];
  snprintf(r->what, sizeof r->what, "%s", what);
  snprintf(r->kernel, sizeof r->kernel, "%s", kernel);
  r->M = M, r->N = N, r->K = K, r->S = S, r->splits = splits, r->ms = ms, r->status = status;
  double es = dt_size(t);
  double wbytes = (double)S * N * K * es;
  double all = wbytes + (double)M * K * es + 2.0 * M * N * es;
  r->tflops = 2.0 * M * (double)S * N * K / (ms * 1e-3) / 1e12;
  r->gbs_w = wbytes / (ms * 1e-3) / 1e9;
  r->gbs_all = all / (ms * 1e-3) / 1e9;
  return r;
}
static void add_row(const char *what, const char *kernel, int M, int N, int K, int S, int splits, double ms,
                    dtype t, const char *status) {
  emit_row(new_row(what, kernel, M, N, K, S, splits, ms, t, status));
}
static void emit_row(const Row *r) {
  printf("TIME %-14s %-34s M=%5d N=%5d S=%d K=%5d splits=%2d  %9.4f ms  %7.1f TFLOP/s  %7.1f GB/s weights  %7.1f GB/s "
         "all  %s\n",
         r->what, r->kernel, r->M, r->N, r->S, r->K, r->splits, r->ms, r->tflops, r->gbs_w, r->gbs_all, r->status);
  fflush(stdout);
  // appended row by row, so that run.sh's processes (one per configuration) share one file and a
  // process stopped at its time limit keeps what it measured
  if (opt.csv) {
    struct stat st;
    int fresh = stat(opt.csv, &st) != 0 || st.st_size == 0;
    FILE *csv = fopen(opt.csv, "a");
    if (csv) {
      if (fresh) fprintf(csv, "what,kernel,M,N,S,K,splits,ms,tflops,gbs_weights,gbs_all,status\n");
      fprintf(csv, "%s,%s,%d,%d,%d,%d,%d,%.5f,%.2f,%.1f,%.1f,%s\n", r->what, r->kernel, r->M, r->N, r->S, r->K,
              r->splits, r->ms, r->tflops, r->gbs_w, r->gbs_all, r->status);
      fclose(csv);
    }
  }
}

// Problems for timing: enough sets that one pass over them exceeds 3x L2.
static int make_sets(Problem *sets, int maxsets, int M, int N, int K, int S, int stats, dtype t, unsigned seed) {
  size_t es = dt_size(t);
  size_t bytes = ((size_t)M * K + brows_of(N, S) * K + 2 * (size_t)M * N) * es;
  int n = (int)((3.0 * l2_bytes + bytes - 1) / bytes);
  if (n < 1) n = 1;
  if (n > maxsets) n = maxsets;
  for (int i = 0; i < n; i++) {
    problem_alloc(&sets[i], M, N, K, S, stats, t);
    problem_fill(&sets[i], seed + i);
  }
  return n;
}

// Reference computed on first use, and kept on disk under --refcache (the timing data is a function
// of the shape and seed alone, so the per-configuration processes of run.sh share it).
typedef struct {
  const Problem *p;
  int full_rows, extra;
  unsigned seed;
  int have;
  Reference R;
} LazyRef;

static const Reference *lazy_ref(LazyRef *L) {
  if (L->have) return &L->R;
  const Problem *p = L->p;
  char path[4700] = "";
  if (opt.refcache)
    snprintf(path, sizeof path, "%s/ref_%d_%d_%d_%d_%d_%s_%u_%d_%d.bin", opt.refcache, p->M, p->N, p->K, p->S, p->stats,
             dt_name[p->t], L->seed, L->full_rows, L->extra);
  FILE *f = path[0] ? fopen(path, "rb") : NULL;
  if (f) {
    Reference *R = &L->R;
    int ok = fread(&R->nrows, sizeof R->nrows, 1, f) == 1 && R->nrows > 0 && R->nrows <= p->M;
    if (ok) {
      R->rows = xmalloc(sizeof(int) * R->nrows);
      R->ref = xmalloc(sizeof(double) * R->nrows * p->N);
      ok = fread(R->rows, sizeof(int), R->nrows, f) == (size_t)R->nrows &&
           fread(R->ref, sizeof(double), (size_t)R->nrows * p->N, f) == (size_t)R->nrows * p->N &&
           fread(&R->ref_rms, sizeof(double), 1, f) == 1;
    }
    fclose(f);
    if (ok) {
      L->have = 1;
      return &L->R;
    }
  }
  L->R = reference(p, L->full_rows, L->extra);
  L->have = 1;
  if (path[0]) {
    mkdir(opt.refcache, 0755);
    char tmp[4800];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    if ((f = fopen(tmp, "wb"))) {
      const Reference *R = &L->R;
      fwrite(&R->nrows, sizeof R->nrows, 1, f);
      fwrite(R->rows, sizeof(int), R->nrows, f);
      fwrite(R->ref, sizeof(double), (size_t)R->nrows * p->N, f);
      fwrite(&R->ref_rms, sizeof(double), 1, f);
      fclose(f);
      rename(tmp, path);
    }
  }
  return &L->R;
}
static void lazy_free(LazyRef *L) {
  if (L->have) reference_free(&L->R);
  L->have = 0;
}

static void time_gemm(const char *what, Kernel *k, Problem *sets, int nsets, LazyRef *L, int splits, int warm,
                      int iters) {
  if (!k) return;
  const Problem *p = &sets[0];
  int ok = run_check(k, p, lazy_ref(L), splits, "(timed shape)");
  checks_run++;
  checks_failed += !ok;
  GemmLaunch g = {k, sets, splits};
  double ms = time_median(gemm_launch_fn, &g, nsets, warm, iters);
  add_row(what, k->name, p->M, p->N, p->K, p->S, splits, ms, p->t, ok ? "ok" : "WRONG");
}

// ---- cuBLASLt (loaded at run time; skipped when absent) ------------------------------------------

static struct {
  void *so;
  __typeof__(&cublasLtCreate) create;
  __typeof__(&cublasLtMatmulDescCreate) desc_create;
  __typeof__(&cublasLtMatmulDescSetAttribute) desc_set;
  __typeof__(&cublasLtMatrixLayoutCreate) layout_create;
  __typeof__(&cublasLtMatmulPreferenceCreate) pref_create;
  __typeof__(&cublasLtMatmulPreferenceSetAttribute) pref_set;
  __typeof__(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  __typeof__(&cublasLtMatmul) matmul;
  cublasLtHandle_t h;
  CUdeviceptr work;
  size_t work_size;
} lt;

static int lt_load(void) {
  const char *names[] = {"libcublasLt.so.13", "libcublasLt.so", "/usr/local/cuda/lib64/libcublasLt.so.13"};
  for (int i = 0; i < 3 && !lt.so; i++) lt.so = dlopen(names[i], RTLD_NOW);
  if (!lt.so) {
    printf("cuBLASLt not found (%s): skipping the library comparison\n", dlerror());
    return 0;
  }
#define LT_SYM(f, n)                                                                                                   \
  if (!(lt.f = (__typeof__(lt.f))dlsym(lt.so, n))) {                                                                   \
    printf("cuBLASLt: no symbol %s\n", n);                                                                             \
    return 0;                                                                                                          \
  }
  LT_SYM(create, "cublasLtCreate");
  LT_SYM(desc_create, "cublasLtMatmulDescCreate");
  LT_SYM(desc_set, "cublasLtMatmulDescSetAttribute");
  LT_SYM(layout_create, "cublasLtMatrixLayoutCreate");
  LT_SYM(pref_create, "cublasLtMatmulPreferenceCreate");
  LT_SYM(pref_set, "cublasLtMatmulPreferenceSetAttribute");
  LT_SYM(heuristic, "cublasLtMatmulAlgoGetHeuristic");
  LT_SYM(matmul, "cublasLtMatmul");
  if (lt.create(&lt.h) != CUBLAS_STATUS_SUCCESS) {
    printf("cublasLtCreate failed: skipping\n");
    return 0;
  }
  lt.work_size = 64 << 20;
  CU_CHECK(cuMemAlloc(&lt.work, lt.work_size));
  return 1;
}

typedef struct {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulAlgo_t algo;
  Problem *sets;
  CUdeviceptr *dbuf; // bf16 [M][S*N] output per set
} LtCall;
static void lt_launch_fn(void *c, int set) {
  LtCall *l = c;
  float alpha = 1, beta = 0;
  cublasStatus_t st = lt.matmul(lt.h, l->op, &alpha, (void *)l->sets[set].B, l->a, (void *)l->sets[set].A, l->b, &beta,
                                (void *)l->dbuf[set], l->d, (void *)l->dbuf[set], l->d, &l->algo, (void *)lt.work,
                                lt.work_size, (cudaStream_t)stream);
  if (st != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "cublasLtMatmul failed: status %d\n", (int)st);
    exit(2);
  }
}

// D[M, S*N] = A . B^T in bf16 (no epilogue): in cuBLAS's column-major terms D^T = B . A^T.
static void time_cublaslt(Problem *sets, int nsets, int warm, int iters) {
  if (!lt.h) return;
  const Problem *p = &sets[0];
  int64_t Nm = (int64_t)p->brows, M = p->M, K = p->K;
  LtCall l;
  memset(&l, 0, sizeof l);
  l.sets = sets;
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  if (lt.desc_create(&l.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
      lt.desc_set(l.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ||
      lt.desc_set(l.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) ||
      lt.layout_create(&l.a, CUDA_R_16BF, K, Nm, K) || lt.layout_create(&l.b, CUDA_R_16BF, K, M, K) ||
      lt.layout_create(&l.d, CUDA_R_16BF, Nm, M, Nm)) {
    printf("cuBLASLt descriptor setup failed\n");
    return;
  }
  cublasLtMatmulPreference_t pref;
  lt.pref_create(&pref);
  lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt.work_size, sizeof lt.work_size);
  cublasLtMatmulHeuristicResult_t hr;
  int found = 0;
  if (lt.heuristic(lt.h, l.op, l.a, l.b, l.d, l.d, pref, 1, &hr, &found) || !found) {
    printf("cuBLASLt: no algorithm for M=%ld N=%ld K=%ld\n", (long)M, (long)Nm, (long)K);
    return;
  }
  l.algo = hr.algo;
  CUdeviceptr dbuf[16];
  for (int i = 0; i < nsets; i++) CU_CHECK(cuMemAlloc(&dbuf[i], (size_t)M * Nm * 2));
  l.dbuf = dbuf;
  double ms = time_median(lt_launch_fn, &l, nsets, warm, iters);
  add_row("cublasLt", "cublasLt_bf16_nt", (int)M, (int)Nm, (int)K, 1, 1, ms, DT_BF16, "lib");
  for (int i = 0; i < nsets; i++) cuMemFree(dbuf[i]);
  // descriptors are small; left to process exit
}

// ---- device-to-device copy: the bandwidth ceiling ------------------------------------------------

typedef struct {
  CUdeviceptr a, b;
  size_t n;
} CopyCall;
static void copy_fn(void *c, int set) {
  CopyCall *x = c;
  CU_CHECK(cuMemcpyDtoDAsync(x->b, x->a, x->n, stream));
}
static void time_copy(void) {
  CopyCall c;
  c.n = (size_t)1 << 31;
  CU_CHECK(cuMemAlloc(&c.a, c.n));
  CU_CHECK(cuMemAlloc(&c.b, c.n));
  CU_CHECK(cuMemsetD32(c.a, 0x3f800000u, c.n / 4));
  double ms = time_median(copy_fn, &c, 1, 3, 20);
  printf("TIME memcpy DtoD %zu MB: %.3f ms = %.0f GB/s (read + write)\n", c.n >> 20, ms, 2.0 * c.n / (ms * 1e-3) / 1e9);
  Row *r = new_row("memcpy", "cuMemcpyDtoD_2GB", 0, 0, 0, 0, 0, ms, DT_BF16, "lib");
  r->gbs_all = r->gbs_w = 2.0 * c.n / (ms * 1e-3) / 1e9;
  r->tflops = 0;
  emit_row(r);
  cuMemFree(c.a), cuMemFree(c.b);
}

// ---- the timing plan ------------------------------------------------------------------------------

// Llama-3-8B FFN: gate/up (S=2, N=14336, K=4096, RMSNorm statistics fused) and down (S=1,
// N=4096, K=14336).
typedef struct {
  const char *what;
  int N, K, S, stats;
} FfnShape;
static const FfnShape ffn_shapes[] = {{"up", 14336, 4096, 2, 1}, {"down", 4096, 14336, 1, 0}};

static void free_sets(Problem *sets, int n) {
  for (int i = 0; i < n; i++) problem_free(&sets[i]);
}

// Which configurations are timed where. Small M: every split factor too (the heuristic's pick first).
static const char *small_cfgs[] = {"sm80_16x128x64", "sm80_16x256x64", "sm80_16x128x128", "sm80_32x128x64",
                                   "sm80_64x128x64", "sm80_64x256x64", "sm80_128x128x32", "sm90_64x128x64"};
static const char *big_cfgs[] = {"sm80_128x128x32", "sm80_128x128x32w8", "sm80_128x128x64", "sm80_128x256x32",
                                 "sm80_128x256x32s3", "sm80_128x256x64", "sm80_256x128x32", "sm80_64x128x64",
                                 "sm90_128x256x64", "sm90_128x128x64", "sm90_64x128x64", "sm90p_pp_128x128x64",
                                 "sm90p_coop_128x256x64", "sm90p_pp_64x256x64"};
static const char *simt_cfgs[] = {"simt_32x64x16", "simt_128x64x8", "simt_128x128x8"};
#define COUNT(a) (int)(sizeof a / sizeof a[0])
static int small_cfg_applies(const ffn_gemm_config *c, int M) {
  if (is_sm90(c)) return c->bm == 64; // wgmma's smallest M tile
  return c->bm <= 2 * M + 16 + (M > 16 ? 64 : 0);
}
static int m_wanted(int M) {
  if (!opt.nms) return 1;
  for (int i = 0; i < opt.nms; i++)
    if (opt.ms[i] == M) return 1;
  return 0;
}

static void timing(void) {
  printf("\n== timings ==\n");
  if (opt.lib != 0) time_copy();
  const int small_m[] = {1, 8, 16, 32, 64}, mid_m[] = {128, 256, 512, 1024, 2048}, big_m[] = {4096, 8192};
  Problem sets[16];
  for (int si = 0; si < 2; si++) {
    const FfnShape *sh = &ffn_shapes[si];
    // small M: bound by streaming B
    for (int mi = 0; mi < COUNT(small_m); mi++) {
      int M = small_m[mi];
      if (!m_wanted(M)) continue;
      unsigned seed = 1000 + si * 100000 + M * 16;
      int any = opt.lib != 0;
      for (int c = 0; c < COUNT(small_cfgs); c++) {
        Kernel *k = find_kernel(small_cfgs[c], sh->S, sh->stats, DT_BF16);
        any |= k && opt.lib != 1 && small_cfg_applies(&k->cfg, M);
      }
      if (!any) continue;
      int ns = make_sets(sets, 16, M, sh->N, sh->K, sh->S, sh->stats, DT_BF16, seed);
      LazyRef L = {&sets[0], 64, 0, seed, 0, {0}};
      for (int c = 0; c < COUNT(small_cfgs) && opt.lib != 1; c++) {
        Kernel *k = find_kernel(small_cfgs[c], sh->S, sh->stats, DT_BF16);
        if (!k || !small_cfg_applies(&k->cfg, M)) continue;
        int picked = ffn_gemm_pick_splits(M, sh->N, sh->S, sh->K, &k->cfg, num_sms);
        time_gemm(sh->what, k, sets, ns, &L, picked, 10, 50);
        if (!opt.quick) {
          const int fixed[] = {1, 2, 4, 8, 16};
          for (int f = 0; f < 5; f++)
            if (fixed[f] != picked) time_gemm(sh->what, k, sets, ns, &L, fixed[f], 5, 30);
        }
        // the cost of the fused RMSNorm statistics: the same GEMM without them
        Kernel *k0 = find_kernel(small_cfgs[c], sh->S, 0, DT_BF16);
        if (sh->stats && M == 1 && k0) {
          for (int i = 0; i < ns; i++) sets[i].stats = 0;
          LazyRef L0 = {&sets[0], 64, 0, seed, 0, {0}};
          time_gemm("up-nostats", k0, sets, ns, &L0, picked, 10, 50);
          lazy_free(&L0);
          for (int i = 0; i < ns; i++) sets[i].stats = sh->stats;
        }
      }
      if (opt.lib != 0) time_cublaslt(sets, ns, 10, 50);
      lazy_free(&L);
      free_sets(sets, ns);
    }
    // medium and large M: bound by the matrix units
    for (int range = 0; range < 2; range++) {
      const int *ms = range ? big_m : mid_m;
      for (int mi = 0; mi < (range ? 2 : 5); mi++) {
        int M = ms[mi];
        if (opt.quick && range == 0 && M != 512) continue;
        if (!m_wanted(M)) continue;
        unsigned seed = 1000 + si * 100000 + M * 16;
        int any = opt.lib != 0;
        for (int c = 0; c < COUNT(big_cfgs); c++) any |= opt.lib != 1 && find_kernel(big_cfgs[c], sh->S, sh->stats, DT_BF16);
        if (!any) continue;
        int ns = make_sets(sets, 16, M, sh->N, sh->K, sh->S, sh->stats, DT_BF16, seed);
        LazyRef L = {&sets[0], 0, 8, seed, 0, {0}};
        for (int c = 0; c < COUNT(big_cfgs) && opt.lib != 1; c++) {
          Kernel *k = find_kernel(big_cfgs[c], sh->S, sh->stats, DT_BF16);
          if (!k) continue;
          int picked = ffn_gemm_pick_splits(M, sh->N, sh->S, sh->K, &k->cfg, num_sms);
          time_gemm(sh->what, k, sets, ns, &L, picked, range ? 3 : 5, range ? 15 : 30);
          Kernel *k0 = find_kernel(big_cfgs[c], sh->S, 0, DT_BF16);
          if (sh->stats && (M == 512 || M == 8192) && k0) {
            for (int i = 0; i < ns; i++) sets[i].stats = 0;
            LazyRef L0 = {&sets[0], 0, 8, seed, 0, {0}};
            time_gemm("up-nostats", k0, sets, ns, &L0, picked, 3, 15);
            lazy_free(&L0);
            for (int i = 0; i < ns; i++) sets[i].stats = sh->stats;
          }
        }
        if (opt.lib != 0) time_cublaslt(sets, ns, 3, 15);
        lazy_free(&L);
        free_sets(sets, ns);
      }
    }
  }
  // f32 SIMT path (f32 models) on half-size FFN shapes: 4x fewer weight bytes than Llama in f32
  for (int si = 0; si < 2 && opt.lib != 1; si++) {
    const FfnShape *sh = &ffn_shapes[si];
    const int simt_m[] = {1, 64, 1024};
    for (int mi = 0; mi < 3; mi++) {
      int M = simt_m[mi], N = sh->N / 2, K = sh->K / 2;
      if (!m_wanted(M)) continue;
      unsigned seed = 5000 + si * 100000 + M * 16;
      int any = 0;
      for (int c = 0; c < COUNT(simt_cfgs); c++) any |= find_kernel(simt_cfgs[c], sh->S, sh->stats, DT_F32) != NULL;
      if (!any) continue;
      int ns = make_sets(sets, 16, M, N, K, sh->S, sh->stats, DT_F32, seed);
      LazyRef L = {&sets[0], 64, 8, seed, 0, {0}};
      for (int c = 0; c < COUNT(simt_cfgs); c++) {
        Kernel *k = find_kernel(simt_cfgs[c], sh->S, sh->stats, DT_F32);
        if (k) time_gemm(sh->what, k, sets, ns, &L, ffn_gemm_pick_splits(M, N, sh->S, K, &k->cfg, num_sms), 3, 15);
      }
      lazy_free(&L);
      free_sets(sets, ns);
    }
  }
}

static void print_table(void) {
  printf("\n== summary (median times; GB/s weights = S*N*K*elem / time; GB/s all adds A, residual, output) ==\n");
  printf("%-9s %-34s %5s %6s %1s %6s %3s %10s %8s %8s %8s %s\n", "what", "kernel", "M", "N", "S", "K", "spl", "ms",
         "TFLOP/s", "GB/s_w", "GB/s_all", "status");
  // best per (what, M) among ours, plus the library, to keep the tail of the output readable
  for (int i = 0; i < nrows_t; i++) {
    Row *r = &rows[i];
    int best = 1;
    if (strcmp(r->status, "lib"))
      for (int j = 0; j < nrows_t; j++)
        if (j != i && strcmp(rows[j].status, "lib") && !strcmp(rows[j].what, r->what) && rows[j].M == r->M &&
            rows[j].K == r->K && (rows[j].ms < r->ms || (rows[j].ms == r->ms && j < i)) &&
            !strncmp(rows[j].kernel, r->kernel, 4))
          best = 0;
    if (best)
      printf("%-9s %-34s %5d %6d %1d %6d %3d %10.4f %8.1f %8.1f %8.1f %s\n", r->what, r->kernel, r->M, r->N, r->S, r->K,
             r->splits, r->ms, r->tflops, r->gbs_w, r->gbs_all, r->status);
  }
}

// ---- main ---------------------------------------------------------------------------------------

static void usage(void) {
  fprintf(stderr, "usage: gemm_bench [--compile-only] [--arch N] [--cache DIR] [--no-check] [--no-time] [--quick] "
                  "[--filter STR] [--csv FILE] [--ptxas-v] [--list] [--lib | --no-lib] [--refcache DIR] [--ms M,M,...]\n");
  exit(1);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  opt.lib = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--compile-only")) opt.compile_only = 1;
    else if (!strcmp(argv[i], "--no-check")) opt.no_check = 1;
    else if (!strcmp(argv[i], "--no-time")) opt.no_time = 1;
    else if (!strcmp(argv[i], "--quick")) opt.quick = 1;
    else if (!strcmp(argv[i], "--ptxas-v")) opt.ptxas_v = 1;
    else if (!strcmp(argv[i], "--list")) opt.list = 1;
    else if (!strcmp(argv[i], "--lib")) opt.lib = 1;
    else if (!strcmp(argv[i], "--no-lib")) opt.lib = 0;
    else if (!strcmp(argv[i], "--refcache") && i + 1 < argc) opt.refcache = argv[++i];
    else if (!strcmp(argv[i], "--arch") && i + 1 < argc) opt.arch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--cache") && i + 1 < argc) opt.cache = argv[++i];
    else if (!strcmp(argv[i], "--filter") && i + 1 < argc) opt.filter = argv[++i];
    else if (!strcmp(argv[i], "--csv") && i + 1 < argc) opt.csv = argv[++i];
    else if (!strcmp(argv[i], "--ms") && i + 1 < argc) {
      for (char *t = strtok(argv[++i], ","); t && opt.nms < 32; t = strtok(NULL, ",")) opt.ms[opt.nms++] = atoi(t);
    }
    else usage();
  }
  if (opt.list) {
    int n;
    const ffn_gemm_config *t = ffn_gemm_configs(&n);
    for (int i = 0; i < n; i++) printf("%s\n", t[i].name);
    for (int i = 0; i < COUNT(extra_configs); i++) printf("%s\n", extra_configs[i].name);
    return 0;
  }
  // kernels/ is two levels above this executable (kernels/bench/build/gemm_bench)
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    fprintf(stderr, "readlink /proc/self/exe: %s\n", strerror(errno));
    return 2;
  }
  exe[n] = 0;
  *strrchr(exe, '/') = 0;
  snprintf(opt.kdir, sizeof opt.kdir, "%s/../..", exe);
  static char cache_default[4300];
  snprintf(cache_default, sizeof cache_default, "%s/bench/cache", opt.kdir);
  if (!opt.cache) opt.cache = cache_default;
  opt.nthreads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (opt.nthreads < 1) opt.nthreads = 1;

  for (int i = 0; i < NHDR; i++) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s%s", opt.kdir, bench_header(i) ? "bench/" : "", hdr_names[i]);
    if (!(hdr_text[i] = read_file(path, NULL))) {
      fprintf(stderr, "cannot read %s: %s\n", path, strerror(errno));
      return 2;
    }
  }
  int major, minor;
  NVRTC_CHECK(nvrtcVersion(&major, &minor));

  if (!opt.compile_only) {
    CU_CHECK(cuInit(0));
    CU_CHECK(cuDeviceGet(&dev, 0));
    char devname[256];
    CU_CHECK(cuDeviceGetName(devname, sizeof devname, dev));
    int cc_major, cc_minor, drv;
    CU_CHECK(cuDeviceGetAttribute(&cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CU_CHECK(cuDeviceGetAttribute(&cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    CU_CHECK(cuDeviceGetAttribute(&num_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CU_CHECK(cuDeviceGetAttribute(&l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev));
    CU_CHECK(cuDeviceGetAttribute(&max_smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
    CU_CHECK(cuDriverGetVersion(&drv));
    if (!opt.arch) opt.arch = cc_major * 10 + cc_minor;
    time_t tt = time(NULL);
    printf("device: %s (sm_%d%d), %d SMs, L2 %d MB, smem/block opt-in %d B, driver %d, NVRTC %d.%d, %s", devname,
           cc_major, cc_minor, num_sms, l2_bytes >> 20, max_smem_optin, drv, major, minor, ctime(&tt));
    CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU_CHECK(cuCtxSetCurrent(ctx));
    CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  } else if (!opt.arch) {
    opt.arch = 90;
  }

  if (opt.lib != 1) build_kernel_list();
  compile_all();
  if (opt.compile_only) {
    char path[4600];
    snprintf(path, sizeof path, "%s/util-check.cubin", opt.cache);
    compile_util(path);
    remove(path);
    return 0;
  }
  for (int i = 0; i < nkernels; i++)
    if (ffn_gemm_smem_bytes(&kernels[i].cfg, 2) > (size_t)max_smem_optin) {
      fprintf(stderr, "%s needs %zu B of shared memory, the device allows %d\n", kernels[i].name,
              ffn_gemm_smem_bytes(&kernels[i].cfg, 2), max_smem_optin);
      return 2;
    }
  load_util();
  load_kernels();
  if (opt.lib != 0) lt_load();

  double t0 = now_s();
  if (!opt.no_check && opt.lib != 1) correctness();
  double t1 = now_s();
  if (!opt.no_time) timing();
  double t2 = now_s();
  print_table();
  printf("\ncorrectness checks: %d run, %d failed; check time %.1f s, timing %.1f s\n", checks_run, checks_failed,
         t1 - t0, t2 - t1);
  return checks_failed ? 1 : 0;
}
