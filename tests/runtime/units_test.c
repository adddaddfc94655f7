/* units_test.c: the programs NVRTC compiles for a plan (runtime/units.c), without NVRTC.
 *
 *  - every kernel function of the plan is in exactly one unit, and no unit holds another
 *    (a function defined twice would be compiled twice; one missing, never loaded);
 *  - a GEMM entry point is a unit of its own; rowwise kernels (all their entry points) go at
 *    most 8 to a unit;
 *  - the runtime's kernels are one unit whose text is the same for every model, arch and -O
 *    level (so one cache entry per arch serves them all), and the only one with runtime.cuh;
 *  - units come by cost, largest first.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan_util.h"
#include "codegen/driver.h"
#include "runtime/rt.h"

static Plan *plan_of(const char *rel, int sm, int opt_level) { return compile_plan_ex(rel, sm, opt_level, NULL); }

static const char ENTRY[] = "extern \"C\" __global__ void ";

/* The names of the __global__ functions defined in src, into names (at most max); their count. */
static int entries(const char *src, char names[][128], int max) {
  int n = 0;
  for (const char *p = strstr(src, ENTRY); p; p = strstr(p + 1, ENTRY)) {
    const char *q = p + strlen(ENTRY);
    while (strncmp(q, "__launch_bounds__", 17) == 0 || strncmp(q, "__cluster_dims__", 16) == 0)
      q = strchr(q, ')') + 2;
    size_t l = strcspn(q, "(");
    if (n < max)
      snprintf(names[n], 128, "%.*s", (int)l, q);
    n++;
  }
  return n;
}

static char *runtime_source; /* the first model's, for the others to match */

static void check_model(const char *rel, int sm, int opt_level) {
  Plan *p = plan_of(rel, sm, opt_level);
  CompileUnit *u;
  int n = compile_units(p->cuda_source, &u);
  CHECK(n >= 2, "%s: %d units", rel, n);
  static char names[4096][128];
  int nnames = 0, nruntime = 0;
  for (int i = 0; i < n; i++) {
    CHECK(i == 0 || u[i].cost <= u[i - 1].cost, "%s: unit %d (%s) costs more than the one before", rel, i, u[i].name);
    bool runtime = strcmp(u[i].name, "runtime") == 0;
    CHECK(runtime == (strstr(u[i].source, "#include \"runtime.cuh\"") != NULL),
          "%s: runtime.cuh %s unit %s", rel, runtime ? "missing from" : "in", u[i].name);
    if (runtime) {
      nruntime++;
      CHECK(!strstr(u[i].source, "#include \"ewise.cuh\"") && !strstr(u[i].source, ENTRY),
            "%s: the runtime's unit holds more than runtime.cuh:\n%s", rel, u[i].source);
      if (!runtime_source)
        runtime_source = strdup(u[i].source);
      CHECK(strcmp(runtime_source, u[i].source) == 0, "%s sm_%d -O%d: the runtime's unit differs from the first model's",
            rel, sm, opt_level);
      continue;
    }
    int k = entries(u[i].source, names + nnames, 4096 - nnames);
    CHECK(k >= 1, "%s: unit %s has no kernel", rel, u[i].name);
    /* at most 8 rowwise kernels, each with an entry point per form (one or two) */
    CHECK(k <= 16, "%s: unit %s has %d entry points", rel, u[i].name, k);
    if (strstr(u[i].source, "ffn::gemm_"))
      CHECK(k == 1 && strcmp(names[nnames], u[i].name) == 0, "%s: GEMM unit %s has %d kernels (first %s)", rel,
            u[i].name, k, names[nnames]);
    nnames += k;
  }
  CHECK(nruntime == 1, "%s: %d units of the runtime's kernels", rel, nruntime);
  int nfuncs = 0;
  for (int k = 0; k < p->nkernels; k++)
    for (int v = 0; v < p->kernels[k].nvariants; v++) {
      const char *f = p->kernels[k].variants[v].func;
      int found = 0;
      for (int i = 0; i < nnames; i++)
        found += strcmp(names[i], f) == 0;
      CHECK(found == 1, "%s: kernel %s is in %d units", rel, f, found);
      nfuncs++;
    }
  CHECK(nnames == nfuncs, "%s: the units define %d kernels, the plan has %d", rel, nnames, nfuncs);
  /* the whole source defines the same functions */
  static char whole[4096][128];
  CHECK(entries(p->cuda_source, whole, 4096) == nfuncs, "%s: the whole source defines another number of kernels", rel);
  compile_units_free(u, n);
  plan_destroy(p);
}

int main(void) {
  static const char *const models[] = {"examples/llama3_8b.ffn", "examples/llama3_tiny.ffn", "examples/gpt2_tiny.ffn",
                                       "examples/phi3_tiny.ffn", "tests/gpu/models/wq_llama_i4g32_bf16.ffn",
                                       "tests/gpu/models/rowwise_ops.ffn"};
  for (size_t m = 0; m < sizeof models / sizeof models[0]; m++)
    for (int sm = 80; sm <= 90; sm += 10)
      for (int o = 0; o <= 3; o += 3)
        check_model(models[m], sm, o);

  /* at -O0 a model is many small kernels: batched, not a unit each */
  Plan *p = plan_of("tests/gpu/models/rowwise_ops.ffn", 90, 0);
  CompileUnit *u;
  int n = compile_units(p->cuda_source, &u), nrowwise = 0, nrowunits = 0;
  for (int k = 0; k < p->nkernels; k++)
    nrowwise += p->kernels[k].kind == KK_ROWWISE;
  for (int i = 0; i < n; i++)
    nrowunits += !strstr(u[i].source, "ffn::gemm_") && strcmp(u[i].name, "runtime") != 0;
  CHECK(nrowwise > 8 && nrowunits == (nrowwise + 7) / 8, "-O0: %d rowwise kernels in %d units", nrowwise, nrowunits);
  compile_units_free(u, n);
  plan_destroy(p);

  /* a source without kernels: the runtime's unit alone */
  n = compile_units("// nothing\n#define DT_F32 1\n#include \"ewise.cuh\"\n#include \"runtime.cuh\"\n", &u);
  CHECK(n == 1 && strcmp(u[0].name, "runtime") == 0, "a source without kernels: %d units", n);
  compile_units_free(u, n);
  free(runtime_source);
  return check_result("units_test");
}
