/* abi.c: the hash that says whether an AOT file fits this ffnc (see kernels/abi.cuh).
 *
 * A cubin built by `ffnc build` has the op and element-type codes and the argument layouts
 * of the ffnc that built it compiled in, while its launch plan names ops by name. So a file
 * is only usable by an ffnc whose tables and layouts are the same; rather than a hand-kept
 * version string, the plan records a hash of exactly those facts, computed here from the
 * tables themselves at first use.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "codegen.h"

/* FNV-1a, 64 bits: small, stable across platforms, and enough to tell tables apart. */
static uint64_t fnv(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t fnv_str(uint64_t h, const char *s) { return fnv(h, s ? s : "", s ? strlen(s) + 1 : 1); }

static uint64_t fnv_int(uint64_t h, long long v) { return fnv(h, &v, sizeof v); }

static uint64_t compute(void) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int op = 0; op < OP_COUNT; op++) { /* the code of an op is its position */
    h = fnv_str(h, op_info[op].name);
    h = fnv_int(h, op_info[op].min_args);
    h = fnv_int(h, op_info[op].max_args);
    h = fnv_int(h, op_info[op].cls);
  }
  for (int t = 1; t < DT_COUNT; t++) {
    h = fnv_str(h, dtype_name((DType)t));
    h = fnv_int(h, dtype_bits((DType)t));
  }
  for (int i = 0; ffn_kernel_sources[i].name; i++)
    if (strcmp(ffn_kernel_sources[i].name, "abi.cuh") == 0)
      h = fnv_str(h, ffn_kernel_sources[i].text);
  h = fnv_int(h, (long long)sizeof(KArgs));
  h = fnv_int(h, (long long)sizeof(PrepArgs));
  h = fnv_int(h, (long long)sizeof(ffn_gemm_config));
  return h;
}

static char abi_text[17];
static pthread_once_t abi_once = PTHREAD_ONCE_INIT;

static void init(void) { snprintf(abi_text, sizeof abi_text, "%016llx", (unsigned long long)compute()); }

const char *plan_abi_hash(void) {
  pthread_once(&abi_once, init);
  return abi_text;
}
