/* grad_args_test.c: ffn_model_run_grad's argument checks (runtime/grad.c), without a GPU: on the
 * launch plan of llama3_tiny's backward graph, every wrong count, flag, device, dtype, shape,
 * layout and alignment is refused with its status and a message naming the gradient; f32 and
 * bf16 tensors, NULL data (not wanted) and accumulation are accepted and staged as the header
 * says (f32 written in place, everything else through f32 staging). A forward plan is refused. */
#include <string.h>

#include "check.h"
#include "codegen/driver.h"
#include "runtime/grad.h"

static Plan *compile(const char *path, bool grad) {
  char *text, err[512];
  size_t len;
  if (read_file(path, &text, &len, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    return NULL;
  }
  DriverOptions o = {.sm = 90, .opt_level = 3, .grad = grad};
  Diags d;
  diags_init(&d);
  Plan *p = NULL;
  if (driver_compile(text, len, path, &o, &d, &p, NULL) != 0)
    fprintf(stderr, "%s", d.text ? d.text : "compile failed\n");
  diags_free(&d);
  free(text);
  return p;
}

enum { T = 7, D = 256, F = 704, NGRADS = 17 };

typedef struct {
  int64_t shape[NGRADS][2];
  DLTensor grads[NGRADS];
  int64_t xshape[2];
  DLTensor inputs[2];
  GradTarget targets[NGRADS];
  int64_t dims[64];
} Call;

/* A valid call: f32 gradients of the right shapes at an aligned (never dereferenced) address. */
static void valid_call(const Plan *p, Call *c) {
  memset(c, 0, sizeof *c);
  c->xshape[0] = T, c->xshape[1] = D;
  for (int i = 0; i < 2; i++)
    c->inputs[i] = (DLTensor){(void *)(uintptr_t)4096, {kDLCUDA, 0}, 2, {kDLBfloat, 16, 1}, c->xshape, NULL, 0};
  for (int i = 0; i < NGRADS; i++) {
    for (int t = 0; t < p->ntensors; t++)
      if (p->tensors[t].kind == PT_OUTPUT && p->tensors[t].index == i) {
        c->shape[i][0] = p->tensors[t].dims[0].sym >= 0 ? T : p->tensors[t].dims[0].size;
        c->shape[i][1] = p->tensors[t].rank > 1 ? p->tensors[t].dims[1].size : 0;
        c->grads[i] = (DLTensor){(void *)(uintptr_t)(8192 * (i + 1)), {kDLCUDA, 0}, p->tensors[t].rank,
                                 {kDLFloat, 32, 1}, c->shape[i], NULL, 0};
      }
  }
}

static ffn_status check(const Plan *p, Call *c, int ngrads, unsigned flags) {
  return grad_check_call(p, c->inputs, 2, c->grads, ngrads, flags, c->targets, c->dims);
}

/* The call is refused with status `want` and a message holding every one of the words. */
#define REFUSED(st, want, ...)                                                                              \
  do {                                                                                                      \
    ffn_status st_ = (st);                                                                                  \
    CHECK(st_ == (want), "status %d (%s), want %d", (int)st_, ffn_last_error(), (int)(want));              \
    const char *words_[] = {__VA_ARGS__};                                                                   \
    for (size_t k_ = 0; k_ < sizeof words_ / sizeof words_[0]; k_++)                                       \
      CHECK(strstr(ffn_last_error(), words_[k_]), "message '%s' lacks '%s'", ffn_last_error(), words_[k_]); \
  } while (0)

int main(void) {
  const char *root = getenv("FFNC_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/examples/llama3_tiny.ffn", root ? root : ".");
  Plan *p = compile(path, true), *fwd = compile(path, false);
  if (!p || !fwd)
    return 1;
  CHECK(p->noutputs == NGRADS && p->ninputs == 2, "llama3_tiny's backward graph: %d inputs, %d outputs", p->ninputs,
        p->noutputs);
  Call c;

  /* accepted: f32 written in place; bf16, accumulated and unwanted ones staged */
  valid_call(p, &c);
  CHECK(check(p, &c, NGRADS, 0) == FFN_OK, "%s", ffn_last_error());
  for (int i = 0; i < NGRADS; i++)
    CHECK(!c.targets[i].staged && c.targets[i].wanted, "gradient %d staged", i);
  CHECK(c.targets[0].numel == T * D, "grad.x has %lld elements", (long long)c.targets[0].numel);
  CHECK(c.targets[1].numel == D && c.targets[2].numel == F * D, "weight gradients' sizes");
  CHECK(check(p, &c, NGRADS, FFN_GRAD_ACCUMULATE) == FFN_OK, "%s", ffn_last_error());
  for (int i = 0; i < NGRADS; i++)
    CHECK(c.targets[i].staged, "an accumulated gradient %d is not staged", i);
  c.grads[2].dtype = (DLDataType){kDLBfloat, 16, 1};
  c.grads[3].data = NULL;
  c.grads[3].ndim = 5; /* not looked at */
  CHECK(check(p, &c, NGRADS, 0) == FFN_OK, "%s", ffn_last_error());
  CHECK(c.targets[2].staged && c.targets[2].bf16 && c.targets[2].wanted, "a bf16 gradient");
  CHECK(c.targets[3].staged && !c.targets[3].wanted, "an unwanted gradient");
  CHECK(!c.targets[1].staged && !c.targets[4].staged, "f32 gradients beside them");

  /* the staging space of accumulated gradients: gradients alive at the same step never share
   * bytes, and the space is well below their sum (a layer's weight gradients come one after
   * another) but holds the largest */
  valid_call(p, &c);
  CHECK(check(p, &c, NGRADS, FFN_GRAD_ACCUMULATE) == FFN_OK, "%s", ffn_last_error());
  size_t total = grad_staging_plan(p, c.targets, NGRADS), sum = 0, largest = 0;
  for (int i = 0; i < NGRADS; i++) {
    const GradTarget *a = &c.targets[i];
    size_t bytes = (size_t)a->numel * 4;
    sum += bytes;
    largest = bytes > largest ? bytes : largest;
    CHECK(a->first >= 0 && a->first <= a->last && a->last < p->nsteps, "gradient %d lives in steps %d..%d of %d", i,
          a->first, a->last, p->nsteps);
    const PlanStep *last = &p->steps[a->last < p->nsteps ? a->last : 0];
    bool touches = false;
    for (int j = 0; j < last->nargs; j++)
      touches |= last->args[j] == a->tensor;
    CHECK(touches, "gradient %d: its last step %d does not touch it", i, a->last);
    CHECK(a->offset + bytes <= total, "gradient %d at %zu + %zu beyond %zu", i, a->offset, bytes, total);
    for (int j = 0; j < i; j++) {
      const GradTarget *b = &c.targets[j];
      bool alive_together = !(a->last < b->first || b->last < a->first);
      bool share = a->offset < b->offset + (size_t)b->numel * 4 && b->offset < a->offset + bytes;
      CHECK(!(alive_together && share), "gradients %d and %d are alive together (steps %d..%d, %d..%d) and share "
            "bytes", i, j, a->first, a->last, b->first, b->last);
    }
  }
  printf("staging: %zu bytes for %zu bytes of gradients (largest %zu)\n", total, sum, largest);
  CHECK(total >= largest && total < sum / 2, "staging %zu bytes for gradients of %zu (largest %zu)", total, sum,
        largest);

  /* refused */
  valid_call(p, &c);
  REFUSED(check(fwd, &c, NGRADS, 0), FFN_ERR_INVALID_ARGUMENT, "not a backward graph", "ffn_options_set_grad");
  REFUSED(check(p, &c, NGRADS - 1, 0), FFN_ERR_INVALID_ARGUMENT, "17 gradients", "got 2 and 16");
  REFUSED(check(p, &c, NGRADS, 4), FFN_ERR_INVALID_ARGUMENT, "unknown flags 0x4");
  c.grads[2].dtype = (DLDataType){kDLFloat, 16, 1};
  REFUSED(check(p, &c, NGRADS, 0), FFN_ERR_TENSOR, "grad.model.layers.0.mlp.gate_proj.weight", "f32", "bf16",
          "code 2 bits 16");
  valid_call(p, &c);
  c.grads[0].dtype = (DLDataType){kDLFloat, 64, 1};
  REFUSED(check(p, &c, NGRADS, FFN_GRAD_ACCUMULATE), FFN_ERR_TENSOR, "gradient 'grad.x'", "bits 64");
  valid_call(p, &c);
  c.shape[3][0] = D, c.shape[3][1] = F; /* up_proj's gradient transposed */
  REFUSED(check(p, &c, NGRADS, 0), FFN_ERR_TENSOR, "grad.model.layers.0.mlp.up_proj.weight");
  valid_call(p, &c);
  c.shape[0][0] = T + 1; /* grad.x of other tokens than x */
  REFUSED(check(p, &c, NGRADS, 0), FFN_ERR_TENSOR, "gradient 'grad.x'");
  valid_call(p, &c);
  c.grads[1].ndim = 2; /* the norm gain's gradient is [D] */
  REFUSED(check(p, &c, NGRADS, 0), FFN_ERR_TENSOR, "grad.model.layers.0.post_attention_layernorm.weight");
  valid_call(p, &c);
  c.grads[4].device.device_type = kDLCPU;
  REFUSED(check(p, &c, NGRADS, 0), FFN_ERR_INVALID_ARGUMENT, "down_proj", "device memory", "device type 1");
  valid_call(p, &c);
  int64_t strides[2] = {1, F};
  c.grads[6].strides = strides; /* a column-major view */
  REFUSED(check(p, &c, NGRADS, 0), FFN_ERR_TENSOR, "layers.1.mlp.gate_proj", "contiguous");
  valid_call(p, &c);
  c.grads[7].byte_offset = 4;
  REFUSED(check(p, &c, NGRADS, 0), FFN_ERR_INVALID_ARGUMENT, "layers.1.mlp.up_proj", "16-byte aligned");
  valid_call(p, &c);
  c.xshape[1] = D + 1; /* the inputs themselves */
  REFUSED(check(p, &c, NGRADS, 0), FFN_ERR_TENSOR, "input 'x'");

  /* the public entry refuses what it cannot look at, with no GPU needed */
  REFUSED(ffn_model_run_grad(NULL, NULL, c.inputs, 2, c.grads, NGRADS, 0), FFN_ERR_INVALID_ARGUMENT,
          "ffn_model_run_grad");
  plan_destroy(p);
  plan_destroy(fwd);
  return check_result("grad_args_test");
}
