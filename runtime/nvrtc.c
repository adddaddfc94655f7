/* nvrtc.c: run-time compilation of generated CUDA source with NVRTC, loaded with dlopen so
 * that programs running AOT output need no NVRTC at all.
 *
 * The device templates (kernels/ *.cuh, embedded at build time) are handed to NVRTC as
 * headers by name. Compiled images go through the on-disk cache (cache.c), keyed by the
 * source, the options, the arch, the NVRTC version, ffnc's version and its ABI hash.
 */
#include "rt.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

ffn_status nvrtc_compile(const char *source, const char *name, const char *arch, bool ptx, Image *out) {
  char ver[64];
  if (!nvrtc_version(ver, sizeof ver))
    return rt_error(FFN_ERR_NO_COMPILER, "%s", nv_why);
  int sm = atoi(arch + 3);
  /* Hopper's wgmma and setmaxnreg exist only in the arch-specific sm_90a target (its code runs
   * on sm_90 parts only, which is what a plan for sm_90 asks for anyway) */
  char archopt[64];
  snprintf(archopt, sizeof archopt, ptx ? "--gpu-architecture=compute_%d%s" : "--gpu-architecture=sm_%d%s", sm,
           sm == 90 ? "a" : "");
  const char *opts[] = {archopt, "--std=c++17", "-default-device", "-lineinfo", "--fmad=true"};
  int nopts = (int)(sizeof opts / sizeof opts[0]);

  /* cache key: everything that decides the output, the templates' text included */
  char head[1024];
  int k = snprintf(head, sizeof head, "ffnc %s\nabi %s\nnvrtc %s\nkind %s\n", FFNC_VERSION, plan_abi_hash(), ver,
                   ptx ? "ptx" : "cubin");
  for (int i = 0; i < nopts; i++)
    k += snprintf(head + k, sizeof head - (size_t)k, "opt %s\n", opts[i]);
  size_t keylen = (size_t)k + strlen(source);
  for (int i = 0; ffn_kernel_sources[i].name; i++)
    keylen += strlen(ffn_kernel_sources[i].name) + 1 + strlen(ffn_kernel_sources[i].text);
  char *key = malloc(keylen + 1);
  if (!key)
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
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

  if (cache_get(key, keylen, out)) {
    free(key);
    return FFN_OK;
  }

  int nh = 0;
  while (ffn_kernel_sources[nh].name)
    nh++;
  const char **hsrc = malloc(sizeof(char *) * (size_t)(nh + 1)), **hname = malloc(sizeof(char *) * (size_t)(nh + 1));
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
    return rt_error(FFN_ERR_COMPILE, "nvrtcCreateProgram failed: %s", nv.nvrtcGetErrorString(r));
  }
  r = nv.nvrtcCompileProgram(prog, nopts, opts);
  if (r != NVRTC_SUCCESS) {
    size_t loglen = 0;
    nv.nvrtcGetProgramLogSize(prog, &loglen);
    char *log = malloc(loglen + 1);
    log[0] = 0;
    nv.nvrtcGetProgramLog(prog, log);
    size_t slen = strlen(source) * 2 + 4096;
    char *num = malloc(slen);
    numbered(source, num, slen);
    ffn_status s = rt_error(FFN_ERR_COMPILE, "nvrtcCompileProgram failed for %s (%s): %s\n%s\ngenerated source:\n%s", arch,
                            nv.nvrtcGetErrorString(r), log, "", num);
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
