/* gpu_oom_test.c: a call too large for device memory is a clear error, and the model stays usable.
 *
 * llama3_tiny is called with inputs that claim 2^29 rows (inside the size limits): its workspace would
 * be about a terabyte, so the call must fail with FFN_ERR_OUT_OF_MEMORY and a message with the sizes
 * ("GiB"), before anything is launched (the device buffers behind the tensors are small: a launch
 * would fault). The same model then runs a normal call that must match the CPU reference. Exits 77
 * (skip) without a GPU; the seed is printed.
 */
#include "gpu/gpu_util.h"
#include "runtime/rt.h"

#include <time.h>
#include <unistd.h>

int main(void) {
  require_gpu();
  size_t len;
  char *path = source_path("examples/llama3_tiny.ffn"), *text = source_text("examples/llama3_tiny.ffn", &len);
  Diags d;
  diags_init(&d);
  DriverOptions dopt = {.sm = 90, .opt_level = 3};
  Graph *g = driver_model_graph(text, len, path, &dopt, &d), *gp = NULL;
  ffn_program *prog;
  ffn_model *m;
  if (!g || driver_compile(text, len, path, &dopt, &d, NULL, &gp) != 0 ||
      ffn_program_compile(text, len, path, NULL, &prog) != FFN_OK || ffn_model_create(prog, 0, &m) != FFN_OK)
    return printf("FAIL: setup: %s%s\n", d.text ? d.text : "", ffn_last_error()), 1;
  const char *env = getenv("FFNC_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
  printf("seed %llu (FFNC_TEST_SEED replays it)\n", (unsigned long long)seed);
  TensorSet w = {0};
  make_weights(g, seed, &w);
  if (bind_weights(m, &w) != 0)
    return 1;

  /* small real buffers, shapes that claim the row limit */
  const CuApi *cu = cu_api(NULL, 0);
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr x = 0, y = 0;
  if (cu->cuDeviceGet(&dev, 0) || cu->cuDevicePrimaryCtxRetain(&ctx, dev) || cu->cuCtxPushCurrent(ctx) ||
      cu->cuMemAlloc(&x, 1 << 20) || cu->cuMemAlloc(&y, 1 << 20))
    return printf("FAIL: device buffers\n"), 1;
  int64_t shape[2] = {(int64_t)1 << 29, 256}; /* below every size limit; ~1 TB of workspace */
  DLDataType bf16 = {kDLBfloat, 16, 1};
  DLTensor in = {(void *)x, {kDLCUDA, 0}, 2, bf16, shape, NULL, 0}, out = {(void *)y, {kDLCUDA, 0}, 2, bf16, shape, NULL, 0};
  ffn_status s = ffn_model_run(m, NULL, &in, 1, &out, 1);
  const char *msg = ffn_last_error();
  bool ok = s == FFN_ERR_OUT_OF_MEMORY && strstr(msg, "GiB") != NULL;
  printf("%s huge call: status %s: %s\n", ok ? "ok  " : "FAIL", ffn_status_string(s), msg);
  int failed = !ok;
  ok = cu->cuStreamSynchronize(NULL) == CUDA_SUCCESS; /* nothing was launched: no fault to report */
  printf("%s the context is healthy after it\n", ok ? "ok  " : "FAIL");
  failed += !ok;
  cu->cuMemFree(x);
  cu->cuMemFree(y);

  TensorSet inputs = {0};
  make_inputs(g, 7, seed + 1, &inputs);
  RefTensor ref[8] = {0}, refp[8] = {0};
  if (reference(g, &w, &inputs, ref) != 0 || reference(gp, &w, &inputs, refp) != 0 ||
      run_and_compare("after the huge call, T=7", m, g, &inputs, refp, ref, NULL) != 0)
    failed++;
  printf("%s\n", failed ? "FAILED" : "PASSED");
  return failed ? 1 : 0;
}
