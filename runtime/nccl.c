/* nccl.c: NCCL, loaded at run time, for tensor-parallel programs (the STEP_ALLREDUCE steps).
 *
 * Like the driver (cuda_api.c), NCCL is opened with dlopen the first time a tensor-parallel
 * model needs it, so ffnc builds without nccl.h and runs without NCCL everywhere else. The
 * library is $FFNC_NCCL_LIBRARY where set (a path: PyTorch's pip wheels ship one under
 * site-packages/nvidia/, nccl/lib/ for CUDA 12), else libnccl.so.2 from the loader's search
 * path (LD_LIBRARY_PATH, ldconfig; the CUDA 13 toolkit's lib/ has one).
 */
#include "rt.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static NcclApi api;
static char api_why[1024];
static bool api_ok;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static const char how_to_point[] =
    "set FFNC_NCCL_LIBRARY to the path of libnccl.so.2, or add its directory to LD_LIBRARY_PATH (PyTorch's pip "
    "wheels ship one under site-packages/nvidia/: FFNC_NCCL_LIBRARY=$(python3 -c \"import glob, os, sys; "
    "print(next(f for p in sys.path for f in glob.glob(os.path.join(p, 'nvidia', '**', 'libnccl.so.2'), "
    "recursive=True)))\"))";

static void load(void) {
  const char *env = getenv("FFNC_NCCL_LIBRARY");
  const char *path = env && *env ? env : "libnccl.so.2";
  snprintf(api.path, sizeof api.path, "%s", path);
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(api_why, sizeof api_why, "no NCCL: cannot load %s%s (%s); tensor-parallel programs need NCCL 2: %s",
             path, env && *env ? " (FFNC_NCCL_LIBRARY)" : "", dlerror(), how_to_point);
    return;
  }
  struct {
    void *slot;
    const char *name;
  } syms[] = {
      {&api.GetUniqueId, "ncclGetUniqueId"},     {&api.CommInitRank, "ncclCommInitRank"},
      {&api.CommInitAll, "ncclCommInitAll"},     {&api.CommDestroy, "ncclCommDestroy"},
      {&api.CommCount, "ncclCommCount"},         {&api.CommUserRank, "ncclCommUserRank"},
      {&api.CommCuDevice, "ncclCommCuDevice"},   {&api.CommGetAsyncError, "ncclCommGetAsyncError"},
      {&api.AllReduce, "ncclAllReduce"},         {&api.GroupStart, "ncclGroupStart"},
      {&api.GroupEnd, "ncclGroupEnd"},           {&api.GetErrorString, "ncclGetErrorString"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *f = dlsym(lib, syms[i].name);
    if (!f) {
      snprintf(api_why, sizeof api_why, "%s is not a usable NCCL 2: it has no %s; %s", path, syms[i].name,
               how_to_point);
      dlclose(lib);
      return;
    }
    memcpy(syms[i].slot, &f, sizeof f);
  }
  int (*get_version)(int *) = NULL;
  void *v = dlsym(lib, "ncclGetVersion");
  memcpy(&get_version, &v, sizeof v);
  if (!get_version || get_version(&api.version) != NCCL_SUCCESS)
    api.version = 0;
  api_ok = true;
}

const NcclApi *nccl_api(char *why, size_t len) {
  pthread_once(&api_once, load);
  if (!api_ok) {
    if (why)
      snprintf(why, len, "%s", api_why);
    return NULL;
  }
  return &api;
}

ffn_status nccl_fail(const NcclApi *nccl, int r, const char *call) {
  /* the call text is "nccl->AllReduce(args)": name it as NCCL does */
  const char *f = strstr(call, "->");
  char fn[64] = "";
  if (f) {
    f += 2;
    snprintf(fn, sizeof fn, "nccl%.*s", (int)strcspn(f, "("), f);
  }
  const char *desc = nccl->GetErrorString ? nccl->GetErrorString(r) : NULL;
  return rt_error(FFN_ERR_CUDA, "%s failed: %s (ncclResult_t %d)", fn[0] ? fn : call, desc ? desc : "?", r);
}

int nccl_dtype(DType t) {
  switch (t) {
  case DT_F32: return NCCL_FLOAT32;
  case DT_F16: return NCCL_FLOAT16;
  case DT_BF16: return NCCL_BFLOAT16;
  default: return -1;
  }
}

ffn_status nccl_init_models(ffn_model **models, const int *devices, int n) {
  char why[1024];
  const NcclApi *nccl = nccl_api(why, sizeof why);
  if (!nccl)
    return rt_error(FFN_ERR_UNSUPPORTED, "%s", why);
  NcclComm *comms = calloc((size_t)n, sizeof *comms);
  if (!comms)
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  int r = nccl->CommInitAll(comms, n, devices);
  if (r != NCCL_SUCCESS) {
    free(comms);
    return nccl_fail(nccl, r, "nccl->CommInitAll()");
  }
  ffn_status s = FFN_OK;
  for (int i = 0; i < n; i++) {
    if (s == FFN_OK)
      s = ffn_model_set_communicator(models[i], comms[i]);
    if (s == FFN_OK)
      models[i]->owns_comm = true;
    else /* this one's, and those after it */
      nccl->CommDestroy(comms[i]);
  }
  free(comms); /* the models that took theirs destroy them */
  return s;
}
