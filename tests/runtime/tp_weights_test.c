/* tp_weights_test.c: a tensor-parallel share's weight windows (runtime/tp_weights.c), no GPU.
 * For Llama- and GPT-tiny's shares, plain and fused (FFN Fusion's concatenated weights), a
 * share binds 1/N of the matrices, the narrowed plan's load-time steps keep consistent shapes
 * (the runtime's exec_check_prep rule), and every slice a kernel reads is the same whether the
 * whole weights or the windows are bound (the load-time steps evaluated here on random data).
 * TP 1 and FFNC_TP_WHOLE_WEIGHTS=1 narrow nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codegen/driver.h"
#include "runtime/rt.h"

static Plan *compile(const char *src, size_t len, int tp, int rank, bool fused) {
  FuseRequest fuse = {0, 4, {0}};
  DriverOptions o = {.sm = 90, .opt_level = 3, .tp = tp, .tp_rank = rank, .fuse = fused ? &fuse : NULL,
                     .nfuse = fused};
  Diags d;
  diags_init(&d);
  Plan *p = NULL;
  if (driver_compile(src, len, "llama3_tiny.ffn", &o, &d, &p, NULL) != 0)
    fprintf(stderr, "%s", d.text ? d.text : "compile failed\n");
  diags_free(&d);
  return p;
}

/* The runtime's rule for a load-time step (exec.c), with its reason on failure. */
static bool consistent(const Plan *p, const PrepStep *s) {
  if (exec_check_prep(p, s) == FFN_OK)
    return true;
  fprintf(stderr, "%s\n", ffn_last_error());
  return false;
}

/* The load-time steps of these plans on the host, on 16-bit codes: transpose, slice,
 * concat and mul (a wrapping product: only which elements meet matters). NULL for other ops. */
static uint16_t *eval(const Plan *p, int t, uint16_t *const *bound) {
  const PlanTensor *pt = &p->tensors[t];
  int64_t rows = pt->rank == 2 ? pt->dims[0].size : 1, cols = pt->dims[pt->rank - 1].size;
  uint16_t *out = malloc(2 * (size_t)(rows * cols) + 2);
  if (pt->kind == PT_WEIGHT) {
    memcpy(out, bound[t], 2 * (size_t)(rows * cols));
    return out;
  }
  const PrepStep *s = NULL;
  for (int i = 0; i < p->nprep; i++)
    if (p->prep[i].out == t)
      s = &p->prep[i];
  uint16_t *a = s ? eval(p, s->args[0], bound) : NULL;
  const PlanTensor *ta = s ? &p->tensors[s->args[0]] : NULL;
  int64_t acols = ta ? ta->dims[ta->rank - 1].size : 0;
  if (!a || !s) {
    free(out);
    return NULL;
  }
  if (s->op == OP_TRANSPOSE) {
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++)
        out[r * cols + c] = a[c * rows + r];
  } else if (s->op == OP_SLICE) {
    for (int64_t r = 0; r < rows; r++)
      memcpy(out + r * cols, a + r * acols + s->ival[0], 2 * (size_t)cols);
  } else if (s->op == OP_MUL && s->nargs == 2) {
    uint16_t *b = eval(p, s->args[1], bound);
    int64_t bn = plan_numel(p, s->args[1], NULL);
    for (int64_t i = 0; b && i < rows * cols; i++)
      out[i] = (uint16_t)(a[i] * b[bn == cols ? i % cols : i]);
    free(b);
  } else if (s->op == OP_CONCAT) {
    int64_t at = 0;
    for (int k = 0; k < s->nargs; k++) {
      const PlanTensor *tk = &p->tensors[s->args[k]];
      int64_t kr = tk->dims[0].size, kc = tk->dims[1].size;
      uint16_t *x = k ? eval(p, s->args[k], bound) : a;
      for (int64_t r = 0; x && r < kr; r++)
        if (s->ival[0] == 0)
          memcpy(out + (at + r) * cols, x + r * kc, 2 * (size_t)kc);
        else
          memcpy(out + r * cols + at, x + r * kc, 2 * (size_t)kc);
      at += s->ival[0] == 0 ? kr : kc;
      if (k)
        free(x);
    }
  } else {
    free(a);
    free(out);
    return NULL;
  }
  free(a);
  return out;
}

/* Rank `rank`'s share of `file` over `ranks` (fused: FFN Fusion of layers 0..4): the matrices
 * it binds are 1/N of the whole ones (all; else fewer than the whole), and every slice the
 * kernels read is the same from the whole weights as from the windows. */
static void shares(const char *file, const char *src, size_t len, int ranks, int rank, bool fused, bool all) {
  Plan *p = compile(src, len, ranks, rank, fused), *n;
  WeightWindow *w;
  CHECK(p && tp_narrow_plan(p, &n, &w) == FFN_OK && n && w, "%s N=%d R=%d: %s", file, ranks, rank, ffn_last_error());
  if (!p || !n)
    return;
  double whole_bytes = 0, bound_bytes = 0;
  uint16_t **whole = calloc((size_t)p->ntensors, sizeof *whole), **win = calloc((size_t)p->ntensors, sizeof *win);
  for (int t = 0; t < p->ntensors; t++) {
    const PlanTensor *pt = &p->tensors[t];
    if (pt->kind != PT_WEIGHT)
      continue;
    size_t numel = (size_t)plan_numel(p, t, NULL);
    whole[t] = malloc(2 * numel + 2);
    win[t] = malloc(2 * numel + 2);
    for (size_t i = 0; i < numel; i++)
      whole[t][i] = (uint16_t)(rand() & 0xffff);
    if (w[t].on) {
      CHECK(w[t].rows == pt->dims[0].size && w[t].cols == pt->dims[1].size &&
                n->tensors[t].dims[w[t].axis].size == w[t].len && w[t].off >= 0 &&
                w[t].off + w[t].len <= (w[t].axis ? w[t].cols : w[t].rows),
            "%s: window of %s", file, pt->name);
      window_gather(&w[t], whole[t], 2, win[t]);
    } else {
      memcpy(win[t], whole[t], 2 * numel);
    }
    if (pt->rank == 2) {
      whole_bytes += (double)numel;
      bound_bytes += (double)plan_numel(n, t, NULL);
    }
  }
  int slices = 0;
  for (int i = 0; i < n->nprep; i++) {
    if (n->prep[i].op != OP_SLICE)
      continue;
    int out = n->prep[i].out;
    bool sliced_before = false; /* not a concat of one operand, now a whole-tensor slice */
    for (int k = 0; k < p->nprep; k++)
      sliced_before |= p->prep[k].out == out && p->prep[k].op == OP_SLICE;
    if (!sliced_before)
      continue;
    uint16_t *a = eval(p, out, whole), *b = eval(n, out, win);
    if (!a && !b) /* made by steps eval does not know (rowsum, matmul: never narrowed) */
      continue;
    CHECK(a && b && memcmp(a, b, 2 * (size_t)plan_numel(p, out, NULL)) == 0, "%s N=%d R=%d: slice %d differs", file,
          ranks, rank, out);
    slices++;
    free(a), free(b);
  }
  CHECK(all ? fabs(bound_bytes / whole_bytes - 1.0 / ranks) < 1e-9 : bound_bytes < whole_bytes,
        "%s N=%d R=%d binds %.4f of the matrices", file, ranks, rank, bound_bytes / whole_bytes);
  for (int i = 0; i < n->nprep; i++)
    CHECK(consistent(n, &n->prep[i]), "%s N=%d R=%d: load-time %s (step %d) has inconsistent shapes", file, ranks,
          rank, op_info[n->prep[i].op].name, i);
  printf("%s%s N=%d R=%d: binds %.3f of the matrices, %d slices the same, %d of %d load-time steps left\n", file,
         fused ? " fused 0..4" : "", ranks, rank, bound_bytes / whole_bytes, slices, n->nprep, p->nprep);
  for (int t = 0; t < p->ntensors; t++)
    free(whole[t]), free(win[t]);
  free(whole), free(win);
  plan_destroy(p);
  plan_destroy(n);
  free(w);
}

static char *source(const char *rel, size_t *len) {
  const char *root = getenv("FFNC_SOURCE_DIR");
  char path[4096], *src, err[512];
  snprintf(path, sizeof path, "%s/%s", root ? root : ".", rel);
  if (read_file(path, &src, len, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
  return src;
}

static void nothing_narrows(const char *what, Plan *p) {
  Plan *n = (Plan *)1;
  WeightWindow *w = (WeightWindow *)1;
  CHECK(p && tp_narrow_plan(p, &n, &w) == FFN_OK && !n && !w, "%s: narrowed", what);
  plan_destroy(p);
}

int main(void) {
  /* window_gather alone: rows 1..2 and columns 2..4 of a 3 x 5 matrix */
  uint16_t m[15], out[15];
  for (int i = 0; i < 15; i++)
    m[i] = (uint16_t)i;
  WeightWindow rows = {true, 0, 1, 2, 3, 5}, cols = {true, 1, 2, 3, 3, 5};
  window_gather(&rows, m, 2, out);
  CHECK(memcmp(out, m + 5, 20) == 0, "rows window");
  window_gather(&cols, m, 2, out);
  static const uint16_t want[] = {2, 3, 4, 7, 8, 9, 12, 13, 14};
  CHECK(memcmp(out, want, sizeof want) == 0, "columns window");

  size_t len, glen;
  char *llama = source("examples/llama3_tiny.ffn", &len), *gpt = source("examples/gpt2_tiny.ffn", &glen);
  shares("llama3_tiny", llama, len, 2, 0, false, true);
  shares("llama3_tiny", llama, len, 2, 1, false, true);
  shares("llama3_tiny", llama, len, 4, 3, false, true);
  shares("gpt2_tiny", gpt, glen, 2, 1, false, true);
  shares("llama3_tiny", llama, len, 2, 1, true, true); /* layers 2 and 3 whole, 0 and 1 dropped */
  shares("llama3_tiny", llama, len, 4, 1, true, true);
  shares("llama3_tiny", llama, len, 8, 3, true, true); /* half of layer 1 */
  size_t flen, glen2;
  char *fl = source("tests/gpu/models/fused_llama.ffn", &flen), *fg = source("tests/gpu/models/fused_gpt.ffn", &glen2);
  shares("fused_llama", fl, flen, 2, 0, false, true); /* its own runs 0..3 and 3..5 */
  /* the layernorm fold also reads the fused up weights whole (their row sums): those stay whole */
  shares("fused_gpt", fg, glen2, 2, 1, false, false);
  free(fl), free(fg);
  nothing_narrows("TP 1", compile(llama, len, 1, 0, false));
  setenv("FFNC_TP_WHOLE_WEIGHTS", "1", 1);
  nothing_narrows("FFNC_TP_WHOLE_WEIGHTS=1", compile(llama, len, 2, 1, false));
  free(llama);
  free(gpt);
  return check_result("tp_weights_test");
}
