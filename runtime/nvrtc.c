/* nvrtc.c: run-time compilation of generated CUDA source with NVRTC, loaded with dlopen so
 * that programs running AOT output need no NVRTC at all.
 *
 * The device templates (kernels/ *.cuh, embedded at build time) are handed to NVRTC as
 * headers by name. Compiled images go through the on-disk cache (cache.c), keyed by the
 * source, the options, the arch, the NVRTC version, ffnc's version and its ABI hash.
 *
 * A program's source is compiled as several NVRTC programs (units.c), by a pool of threads,
 * one per CPU (NVRTC compiles in parallel; each program has its own nvrtcProgram), each
 * through the cache on its own. On 2 CPUs that took examples/llama3_8b.ffn for sm_90 from
 * 3.4 s to 1.8 s (bench/RESULTS.md, "Start-up").
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "rt.h"

#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../codegen/codegen.h"

#define NVRTC_FUNCS(X)                                                                                 \
  X(nvrtcVersion) X(nvrtcCreateProgram) X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize)              \
  X(nvrtcGetProgramLog) X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcGetPTXSize) X(nvrtcGetPTX)        \
  X(nvrtcDestroyProgram) X(nvrtcGetErrorString)

static struct {
#define X(f) __typeof__(&f) f;
  NVRTC_FUNCS(X)
#undef X
  int major, minor;
} nv;
static bool nv_ok;
static char nv_why[512];
static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void load(void) {
  static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  const char *off = getenv("FFNC_DISABLE_NVRTC"); /* tests: prove AOT programs need no NVRTC */
  if (off && *off && strcmp(off, "0") != 0) {
    snprintf(nv_why, sizeof nv_why, "NVRTC is disabled (FFNC_DISABLE_NVRTC is set)");
    return;
  }
  void *lib = NULL;
  char errs[400] = "";
  /* a libnvrtc the loader does not know, e.g. pip's nvidia-cuda-nvrtc (python/ffnc sets it) */
  const char *path = getenv("FFNC_NVRTC_LIBRARY");
  if (path && *path && !(lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
    snprintf(nv_why, sizeof nv_why, "NVRTC is not available: cannot load FFNC_NVRTC_LIBRARY=%s (%s)", path, dlerror());
    return;
  }
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) {
    lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib && i == 0)
      snprintf(errs, sizeof errs, "%s", dlerror());
  }
  if (!lib) {
    snprintf(nv_why, sizeof nv_why, "NVRTC is not available: cannot load libnvrtc.so.13 (%s)", errs);
    return;
  }
#define X(f)                                                                        \
  if (!(*(void **)&nv.f = dlsym(lib, #f))) {                                        \
    snprintf(nv_why, sizeof nv_why, "NVRTC is not usable: libnvrtc has no %s", #f); \
    return;                                                                         \
  }
  NVRTC_FUNCS(X)
#undef X
  nv.nvrtcVersion(&nv.major, &nv.minor);
  nv_ok = true;
}

bool nvrtc_version(char *buf, size_t len) {
  pthread_once(&nv_once, load);
  if (!nv_ok) {
    snprintf(buf, len, "unavailable (%s)", nv_why);
    return false;
  }
  snprintf(buf, len, "%d.%d", nv.major, nv.minor);
  return true;
}

/* The source with line numbers, for compile errors. */
static void numbered(const char *src, char *out, size_t len) {
  size_t used = 0;
  int line = 1;
  const char *p = src;
  while (*p && used + 1 < len) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    int k = snprintf(out + used, len - used, "%5d  %.*s\n", line++, (int)n, p);
    if (k < 0)
      break;
    used += (size_t)k;
    p += n + (e ? 1 : 0);
  }
}

/* The options NVRTC gets for arch; *n of them. */
static void options(const char *arch, bool ptx, char *archopt, size_t len, const char **opts, int *n) {
  int sm = atoi(arch + 3);
  /* Hopper's wgmma and setmaxnreg exist only in the arch-specific sm_90a target (its code runs
   * on sm_90 parts only, which is what a plan for sm_90 asks for anyway) */
  snprintf(archopt, len, ptx ? "--gpu-architecture=compute_%d%s" : "--gpu-architecture=sm_%d%s", sm,
           sm == 90 ? "a" : "");
  const char *o[] = {archopt, "--std=c++17", "-default-device", "-lineinfo", "--fmad=true"};
  *n = (int)(sizeof o / sizeof o[0]);
  memcpy(opts, o, sizeof o);
}

/* The cache key of source: everything that decides the output, the templates' text included.
 * NULL when out of host memory. */
static char *cache_key(const char *source, const char *ver, bool ptx, const char *const *opts, int nopts,
                       size_t *keylen) {
  char head[1024];
  int k = snprintf(head, sizeof head, "ffnc %s\nabi %s\nnvrtc %s\nkind %s\n", FFNC_VERSION, plan_abi_hash(), ver,
                   ptx ? "ptx" : "cubin");
  for (int i = 0; i < nopts; i++)
    k += snprintf(head + k, sizeof head - (size_t)k, "opt %s\n", opts[i]);
  size_t len = (size_t)k + strlen(source);
  for (int i = 0; ffn_kernel_sources[i].name; i++)
    len += strlen(ffn_kernel_sources[i].name) + 1 + strlen(ffn_kernel_sources[i].text);
  char *key = malloc(len + 1);
  if (!key)
    return NULL;
  size_t pos = 0;
#define PUT(str)                          \
  do {                                    \
    size_t n_ = strlen(str);              \
    memcpy(key + pos, (str), n_);         \
    pos += n_;                            \
  } while (0)
  PUT(head);
  for (int i = 0; ffn_kernel_sources[i].name; i++) {
    PUT(ffn_kernel_sources[i].name);
    key[pos++] = '\n';
    PUT(ffn_kernel_sources[i].text);
  }
  PUT(source);
#undef PUT
  key[pos] = 0;
  *keylen = len;
  return key;
}

/* One program through the cache; *cached says whether it came from there. name is NVRTC's name
 * for the program (its log's positions outside #line directives). */
static ffn_status compile_program(const char *source, const char *name, const char *arch, bool ptx, Image *out,
                                  bool *cached) {
  char ver[64];
  *cached = false;
  if (!nvrtc_version(ver, sizeof ver))
    return rt_error(FFN_ERR_NO_COMPILER, "%s", nv_why);
  char archopt[64];
  const char *opts[8];
  int nopts;
  options(arch, ptx, archopt, sizeof archopt, opts, &nopts);
  size_t keylen;
  char *key = cache_key(source, ver, ptx, opts, nopts, &keylen);
  if (!key)
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  if (cache_get(key, keylen, out)) {
    free(key);
    *cached = true;
    return FFN_OK;
  }

  int nh = 0;
  while (ffn_kernel_sources[nh].name)
    nh++;
  const char **hsrc = malloc(sizeof(char *) * (size_t)(nh + 1)), **hname = malloc(sizeof(char *) * (size_t)(nh + 1));
  if (!hsrc || !hname) {
    free(hsrc);
    free(hname);
    free(key);
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  for (int i = 0; i < nh; i++) {
    hsrc[i] = ffn_kernel_sources[i].text;
    hname[i] = ffn_kernel_sources[i].name;
  }
  nvrtcProgram prog;
  nvrtcResult r = nv.nvrtcCreateProgram(&prog, source, name, nh, hsrc, hname);
  free(hsrc);
  free(hname);
  if (r != NVRTC_SUCCESS) {
    free(key);
    return rt_error(FFN_ERR_COMPILE, "nvrtcCreateProgram failed for %s: %s", name, nv.nvrtcGetErrorString(r));
  }
  r = nv.nvrtcCompileProgram(prog, nopts, opts);
  if (r != NVRTC_SUCCESS) {
    size_t loglen = 0;
    nv.nvrtcGetProgramLogSize(prog, &loglen);
    char *log = malloc(loglen + 1);
    size_t slen = strlen(source) * 2 + 4096;
    char *num = malloc(slen);
    if (log) {
      log[0] = 0;
      nv.nvrtcGetProgramLog(prog, log);
    }
    if (num)
      numbered(source, num, slen);
    ffn_status s = rt_error(FFN_ERR_COMPILE, "nvrtcCompileProgram failed for %s, %s (%s): %s\ngenerated source:\n%s",
                            arch, name, nv.nvrtcGetErrorString(r), log ? log : "", num ? num : "(out of host memory)");
    free(log);
    free(num);
    nv.nvrtcDestroyProgram(&prog);
    free(key);
    return s;
  }
  size_t size = 0;
  r = ptx ? nv.nvrtcGetPTXSize(prog, &size) : nv.nvrtcGetCUBINSize(prog, &size);
  void *img = r == NVRTC_SUCCESS ? malloc(size) : NULL;
  if (img)
    r = ptx ? nv.nvrtcGetPTX(prog, img) : nv.nvrtcGetCUBIN(prog, img);
  nv.nvrtcDestroyProgram(&prog);
  if (r != NVRTC_SUCCESS || !img) {
    free(img);
    free(key);
    return rt_error(FFN_ERR_COMPILE, "reading NVRTC's %s failed: %s", ptx ? "PTX" : "cubin",
                    r != NVRTC_SUCCESS ? nv.nvrtcGetErrorString(r) : "out of host memory");
  }
  *out = (Image){img, size, ptx};
  cache_put(key, keylen, out);
  free(key);
  return FFN_OK;
}

ffn_status nvrtc_compile(const char *source, const char *name, const char *arch, bool ptx, Image *out) {
  bool cached;
  return compile_program(source, name, arch, ptx, out, &cached);
}

/* ---- several programs at once ---- */

/* FFNC_JIT_THREADS, else the CPUs this process may run on. */
static int jit_threads(void) {
  const char *env = getenv("FFNC_JIT_THREADS");
  if (env && *env) {
    char *end;
    long v = strtol(env, &end, 10);
    if (!*end && v >= 1)
      return v > 256 ? 256 : (int)v;
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
  const CompileUnit *units;
  int n;
  const char *arch;
  Image *images;
  ffn_status *status; /* per unit */
  char **errors;      /* per unit: the message of a failure, from the thread that had it */
  pthread_mutex_t lock; /* guards what follows, and serializes the progress calls */
  int next;
  bool failed;          /* no unit is started after a failure */
  ffn_compile_progress progress;
  ffn_progress_fn fn;
  void *user;
  double start;
} Jobs;

static void *worker(void *arg) {
  Jobs *j = arg;
  for (;;) {
    pthread_mutex_lock(&j->lock);
    int i = j->failed || j->next == j->n ? -1 : j->next++;
    pthread_mutex_unlock(&j->lock);
    if (i < 0)
      return NULL;
    char name[160];
    snprintf(name, sizeof name, "%s.cu", j->units[i].name);
    double t = now();
    bool cached;
    ffn_status s = compile_program(j->units[i].source, name, j->arch, false, &j->images[i], &cached);
    pthread_mutex_lock(&j->lock);
    j->status[i] = s;
    if (s != FFN_OK) {
      /* the message is this thread's (rt_error keeps one per thread) */
      j->errors[i] = strdup(ffn_last_error());
      j->failed = true;
    } else {
      ffn_compile_progress *p = &j->progress;
      p->done++;
      p->cached += cached;
      p->unit = j->units[i].name;
      p->unit_cached = cached;
      double end = now();
      p->unit_seconds = end - t;
      p->seconds = end - j->start;
      if (j->fn)
        j->fn(j->user, p);
    }
    pthread_mutex_unlock(&j->lock);
  }
}

ffn_status nvrtc_compile_units(const CompileUnit *units, int n, const char *arch, ffn_progress_fn fn, void *user,
                               Image *images) {
  char ver[64];
  if (!nvrtc_version(ver, sizeof ver)) /* said once, not by every thread */
    return rt_error(FFN_ERR_NO_COMPILER, "%s", nv_why);
  int threads = jit_threads();
  threads = threads < n ? threads : n;
  Jobs j = {.units = units, .n = n, .arch = arch, .images = images, .fn = fn, .user = user, .start = now()};
  j.status = calloc((size_t)n + 1, sizeof *j.status);
  j.errors = calloc((size_t)n + 1, sizeof *j.errors);
  pthread_t *tid = calloc((size_t)threads + 1, sizeof *tid);
  if (!j.status || !j.errors || !tid) {
    free(j.status);
    free(j.errors);
    free(tid);
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  pthread_mutex_init(&j.lock, NULL);
  j.progress = (ffn_compile_progress){.total = n, .threads = threads};
  if (fn)
    fn(user, &j.progress);
  /* this thread is one of the workers; a thread that cannot be started just means fewer */
  pthread_attr_t attr;
  bool attr_ok = pthread_attr_init(&attr) == 0;
  if (attr_ok) /* NVRTC may recurse deeply: twice the main thread's usual 8 MiB (address space until used) */
    pthread_attr_setstacksize(&attr, (size_t)16 << 20);
  int started = 0;
  for (int t = 1; t < threads; t++)
    if (pthread_create(&tid[started], attr_ok ? &attr : NULL, worker, &j) == 0)
      started++;
  if (attr_ok)
    pthread_attr_destroy(&attr);
  worker(&j);
  for (int t = 0; t < started; t++)
    pthread_join(tid[t], NULL);
  pthread_mutex_destroy(&j.lock);
  ffn_status s = FFN_OK;
  for (int i = 0; i < n && s == FFN_OK; i++)
    if (j.status[i] != FFN_OK)
      s = rt_error(j.status[i], "%s", j.errors[i] ? j.errors[i] : "compiling failed (out of host memory)");
  for (int i = 0; i < n; i++) {
    free(j.errors[i]);
    if (s != FFN_OK) {
      free(images[i].image);
      images[i] = (Image){0};
    }
  }
  free(j.status);
  free(j.errors);
  free(tid);
  return s;
}
