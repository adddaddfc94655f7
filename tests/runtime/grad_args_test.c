/* grad_args_test.c: ffn_model_run_grad's argument checks (runtime/grad.c), without a GPU: on the
 * launch plan of llama3_tiny's backward graph, every wrong count, flag, device, dtype, shape,
 * layout and alignment is refused with its status and a message naming the gradient; f32 and
 * bf16 tensors, NULL data (not wanted) and accumulation are accepted and staged as the header
 * says (f32 written in place, everything else through f32 staging), then grad_plan_direct takes
 * the weight gradients the wgrad kernels can write themselves off the staging (not on sm_80, not
 * a tied weight's summed gradient). A forward plan is refused. ffn_model_share_workspace refuses
 * NULL models and a model sharing with itself before looking at either. */
#include <string.h>

#include "check.h"
#include "codegen/driver.h"
#include "passes/memplan.h"
#include "runtime/grad.h"

static Plan *compile(const char *path, bool grad, int sm) {
  char *text, err[512];
  size_t len;
  if (read_file(path, &text, &len, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    return NULL;
  }
  DriverOptions o = {.sm = sm, .opt_level = 3, .grad = grad};
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

/* The call's workspace bytes at T tokens with the staged gradients of targets in it, their
 * offsets in off (ntensors): what exec_begin_ex lays out (memplan_assign_call). */
static size_t staged_workspace(const Plan *p, GradTarget *targets, size_t *off) {
  bool *in_ws = calloc((size_t)p->ntensors, sizeof(bool));
  int64_t dims[1] = {T};
  grad_staging_plan(p, targets, NGRADS, in_ws);
  size_t total = memplan_assign_call(p, dims, in_ws, off, NULL);
  free(in_ws);
  return total;
}

typedef struct {
  int64_t shape[NGRADS][2];
  DLTensor grads[NGRADS];
  int64_t xshape[2];
  DLTensor inputs[2];
  GradTarget targets[NGRADS];
  int64_t dims[64];
} Call;

/* A valid call: f32 gradients of the right shapes at an aligned (never dereferenced) address;
 * inputs [T, width]. */
static void valid_call_of(const Plan *p, Call *c, int64_t width) {
  memset(c, 0, sizeof *c);
  c->xshape[0] = T, c->xshape[1] = width;
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

static void valid_call(const Plan *p, Call *c) { valid_call_of(p, c, D); }

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

/* Gradient i of llama3_tiny's backward graph is a weight's (gate, up, down), not grad.x or a gain. */
static bool is_weight_grad(int i) { return i >= 2 && (i - 1) % 4 != 0; }

/* Target i is written by its step's direct form for type dt and mode acc (grad_plan_direct). */
static void check_direct(const Plan *p, const GradTarget *t, int i, DType dt, bool acc) {
  CHECK(!t->staged && t->direct >= 0 && t->direct < p->nsteps, "gradient %d: not direct (staged %d)", i, t->staged);
  if (t->staged || t->direct < 0)
    return;
  const PlanStep *s = &p->steps[t->direct];
  const PlanKernel *k = &p->kernels[s->kernel];
  CHECK(k->op == OP_MATMUL_AT && s->nargs == 3 && s->args[2] == t->tensor, "gradient %d: step %d", i, t->direct);
  const KernelVariant *v = &k->variants[t->variant];
  CHECK(v->out == dt && v->accumulate == acc, "gradient %d: variant %s", i, v->func);
}

/* grad_plan_direct on llama3_tiny (sm_90): the weight gradients of bf16 or accumulated tensors
 * are written by the wgrad kernels' direct forms; grad.x and the gains (rowwise kernels), f32
 * tensors written in place and unwanted gradients are not; nothing is direct on sm_80. */
static void direct_llama(const Plan *p, const Plan *p80) {
  Call c;
  valid_call(p, &c);
  CHECK(check(p, &c, NGRADS, FFN_GRAD_ACCUMULATE) == FFN_OK, "%s", ffn_last_error());
  CHECK(check(p, &c, NGRADS, FFN_GRAD_ACCUMULATE | FFN_GRAD_CONSUME_SAVED) == FFN_OK, "consume: %s", ffn_last_error());
  size_t *off = malloc(sizeof(size_t) * (size_t)p->ntensors);
  size_t all_staged = staged_workspace(p, c.targets, off);
  CHECK(grad_plan_direct(p, c.targets, NGRADS, FFN_GRAD_ACCUMULATE) == 12, "12 weight gradients direct");
  for (int i = 0; i < NGRADS; i++)
    if (is_weight_grad(i))
      check_direct(p, &c.targets[i], i, DT_F32, true);
    else
      CHECK(c.targets[i].staged && c.targets[i].direct < 0, "gradient %d is staged", i);
  size_t staged = staged_workspace(p, c.targets, off), scratch = memplan_assign(p, (int64_t[1]){T}, off);
  CHECK(staged <= scratch + (size_t)T * D * 4 + 256 * 4 + 1024 && staged < all_staged / 4,
        "workspace %zu bytes with the weight gradients direct (%zu all staged, %zu none)", staged, all_staged, scratch);
  free(off);
  valid_call(p, &c);
  c.grads[2].dtype = c.grads[8].dtype = c.grads[5].dtype = (DLDataType){kDLBfloat, 16, 1};
  c.grads[3].data = NULL;
  CHECK(check(p, &c, NGRADS, 0) == FFN_OK, "%s", ffn_last_error());
  CHECK(grad_plan_direct(p, c.targets, NGRADS, 0) == 2, "two bf16 weight gradients direct");
  check_direct(p, &c.targets[2], 2, DT_BF16, false);
  check_direct(p, &c.targets[8], 8, DT_BF16, false);
  CHECK(c.targets[5].staged && c.targets[5].direct < 0, "a bf16 gain's gradient (rowwise kernel) is staged");
  CHECK(c.targets[3].staged && c.targets[3].direct < 0, "an unwanted gradient is staged");
  CHECK(!c.targets[4].staged && c.targets[4].direct < 0, "an f32 gradient written in place stays the plan's output");
  CHECK(check(p, &c, NGRADS, FFN_GRAD_ACCUMULATE) == FFN_OK, "%s", ffn_last_error());
  CHECK(grad_plan_direct(p, c.targets, NGRADS, FFN_GRAD_ACCUMULATE) == 11, "the 11 wanted weight gradients direct");
  check_direct(p, &c.targets[2], 2, DT_BF16, true);
  check_direct(p, &c.targets[4], 4, DT_F32, true);
  valid_call(p80, &c);
  CHECK(check(p80, &c, NGRADS, FFN_GRAD_ACCUMULATE) == FFN_OK, "%s", ffn_last_error());
  CHECK(grad_plan_direct(p80, c.targets, NGRADS, FFN_GRAD_ACCUMULATE) == 0, "sm_80: nothing direct");
}

/* A tied weight's gradient, the sum of two products' (added by a rowwise kernel), stays staged;
 * the untied weight's is direct. */
static void direct_tied(void) {
  const char *root = getenv("FFNC_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/gpu/models/tied_wgrad_bf16.ffn", root ? root : ".");
  Plan *p = compile(path, true, 90);
  if (!p)
    return;
  Call c;
  int n = p->noutputs;
  CHECK(n == 4, "tied: 4 gradients, not %d", n);
  for (unsigned flags = 0; flags <= FFN_GRAD_ACCUMULATE; flags++) {
    valid_call_of(p, &c, 200);
    for (int i = 0; i < n; i++)
      c.grads[i].dtype = (DLDataType){kDLBfloat, 16, 1};
    CHECK(check(p, &c, n, flags) == FFN_OK, "%s", ffn_last_error());
    CHECK(grad_plan_direct(p, c.targets, n, flags) == 1, "tied: one gradient direct (flags %u)", flags);
    for (int i = 0; i < n; i++) {
      const char *name = p->tensors[c.targets[i].tensor].name;
      if (strcmp(name, "grad.up") == 0)
        check_direct(p, &c.targets[i], i, DT_BF16, flags != 0);
      else
        CHECK(c.targets[i].staged && c.targets[i].direct < 0, "tied: %s staged", name);
    }
  }
  plan_destroy(p);
}

int main(void) {
  const char *root = getenv("FFNC_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/examples/llama3_tiny.ffn", root ? root : ".");
  Plan *p = compile(path, true, 90), *fwd = compile(path, false, 90), *p80 = compile(path, true, 80);
  if (!p || !fwd || !p80)
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

  /* accumulated gradients staged in the workspace: gradients alive at the same step never share
   * bytes, with each other or with the intermediate values, and the workspace grows by well
   * below their sum (a layer's weight gradients come one after another) */
  valid_call(p, &c);
  CHECK(check(p, &c, NGRADS, FFN_GRAD_ACCUMULATE) == FFN_OK, "%s", ffn_last_error());
  size_t *off = malloc(sizeof(size_t) * (size_t)p->ntensors);
  size_t scratch = memplan_assign(p, (int64_t[1]){T}, off);
  size_t total = staged_workspace(p, c.targets, off), sum = 0, largest = 0;
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
    size_t ao = off[a->tensor];
    CHECK(ao + bytes <= total, "gradient %d at %zu + %zu beyond %zu", i, ao, bytes, total);
    for (int j = 0; j < i; j++) {
      const GradTarget *b = &c.targets[j];
      bool alive_together = !(a->last < b->first || b->last < a->first);
      bool share = ao < off[b->tensor] + (size_t)b->numel * 4 && off[b->tensor] < ao + bytes;
      CHECK(!(alive_together && share), "gradients %d and %d are alive together (steps %d..%d, %d..%d) and share "
            "bytes", i, j, a->first, a->last, b->first, b->last);
    }
    for (int t = 0; t < p->ntensors; t++) { /* nor with an intermediate value alive with it */
      const PlanTensor *u = &p->tensors[t];
      size_t ub = dtype_bytes(u->dtype, (size_t)plan_numel(p, t, (int64_t[1]){T}));
      bool alive_together = u->kind == PT_SCRATCH && u->first >= 0 && !(a->last < u->first || u->last < a->first);
      CHECK(!(alive_together && ao < off[t] + ub && off[t] < ao + bytes), "gradient %d shares bytes with tensor %d",
            i, t);
    }
  }
  printf("workspace: %zu bytes with %zu bytes of gradients staged in it (largest %zu), %zu without\n", total, sum,
         largest, scratch);
  CHECK(total >= largest && total < scratch + sum / 2, "workspace %zu bytes for gradients of %zu (largest %zu)", total,
        sum, largest);
  free(off);

  direct_llama(p, p80);
  direct_tied();

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
  /* and so does sharing a workspace: the model is never looked at (a stand-in address) */
  ffn_model *model = (ffn_model *)(uintptr_t)4096;
  REFUSED(ffn_model_share_workspace(NULL, model), FFN_ERR_INVALID_ARGUMENT, "ffn_model_share_workspace", "NULL");
  REFUSED(ffn_model_share_workspace(model, NULL), FFN_ERR_INVALID_ARGUMENT, "ffn_model_share_workspace", "NULL");
  REFUSED(ffn_model_share_workspace(model, model), FFN_ERR_INVALID_ARGUMENT, "ffn_model_share_workspace", "itself");
  plan_destroy(p);
  plan_destroy(fwd);
  plan_destroy(p80);
  return check_result("grad_args_test");
}
