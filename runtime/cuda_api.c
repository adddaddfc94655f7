/* cuda_api.c: the CUDA driver, loaded at run time.
 *
 * ffnc and programs linked with it start on machines without a GPU or driver; the first
 * call that needs the device loads libcuda.so.1 and reports clearly if it cannot. Entry
 * points are fetched with cuGetProcAddress under the name cuda.h maps each call to (cuMemAlloc
 * -> cuMemAlloc_v2, cuGraphInstantiate -> cuGraphInstantiateWithFlags), less its _vN suffix,
 * for the CUDA version we were built against, so each gets the ABI our prototypes describe.
 * (A call whose newest ABI has no macro in cuda.h, like cuCtxSynchronize, whose 13.0 version
 * takes a context, would get that newest ABI: we don't use those.)
 */
#include "rt.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static CuApi api;
static char api_why[512];
static bool api_ok;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

typedef CUresult (*GetProcAddress)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

/* "cuMemAlloc_v2" -> "cuMemAlloc": cuGetProcAddress wants the base name. */
static void entry_name(const char *expanded, char *out, size_t len) {
  snprintf(out, len, "%s", expanded);
  char *v = strrchr(out, '_');
  if (v && v[1] == 'v' && v[2]) {
    char *d = v + 2;
    while (*d >= '0' && *d <= '9')
      d++;
    if (!*d)
      *v = 0;
  }
}

static void load(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(api_why, sizeof api_why, "no CUDA driver: cannot load libcuda.so.1 (%s)", dlerror());
    return;
  }
  GetProcAddress get = (GetProcAddress)dlsym(lib, "cuGetProcAddress_v2");
  if (!get) {
    snprintf(api_why, sizeof api_why, "the CUDA driver is too old: libcuda.so.1 has no cuGetProcAddress_v2 (need 12.0+)");
    return;
  }
#define STR(x) #x
#define XSTR(x) STR(x)
#define X(f)                                                                                       \
  {                                                                                                \
    CUdriverProcAddressQueryResult q;                                                              \
    void *p = NULL;                                                                                \
    char base[64];                                                                                 \
    entry_name(XSTR(f), base, sizeof base);                                                        \
    if (get(base, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS || !p) {      \
      snprintf(api_why, sizeof api_why, "the CUDA driver has no usable %s (built for CUDA %d.%d)", #f, \
               CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);                                     \
      return;                                                                                      \
    }                                                                                              \
    memcpy(&api.f, &p, sizeof p);                                                                  \
  }
  CU_FUNCS(X)
#undef X
  CUresult r = api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char *name = NULL, *desc = NULL;
    api.cuGetErrorName(r, &name);
    api.cuGetErrorString(r, &desc);
    snprintf(api_why, sizeof api_why, "no CUDA device: cuInit failed: %s (%s)", name ? name : "?", desc ? desc : "?");
    return;
  }
  int count = 0;
  if (api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    snprintf(api_why, sizeof api_why, "no CUDA device: the driver sees none");
    return;
  }
  api.cuDriverGetVersion(&api.version);
  api_ok = true;
}

const CuApi *cu_api(char *why, size_t len) {
  pthread_once(&api_once, load);
  if (!api_ok) {
    if (why)
      snprintf(why, len, "%s", api_why);
    return NULL;
  }
  return &api;
}

int cu_default_arch(void) {
  const CuApi *cu = cu_api(NULL, 0);
  CUdevice d;
  int major = 9, minor = 0;
  if (cu && cu->cuDeviceGet(&d, 0) == CUDA_SUCCESS) {
    cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
    cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
  }
  return major * 10 + minor;
}

ffn_status cu_fail(const CuApi *cu, CUresult r, const char *call) {
  const char *name = NULL, *desc = NULL;
  cu->cuGetErrorName(r, &name);
  cu->cuGetErrorString(r, &desc);
  /* the call text is "cu->cuFoo(args)": name the function */
  const char *f = strstr(call, "->");
  char fn[64] = "";
  if (f) {
    f += 2;
    size_t n = strcspn(f, "(");
    snprintf(fn, sizeof fn, "%.*s", (int)(n < 63 ? n : 63), f);
  }
  return rt_error(r == CUDA_ERROR_OUT_OF_MEMORY ? FFN_ERR_OUT_OF_MEMORY : FFN_ERR_CUDA, "%s failed: %s (%s)",
                  fn[0] ? fn : call, name ? name : "?", desc ? desc : "?");
}
