/* prequant_plan_test.c: pre-quantized fp8 checkpoints in launch plans (no GPU).
 *
 *  - Under `precision matmul T` of the codes' type, an fp8 product's B is the checkpoint's own
 *    codes and scales: the load-time steps that make B from them only move bytes (no f8_pack,
 *    no f8_dequant), and run on the host over a random checkpoint, they give, row for row, the
 *    stored row the reference reads (interp.c: stored_row_scales) with its stored scale: the
 *    gate/up interleave, slices of output columns (chunk(w^T)), slices along K, and a stored
 *    gate merged with an f32 up weight, whose rows are quantized from their values. The
 *    checkpoints have per-tensor scales where most rows' largest code is below the format's
 *    max, so quantizing the values again would give other codes and scales.
 *  - Without an fp8 policy every pre-quantized weight is read through one f8_dequant.
 *  - The plan's JSON keeps the codes' type and scale tensor.
 */
#include "gpu/gpu_util.h"

#include "check.h"
#include "plan_util.h"
#include "kernels/abi.cuh"
#include "kernels/numfmt.cuh"

/* A model of the source tree compiled for sm_90 at -O3: its plan and its optimized graph. */
static Plan *compile(const char *rel, Graph **graph) { return compile_plan_ex(rel, 90, 3, graph); }

static int count_prep(const Plan *p, Op op) {
  int n = 0;
  for (int i = 0; i < p->nprep; i++)
    n += p->prep[i].op == op;
  return n;
}

/* ---- the load-time steps on the host (what kernels/prep.cuh and exec.c do) ---- */

typedef struct {
  const Plan *p;
  const TensorSet *w;
  unsigned char **data; /* per tensor */
} Host;

static const RawTensor *find(const TensorSet *w, const char *name) {
  for (int i = 0; i < w->n; i++)
    if (strcmp(w->items[i].name, name) == 0)
      return &w->items[i].t;
  return NULL;
}

static size_t esize(DType t) { return (size_t)dtype_bits(t) / 8; }

static void host_step(Host *h, const PrepStep *s) {
  const Plan *p = h->p;
  const PlanTensor *o = &p->tensors[s->out], *a = &p->tensors[s->args[0]];
  int64_t n = plan_numel(p, s->out, NULL);
  size_t es = esize(o->dtype);
  unsigned char *out = h->data[s->out] = calloc((size_t)n + 1, es), *in = h->data[s->args[0]];
  CHECK(in, "prep %s reads tensor %d before it is made", op_info[s->op].name, s->args[0]);
  if (!in)
    return;
  switch (s->op) {
  case OP_F8_SCALES: { /* the checkpoint's scale, repeated for a per-tensor one */
    const RawTensor *sc = find(h->w, a->scale);
    int64_t count = 1;
    for (int d = 0; d < sc->rank; d++)
      count *= sc->shape[d];
    for (int64_t r = 0; r < n; r++)
      ((float *)out)[r] = ((const float *)sc->data)[count > 1 ? r : 0];
    break;
  }
  case OP_TRANSPOSE: {
    int64_t R = a->dims[0].size, C = a->dims[1].size;
    for (int64_t i = 0; i < R * C; i++)
      memcpy(out + (size_t)((i % C) * R + i / C) * es, in + (size_t)i * es, es);
    break;
  }
  case OP_SLICE: {
    int64_t C = a->dims[a->rank - 1].size, len = s->ival[1], rows = n / len;
    for (int64_t r = 0; r < rows; r++)
      memcpy(out + (size_t)(r * len) * es, in + (size_t)(r * C + s->ival[0]) * es, (size_t)len * es);
    break;
  }
  case OP_CONCAT: {
    CHECK(s->ival[0] == 0, "concat along dim %lld", (long long)s->ival[0]);
    size_t at = 0;
    for (int i = 0; i < s->nargs; i++) {
      size_t bytes = (size_t)plan_numel(p, s->args[i], NULL) * es;
      memcpy(out + at, h->data[s->args[i]], bytes);
      at += bytes;
    }
    break;
  }
  case OP_INTERLEAVE: { /* as ffn_prep_interleave */
    int64_t R = a->dims[0].size, K = a->dims[1].size, G = s->ival[0], S = s->ival[1], N = R / S;
    for (int64_t row = 0; row < R; row++) {
      int64_t q = row / (G * S), rem = row % (G * S), st = rem / G, src = st * N + q * G + rem % G;
      memcpy(out + (size_t)(row * K) * es, in + (size_t)(src * K) * es, (size_t)K * es);
    }
    break;
  }
  case OP_F8_SCALE:
  case OP_F8_PACK: {
    int64_t R = a->dims[0].size, K = a->dims[1].size;
    CHECK(a->dtype == DT_F32, "f8 quantization of %s values", dtype_name(a->dtype));
    for (int64_t r = 0; r < R; r++) {
      const float *row = (const float *)in + r * K;
      if (s->op == OP_F8_SCALE) {
        double amax = 0;
        for (int64_t k = 0; k < K; k++)
          amax = fmax(amax, fabs((double)row[k]));
        ((float *)out)[r] = ffn_f8_scale(amax, (int)s->ival[0]);
      } else {
        for (int64_t k = 0; k < K; k++)
          out[r * K + k] = (unsigned char)ffn_f8_code(row[k], ((const float *)h->data[s->args[1]])[r], (int)s->ival[0]);
      }
    }
    break;
  }
  default:
    CHECK(0, "no host version of load-time %s", op_info[s->op].name);
  }
}

/* Runs every load-time step; weights come from the checkpoint (codes as bytes, f32 values). */
static Host run_prep(const Plan *p, const TensorSet *w) {
  Host h = {p, w, calloc((size_t)p->ntensors, sizeof(unsigned char *))};
  for (int t = 0; t < p->ntensors; t++) {
    const PlanTensor *pt = &p->tensors[t];
    if (pt->kind != PT_WEIGHT)
      continue;
    const RawTensor *r = find(w, pt->name);
    CHECK(r && r->nbytes == dtype_bytes(pt->dtype, (size_t)plan_numel(p, t, NULL)), "weight %s as bound", pt->name);
    if (r) {
      h.data[t] = malloc(r->nbytes + 1);
      memcpy(h.data[t], r->data, r->nbytes);
    }
  }
  for (int i = 0; i < p->nprep; i++)
    host_step(&h, &p->prep[i]);
  return h;
}

static void host_free(Host *h) {
  for (int t = 0; t < h->p->ntensors; t++)
    free(h->data[t]);
  free(h->data);
}

/* ---- what B of each fp8 product must be ---- */

/* The fp8 GEMM launches in order: B's codes and scales (KArgs slots 1 and 3, codegen). */
static int fp8_gemms(const Plan *p, int *codes, int *scales, int max) {
  int n = 0;
  for (int i = 0; i < p->nsteps && n < max; i++) {
    const PlanStep *s = &p->steps[i];
    if (s->kind == STEP_LAUNCH && p->kernels[s->kernel].kind == KK_GEMM && p->tensors[s->args[1]].dtype == DT_U8)
      codes[n] = s->args[1], scales[n++] = s->args[3];
  }
  return n;
}

/* A stored row: codes row `row` of weight `name`, columns [col, col + K), and its scale. */
typedef struct {
  const char *name; /* NULL: quantized from the values of f32 weight `value` */
  const char *value;
  int64_t row, col;
} Want;

static float stored_scale(const TensorSet *w, const char *weight, const char *scale, int64_t row) {
  (void)weight;
  const RawTensor *s = find(w, scale);
  return ((const float *)s->data)[s->rank == 0 ? 0 : row];
}

/* B's row o of a gate/up pair interleaved in groups of FFN_GATEUP_GROUP: stream and row. */
static void gateup_row(int64_t o, int64_t N, int64_t *stream, int64_t *row) {
  int64_t G = FFN_GATEUP_GROUP, q = o / (2 * G), rem = o % (2 * G);
  *stream = rem / G, *row = q * G + rem % G;
  (void)N;
}

static void check_b(const char *what, const Host *h, int codes, int scales, const Plan *p,
                    void (*want)(int64_t o, Want *w, const char **scale_name), int e5m2) {
  int64_t R = p->tensors[codes].dims[0].size, K = p->tensors[codes].dims[1].size;
  CHECK(p->tensors[scales].dims[0].size == R, "%s: %lld scales for %lld rows", what,
        (long long)p->tensors[scales].dims[0].size, (long long)R);
  int64_t bad = 0;
  for (int64_t o = 0; o < R; o++) {
    Want w = {0};
    const char *scale_name = NULL;
    want(o, &w, &scale_name);
    const unsigned char *got = h->data[codes] + o * K;
    float got_s = ((const float *)h->data[scales])[o], want_s;
    unsigned char want_q[4096];
    if (w.name) {
      const RawTensor *c = find(h->w, w.name);
      int64_t C = c->shape[1];
      memcpy(want_q, (const unsigned char *)c->data + w.row * C + w.col, (size_t)K);
      want_s = stored_scale(h->w, w.name, scale_name, w.row);
    } else {
      const RawTensor *v = find(h->w, w.value);
      const float *row = (const float *)v->data + w.row * K;
      double amax = 0;
      for (int64_t k = 0; k < K; k++)
        amax = fmax(amax, fabs((double)row[k]));
      want_s = ffn_f8_scale(amax, e5m2);
      for (int64_t k = 0; k < K; k++)
        want_q[k] = (unsigned char)ffn_f8_code(row[k], want_s, e5m2);
    }
    if (got_s != want_s || memcmp(got, want_q, (size_t)K) != 0) {
      if (bad++ < 3)
        CHECK(0, "%s: B row %lld: scale %g, want %g (%s row %lld from column %lld)%s", what, (long long)o, got_s,
              want_s, w.name ? w.name : w.value, (long long)w.row, (long long)w.col,
              memcmp(got, want_q, (size_t)K) ? "; codes differ" : "");
    }
  }
  CHECK(bad == 0, "%s: %lld of %lld rows of B are not the rows the reference reads", what, (long long)bad, (long long)R);
}

/* f8_prequant_moves_e4m3_f32.ffn: F = 256 gate/up rows per stream, D = 128 */
static void moves_gateup0(int64_t o, Want *w, const char **s) { /* chunk(wgu^T, 2): wgu rows stream*F + n */
  int64_t st, n;
  gateup_row(o, 256, &st, &n);
  *w = (Want){"l0.gate_up", NULL, st * 256 + n, 0}, *s = "l0.gate_up.per_tensor_scale";
}
static void moves_down0(int64_t o, Want *w, const char **s) { /* chunk(wd2, 2) along K, merged: wd2 row n, half st */
  int64_t st, n;
  gateup_row(o, 128, &st, &n);
  *w = (Want){"l0.down", NULL, n, st * 256}, *s = "l0.down_scale";
}
static void moves_gateup1(int64_t o, Want *w, const char **s) { /* stored gate, f32 up quantized */
  int64_t st, n;
  gateup_row(o, 256, &st, &n);
  *w = st ? (Want){NULL, "l1.up", n, 0} : (Want){"l1.gate", NULL, n, 0}, *s = "l1.gate.per_tensor_scale";
}
static void moves_down1(int64_t o, Want *w, const char **s) {
  *w = (Want){"l1.down", NULL, o, 0}, *s = "l1.down_scale";
}
/* f8_prequant_llama_e4m3_bf16.ffn (layer i) */
static int llama_layer;
static char llama_names[4][64];
static void llama_gateup(int64_t o, Want *w, const char **s) {
  int64_t st, n;
  gateup_row(o, 704, &st, &n);
  snprintf(llama_names[0], 64, "l%d.%s", llama_layer, st ? "up" : "gate");
  snprintf(llama_names[1], 64, "l%d.%s_scale", llama_layer, st ? "up" : "gate");
  *w = (Want){llama_names[0], NULL, n, 0}, *s = llama_names[1];
}
static void llama_down(int64_t o, Want *w, const char **s) {
  snprintf(llama_names[0], 64, "l%d.down", llama_layer);
  snprintf(llama_names[1], 64, "l%d.down_scale", llama_layer);
  *w = (Want){llama_names[0], NULL, o, 0}, *s = llama_names[1];
}

/* A per-tensor checkpoint where requantizing would differ: some row's largest code is below max. */
static bool below_max_somewhere(const TensorSet *w, const char *name) {
  const RawTensor *c = find(w, name);
  int64_t R = c->shape[0], C = c->shape[1];
  for (int64_t r = 0; r < R; r++) {
    double amax = 0;
    for (int64_t k = 0; k < C; k++)
      amax = fmax(amax, fabs(dtype_load(c->dtype, c->data, (size_t)(r * C + k))));
    if (amax < 448)
      return true;
  }
  return false;
}

static void check_moves(void) {
  Graph *g = NULL;
  Plan *p = compile("tests/gpu/models/f8_prequant_moves_e4m3_f32.ffn", &g);
  CHECK(count_prep(p, OP_F8_DEQUANT) == 0, "moves: %d f8_dequant steps", count_prep(p, OP_F8_DEQUANT));
  CHECK(count_prep(p, OP_F8_PACK) == 1, "moves: %d f8_pack steps, expected 1 (the f32 up weight)",
        count_prep(p, OP_F8_PACK));
  TensorSet w = {0};
  make_weights(g, 12345, &w);
  CHECK(below_max_somewhere(&w, "l0.gate_up") && below_max_somewhere(&w, "l1.gate"),
        "per-tensor checkpoints whose rows all reach the max test nothing");
  Host h = run_prep(p, &w);
  int codes[8], scales[8];
  int n = fp8_gemms(p, codes, scales, 8);
  CHECK(n == 4, "moves: %d fp8 products", n);
  void (*want[4])(int64_t, Want *, const char **) = {moves_gateup0, moves_down0, moves_gateup1, moves_down1};
  const char *what[4] = {"gate/up from chunk(wgu^T)", "down sliced along K", "stored gate + f32 up", "down"};
  for (int i = 0; i < n && i < 4; i++)
    check_b(what[i], &h, codes[i], scales[i], p, want[i], 0);
  host_free(&h);
  set_free(&w);
  graph_destroy(g);
  plan_destroy(p);
}

static void check_llama(void) {
  Graph *g = NULL;
  Plan *p = compile("tests/gpu/models/f8_prequant_llama_e4m3_bf16.ffn", &g);
  CHECK(count_prep(p, OP_F8_PACK) == 0 && count_prep(p, OP_F8_SCALE) == 0 && count_prep(p, OP_F8_DEQUANT) == 0,
        "llama: the stored codes are quantized or dequantized again (%d f8_pack, %d f8_dequant)",
        count_prep(p, OP_F8_PACK), count_prep(p, OP_F8_DEQUANT));
  CHECK(count_prep(p, OP_F8_SCALES) == 6, "llama: %d f8_scales, expected one per weight", count_prep(p, OP_F8_SCALES));
  for (int t = 0; t < p->ntensors; t++)
    if (p->tensors[t].kind == PT_WEIGHT && strstr(p->tensors[t].name, "norm") == NULL)
      CHECK(p->tensors[t].dtype == DT_U8 && p->tensors[t].stored == DT_F8E4M3 && p->tensors[t].scale,
            "llama: weight %s: %s, stored %s", p->tensors[t].name, dtype_name(p->tensors[t].dtype),
            dtype_name(p->tensors[t].stored));
  TensorSet w = {0};
  make_weights(g, 777, &w);
  Host h = run_prep(p, &w);
  int codes[8], scales[8];
  int n = fp8_gemms(p, codes, scales, 8);
  CHECK(n == 4, "llama: %d fp8 products", n);
  for (int i = 0; i < n && i < 4; i++) {
    llama_layer = i / 2;
    check_b(i % 2 ? "down" : "gate/up", &h, codes[i], scales[i], p, i % 2 ? llama_down : llama_gateup, 0);
  }
  /* the JSON form keeps what the runtime binds */
  char *json = plan_to_json(p), err[256];
  Plan *back = plan_from_json(json, err, sizeof err);
  CHECK(back, "llama: plan JSON: %s", err);
  for (int t = 0; back && t < p->ntensors; t++)
    CHECK(back->tensors[t].stored == p->tensors[t].stored && back->tensors[t].dtype == p->tensors[t].dtype &&
              (!p->tensors[t].scale || strcmp(back->tensors[t].scale, p->tensors[t].scale) == 0),
          "llama: tensor %d changed through JSON", t);
  free(json);
  plan_destroy(back);
  host_free(&h);
  set_free(&w);
  graph_destroy(g);
  plan_destroy(p);
}

static void check_dequant(void) {
  Graph *g = NULL;
  Plan *p = compile("tests/gpu/models/prequant_llama_bf16.ffn", &g);
  CHECK(count_prep(p, OP_F8_DEQUANT) == 6 && count_prep(p, OP_F8_PACK) == 0,
        "bf16 without an fp8 policy: %d f8_dequant (want 6: every weight read as its value), %d f8_pack",
        count_prep(p, OP_F8_DEQUANT), count_prep(p, OP_F8_PACK));
  for (int i = 0; i < p->nprep; i++)
    if (p->prep[i].op == OP_F8_DEQUANT)
      CHECK(p->tensors[p->prep[i].args[0]].kind == PT_WEIGHT && p->tensors[p->prep[i].out].dtype == DT_F32,
            "f8_dequant of a weight's codes into f32");
  graph_destroy(g);
  plan_destroy(p);
}

int main(void) {
  check_moves();
  check_llama();
  check_dequant();
  return check_result("prequant_plan_test");
}
