/* nccl_load_test.c MODE: NCCL's loader, no GPU needed.
 *   missing   (FFNC_NCCL_LIBRARY=/nonexistent/libnccl.so.2): the path, the variable and how to
 *             point at a library are named;
 *   not_nccl  (FFNC_NCCL_LIBRARY=libm.so.6): a library without NCCL's entry points is refused
 *             by the first one missing;
 *   real      (libnccl.so.2 from the loader's path; skipped, 77, where there is none): every
 *             entry point resolves, and a call that fails (ncclCommInitAll without GPUs)
 *             is reported by name with NCCL's own description.
 * And the ABI values rt.h declares for NCCL (src/nccl.h.in) are the ones used. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/rt.h"

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  char why[1024] = "";
  const NcclApi *nccl = nccl_api(why, sizeof why);
  if (strcmp(mode, "real") == 0) {
    if (!nccl) {
      printf("SKIP: %s\n", why);
      return 77;
    }
    CHECK(nccl->version >= 20000, "ncclGetVersion: %d", nccl->version);
    CHECK(strstr(nccl->GetErrorString(4), "invalid argument"), "ncclInvalidArgument is '%s'", nccl->GetErrorString(4));
    char none[64] = "";
    if (ffn_device_count(none, sizeof none) == 0) { /* no GPU: the communicators cannot be made */
      NcclComm comms[2];
      int devices[2] = {0, 1}, r = nccl->CommInitAll(comms, 2, devices);
      CHECK(r != NCCL_SUCCESS && nccl_fail(nccl, r, "nccl->CommInitAll()") == FFN_ERR_CUDA &&
                strncmp(ffn_last_error(), "ncclCommInitAll failed: ", 24) == 0,
            "ncclCommInitAll without GPUs: %d, %s", r, ffn_last_error());
      printf("%s\n", ffn_last_error());
    }
    printf("NCCL %d from %s\n", nccl->version, nccl->path);
    return check_result("nccl_load_test real");
  }
  CHECK(!nccl, "NCCL loaded from %s", nccl ? nccl->path : "");
  if (strcmp(mode, "missing") == 0) {
    CHECK(strstr(why, "no NCCL: cannot load /nonexistent/libnccl.so.2 (FFNC_NCCL_LIBRARY)"), "%s", why);
    CHECK(strstr(why, "set FFNC_NCCL_LIBRARY to the path of libnccl.so.2"), "%s", why);
    CHECK(strstr(why, "site-packages/nvidia/"), "no hint at PyTorch's wheel: %s", why);
  } else if (strcmp(mode, "not_nccl") == 0) {
    CHECK(strstr(why, "libm.so.6 is not a usable NCCL 2: it has no ncclGetUniqueId"), "%s", why);
  } else {
    CHECK(0, "mode must be missing, not_nccl or real, not '%s'", mode);
  }
  /* a second call reports the same (loaded once) */
  char again[1024] = "";
  CHECK(!nccl_api(again, sizeof again) && strcmp(again, why) == 0, "%s", again);
  CHECK(nccl_dtype(DT_BF16) == 9 && nccl_dtype(DT_F16) == 6 && nccl_dtype(DT_F32) == 7 && nccl_dtype(DT_I8) < 0,
        "NCCL element types");
  CHECK(NCCL_SUM == 0 && NCCL_SUCCESS == 0 && sizeof(NcclUniqueId) == 128, "NCCL ABI values");
  printf("%s\n", why);
  return check_result("nccl_load_test");
}
