/* tp_weights_test.c: a tensor-parallel share's weight windows (runtime/tp_weights.c), no GPU.
 * For Llama-tiny's shares (N = 2, 4) every gate/up weight is narrowed to its rows and every
 * down weight to its columns, the narrowed plan's load-time steps keep consistent shapes (the
 * runtime's check_prep rule), and the slice a kernel reads is the same whether the whole
 * weight or its window is bound (the transpose and slice steps evaluated here on random
 * data). Fused runs (weights concatenated before the slice), TP 1 and FFNC_TP_WHOLE_WEIGHTS=1
 * narrow nothing. */
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

/* The runtime's rule for a load-time step (exec.c check_prep): the IR's shape inference. */
static bool consistent(const Plan *p, const PrepStep *s) {
  Node args[8], *argp[8], proto = {.ival = {s->ival[0], s->ival[1]}, .fval = s->fval};
  for (int i = 0; i < s->nargs; i++) {
    const PlanTensor *t = &p->tensors[s->args[i]];
    args[i] = (Node){.dtype = t->dtype, .shape = {.rank = t->rank}};
    memcpy(args[i].shape.d, t->dims, sizeof(Dim) * (size_t)t->rank);
    argp[i] = &args[i];
  }
  const PlanTensor *o = &p->tensors[s->out];
  Shape out = {.rank = o->rank}, want;
  memcpy(out.d, o->dims, sizeof(Dim) * (size_t)o->rank);
  char why[256];
  return s->op == OP_SCALAR || (ir_infer_shape(NULL, s->op, argp, s->nargs, &proto, &want, why, sizeof why) &&
                                shape_eq(&want, &out));
}

/* Host transpose and last-axis slice of 16-bit values, as the load-time kernels do them. */
static uint16_t *transpose(const uint16_t *a, int64_t rows, int64_t cols) {
  uint16_t *t = malloc(sizeof *t * (size_t)(rows * cols));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      t[c * rows + r] = a[r * cols + c];
  return t;
}

static uint16_t *slice(const uint16_t *a, int64_t rows, int64_t cols, int64_t off, int64_t len) {
  uint16_t *s = malloc(sizeof *s * (size_t)(rows * len));
  for (int64_t r = 0; r < rows; r++)
    memcpy(s + r * len, a + r * cols + off, sizeof *s * (size_t)len);
  return s;
}

/* The slice step's result from weight t of plan p bound as `w` (the whole or a window). */
static uint16_t *sliced(const Plan *p, int t, const uint16_t *w) {
  for (int i = 0; i < p->nprep; i++) {
    const PrepStep *s = &p->prep[i];
    if (s->args[0] != t)
      continue;
    const PlanTensor *pt = &p->tensors[t];
    int64_t rows = pt->dims[0].size, cols = pt->dims[1].size;
    int64_t len = p->tensors[s->out].dims[1].size;
    if (s->op == OP_SLICE)
      return slice(w, rows, cols, s->ival[0], len);
    if (s->op == OP_TRANSPOSE) {
      uint16_t *tr = transpose(w, rows, cols), *r = sliced(p, s->out, tr);
      free(tr);
      return r;
    }
  }
  return NULL;
}

/* Rank `rank`'s share of `file` over `ranks`: `want` weights narrowed, each to the rank's
 * part of its F axis (rows of a weight read transposed, columns of one read as stored). */
static void shares(const char *file, const char *src, size_t len, int ranks, int rank, int want) {
  Plan *p = compile(src, len, ranks, rank, false), *n;
  WeightWindow *w;
  CHECK(p && tp_narrow_plan(p, &n, &w) == FFN_OK && n && w, "%s N=%d R=%d: %s", file, ranks, rank, ffn_last_error());
  if (!p || !n)
    return;
  int windows = 0;
  for (int t = 0; t < p->ntensors; t++) {
    const PlanTensor *pt = &p->tensors[t];
    if (pt->kind != PT_WEIGHT || !w[t].on)
      continue;
    windows++;
    int64_t whole_len = w[t].axis ? w[t].cols : w[t].rows;
    CHECK(w[t].len * ranks == whole_len && w[t].off == rank * w[t].len && w[t].rows == pt->dims[0].size &&
              w[t].cols == pt->dims[1].size && n->tensors[t].dims[w[t].axis].size == w[t].len,
          "%s N=%d R=%d %s: window axis %d [%lld, +%lld) of [%lld, %lld]", file, ranks, rank, pt->name, w[t].axis,
          (long long)w[t].off, (long long)w[t].len, (long long)w[t].rows, (long long)w[t].cols);
    /* the slice the kernels read: the same from the whole weight and from its window */
    size_t whole_n = (size_t)(w[t].rows * w[t].cols);
    uint16_t *whole = malloc(2 * whole_n), *win = malloc(2 * whole_n);
    for (size_t i = 0; i < whole_n; i++)
      whole[i] = (uint16_t)(rand() & 0xffff);
    window_gather(&w[t], whole, 2, win);
    uint16_t *a = sliced(p, t, whole), *b = sliced(n, t, win);
    size_t out_n = (size_t)(w[t].len * (w[t].axis ? w[t].rows : w[t].cols));
    CHECK(a && b && memcmp(a, b, 2 * out_n) == 0, "%s N=%d R=%d %s: the slice differs", file, ranks, rank, pt->name);
    free(whole), free(win), free(a), free(b);
  }
  CHECK(windows == want, "%s: %d weights with windows, want %d", file, windows, want);
  for (int i = 0; i < n->nprep; i++)
    CHECK(consistent(n, &n->prep[i]), "%s N=%d R=%d: load-time %s (step %d) has inconsistent shapes", file, ranks,
          rank, op_info[n->prep[i].op].name, i);
  printf("%s N=%d R=%d: %d weights narrowed\n", file, ranks, rank, windows);
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
  shares("llama3_tiny", llama, len, 2, 0, 12); /* gate, up and down of 4 layers */
  shares("llama3_tiny", llama, len, 2, 1, 12);
  shares("llama3_tiny", llama, len, 4, 3, 12);
  shares("gpt2_tiny", gpt, glen, 2, 1, 4); /* up and down of 2 layers (the biases are vectors) */
  nothing_narrows("TP 1", compile(llama, len, 1, 0, false));
  nothing_narrows("fused 0..4", compile(llama, len, 2, 1, true));
  setenv("FFNC_TP_WHOLE_WEIGHTS", "1", 1);
  nothing_narrows("FFNC_TP_WHOLE_WEIGHTS=1", compile(llama, len, 2, 1, false));
  free(llama);
  free(gpt);
  return check_result("tp_weights_test");
}
