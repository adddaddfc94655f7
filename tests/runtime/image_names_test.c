/* image_names_test.c: the loader's hint of which compiled unit holds a kernel (runtime/api.c,
 * image_names), on the cubins NVRTC makes for real models (no GPU needed). The loader asks
 * the units the hint names first and the others after, so a wrong hint costs only sanitizer
 * noise; this checks it is right:
 *
 *  - every kernel entry point of the plan is named by exactly one unit's image;
 *  - a proper prefix of an entry point's name ("k1_sm80_16x128x12") or a longer name with it
 *    as a suffix ("xk1_...") is named by none.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/rt.h"

static int named_by(const ffn_program *p, const char *name) {
  int n = 0;
  for (int i = 0; i < p->nimages; i++)
    n += image_names(&p->images[i], name);
  return n;
}

static void check_model(const char *rel, const char *arch) {
  char path[1024];
  const char *src = getenv("FFNC_SOURCE_DIR");
  snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
  ffn_options *o;
  CHECK(ffn_options_create(&o) == FFN_OK && ffn_options_set_arch(o, arch) == FFN_OK, "options: %s", ffn_last_error());
  ffn_program *p = NULL;
  CHECK(ffn_program_compile_file(path, o, &p) == FFN_OK, "%s for %s: %s", rel, arch, ffn_last_error());
  if (!p) {
    ffn_options_destroy(o);
    return;
  }
  int checked = 0;
  for (int k = 0; k < p->plan->nkernels; k++)
    for (int v = 0; v < p->plan->kernels[k].nvariants; v++) {
      const char *name = p->plan->kernels[k].variants[v].func;
      CHECK(named_by(p, name) == 1, "%s %s: %s named by %d units of %d", rel, arch, name, named_by(p, name), p->nimages);
      char shorter[256], longer[256];
      snprintf(shorter, sizeof shorter, "%.*s", (int)strlen(name) - 1, name);
      snprintf(longer, sizeof longer, "x%s", name);
      CHECK(named_by(p, shorter) == 0 && named_by(p, longer) == 0, "%s %s: %s or %s is named", rel, arch, shorter,
            longer);
      checked++;
    }
  CHECK(checked > 0, "%s: no kernels", rel);
  printf("ok   %s %s: %d entry points, each in one of %d units\n", rel, arch, checked, p->nimages);
  ffn_program_destroy(p);
  ffn_options_destroy(o);
}

int main(void) {
  check_model("examples/llama3_tiny.ffn", "sm_90");
  check_model("tests/gpu/models/wq_gpt_i8_f16.ffn", "sm_80");
  return check_result("image_names_test");
}
