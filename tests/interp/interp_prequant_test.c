/* interp_prequant_test.c: pre-quantized fp8 weights on the reference (interp.c's contract).
 *
 *  - under `precision matmul f8e4m3` the product uses the stored codes and scales: equal,
 *    bit for bit, to sa[r] * s[n] * sum_k qa[r,k] * q[n,k] computed here independently, and
 *    different from re-quantizing the dequantized weight (the codes here do not reach 448);
 *  - per-tensor scales ([] and [1]) and bf16/f16 scales read as the same values;
 *  - without a policy the weight is code * scale in f32 (f32 activations) or that rounded
 *    to bf16 (bf16 activations: the dequantizing cast);
 *  - the gate/up merge, interleaving and the rest of the -O3 passes up to (not including)
 *    the GPU's precision checks leave the stored-codes products bit for bit as they were;
 *  - prequant_read's checks on in-memory tensors (the CLI tests cover files). */
#include "interp/util.h"
#include "ir/prequant.h"
#include "frontend/frontend.h"
#include "passes/passes.h"

enum { T = 3, N = 6, K = 16 };

typedef struct {
  const char *name[8];
  RawTensor t[8];
  int n;
} Set;

static int set_lookup_(void *ctx, const char *name, RawTensor *out) {
  Set *s = ctx;
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->name[i], name) == 0) {
      *out = s->t[i];
      return 0;
    }
  return -1;
}

static void add(Set *s, const char *name, DType dt, int rank, const int64_t *shape, const void *data, size_t nbytes) {
  s->name[s->n] = name;
  s->t[s->n] = (RawTensor){.dtype = dt, .rank = rank, .data = data, .nbytes = nbytes};
  memcpy(s->t[s->n].shape, shape, sizeof(int64_t) * (size_t)rank);
  s->n++;
}

static Graph *compile(const char *text) {
  Diags d;
  diags_init(&d);
  Graph *g = frontend_compile_string(text, strlen(text), "t.ffn", NULL, &d);
  if (!g)
    die("compile failed: %s", d.text ? d.text : "?");
  diags_free(&d);
  return g;
}

static int run_ref(const Graph *g, Set *w, Set *in, RefTensor *out, char *err, size_t errlen) {
  InterpSources src = {set_lookup_, w, set_lookup_, in};
  return interp_run(g, &src, out, err, errlen);
}

/* codes with |q| <= 240 (not the 448 a max-based scale would give), scales per row */
static uint8_t q[N * K];
static float s[N];
static float x[T * K];

static void make_data(void) {
  for (int n = 0; n < N; n++) {
    s[n] = (float)(0.001 * (n + 1) + 0.0003);
    for (int k = 0; k < K; k++)
      q[n * K + k] = f32_to_f8e4m3_bits((float)((n * 7 + k * 13) % 31 - 15) * 16.0f / (float)(1 + k % 3));
  }
  for (int i = 0; i < T * K; i++)
    x[i] = (float)sin(0.7 * i + 0.3) * 2.0f;
}

/* sa[r] * s[n] * sum_k qa[r,k] * q[n,k], written out from the contract */
static double expected_fp8(int r, int n, double sn) {
  double amax = 0;
  for (int k = 0; k < K; k++)
    amax = fmax(amax, fabs(x[r * K + k]));
  float sa = amax > 0 ? (float)(amax / 448.0) : 1.0f;
  double acc = 0;
  for (int k = 0; k < K; k++) {
    double qa = round_to_dtype(x[r * K + k] / (double)sa, DT_F8E4M3);
    acc += qa * f8e4m3_bits_to_f32(q[n * K + k]);
  }
  return (float)((double)sa * sn * acc);
}

static const char *model_fp8 =
    "model m\ndim T\ninput x : [T, 16] f32\nprecision matmul f8e4m3\n"
    "weight w : [6, 16] f8e4m3 scale = \"w\"\ny = x @ w^T\noutput y\n";

static void test_stored_codes(void) {
  Graph *g = compile(model_fp8);
  int64_t xs[2] = {T, K}, ws[2] = {N, K}, ss[2] = {N, 1}, one[1] = {1};
  Set w = {0}, in = {0};
  add(&in, "x", DT_F32, 2, xs, x, sizeof x);
  add(&w, "w", DT_F8E4M3, 2, ws, q, sizeof q);
  add(&w, "w_scale", DT_F32, 2, ss, s, sizeof s);
  RefTensor out[1];
  char err[512];
  CHECK(run_ref(g, &w, &in, out, err, sizeof err) == 0, "%s", err);
  int differs = 0;
  for (int r = 0; r < T; r++)
    for (int n = 0; n < N; n++) {
      double want = expected_fp8(r, n, s[n]);
      CHECK(out[0].data[r * N + n] == (float)want, "y[%d,%d] = %.9g, expected %.9g", r, n, out[0].data[r * N + n], want);
      /* re-quantizing would have scaled the row to 448 */
      double amax = 0;
      for (int k = 0; k < K; k++)
        amax = fmax(amax, fabs(f8e4m3_bits_to_f32(q[n * K + k]) * s[n]));
      differs += out[0].data[r * N + n] != 0 && fabs(amax / 448.0 - s[n]) > 1e-9 * s[n];
    }
  CHECK(differs > 0, "the test data does not tell stored codes from re-quantized ones");
  ref_free(&out[0]);

  /* one scale for the tensor: [] and [1], and as bf16 and f16 (exact for this value) */
  float s0 = 0.0078125f;
  uint16_t s0_bf16 = f32_to_bf16_bits(s0), s0_f16 = f32_to_f16_bits(s0);
  struct {
    DType dt;
    int rank;
    const void *data;
    size_t nbytes;
  } per_tensor[] = {{DT_F32, 0, &s0, 4}, {DT_F32, 1, &s0, 4}, {DT_BF16, 1, &s0_bf16, 2}, {DT_F16, 0, &s0_f16, 2}};
  for (size_t i = 0; i < sizeof per_tensor / sizeof per_tensor[0]; i++) {
    w.t[1] = (RawTensor){.dtype = per_tensor[i].dt, .rank = per_tensor[i].rank, .data = per_tensor[i].data,
                         .nbytes = per_tensor[i].nbytes};
    memcpy(w.t[1].shape, one, sizeof one);
    CHECK(run_ref(g, &w, &in, out, err, sizeof err) == 0, "per tensor %zu: %s", i, err);
    for (int r = 0; r < T; r++)
      for (int n = 0; n < N; n++)
        CHECK(out[0].data[r * N + n] == (float)expected_fp8(r, n, s0), "per tensor %zu: y[%d,%d]", i, r, n);
    ref_free(&out[0]);
  }
  graph_destroy(g);
}

static void test_dequantized(void) {
  for (int bf16 = 0; bf16 < 2; bf16++) {
    char text[512];
    snprintf(text, sizeof text, "model m\ndim T\nconst j = 3\ninput x : [T, 16] %s\nweight w : [6, 16] f8e4m3 scale \"s.{j}\" = "
             "\"w\"\ny = x @ w^T\noutput y\n", bf16 ? "bf16" : "f32");
    Graph *g = compile(text);
    int64_t xs[2] = {T, K}, ws[2] = {N, K}, ss[1] = {N};
    uint16_t xb[T * K];
    for (int i = 0; i < T * K; i++)
      xb[i] = f32_to_bf16_bits(x[i]);
    Set w = {0}, in = {0};
    add(&in, "x", bf16 ? DT_BF16 : DT_F32, 2, xs, bf16 ? (const void *)xb : (const void *)x, bf16 ? sizeof xb : sizeof x);
    add(&w, "w", DT_F8E4M3, 2, ws, q, sizeof q);
    add(&w, "s.3", DT_F32, 1, ss, s, sizeof s);
    RefTensor out[1];
    char err[512];
    CHECK(run_ref(g, &w, &in, out, err, sizeof err) == 0, "%s", err);
    for (int r = 0; r < T; r++)
      for (int n = 0; n < N; n++) {
        double acc = 0;
        for (int k = 0; k < K; k++) {
          float v = f8e4m3_bits_to_f32(q[n * K + k]) * s[n]; /* the value: code * scale in f32 */
          double xv = bf16 ? bf16_bits_to_f32(xb[r * K + k]) : x[r * K + k];
          acc += xv * (bf16 ? round_to_dtype(v, DT_BF16) : v);
        }
        double want = round_to_dtype(acc, bf16 ? DT_BF16 : DT_F32);
        CHECK(out[0].data[r * N + n] == (float)want, "%s: y[%d,%d] = %.9g, expected %.9g", bf16 ? "bf16" : "f32", r, n,
              out[0].data[r * N + n], want);
      }
    ref_free(&out[0]);
    graph_destroy(g);
  }
}

/* A gated FFN under fp8: the -O3 passes (gate/up merged into one product over concatenated,
 * interleaved stored rows) give the same bits as the front end's graph. */
static void test_passes_keep_codes(void) {
  const char *text =
      "model m\ndim T\ninput x : [T, 16] f32\nprecision matmul f8e4m3\n"
      "weight wg : [32, 16] f8e4m3 scale = \"wg\"\nweight wu : [32, 16] f8e4m3 scale = \"wu\"\n"
      "weight wd : [16, 32] f8e4m3 scale = \"wd\"\nweight g : [16] f32 = \"g\"\n"
      "h = rmsnorm(x, g)\ny = x + (silu(h @ wg^T) * (h @ wu^T)) @ wd^T\noutput y\n";
  Graph *g0 = compile(text), *g1 = compile(text);
  Compile c = {.g = g1, .diags = NULL, .arch = 90, .opt_level = 3};
  Diags d;
  diags_init(&d);
  c.diags = &d;
  CHECK(pass_ffn_fusion(&c) == 0 && pass_canon(&c) == 0 && pass_normfold(&c) == 0 && pass_gateup(&c) == 0 &&
            pass_fuse(&c) == 0 && !c.broken,
        "passes: %s", d.text ? d.text : "?");
  bool merged = false;
  for (int i = 0; i < g1->nodes.len; i++)
    merged |= !GRAPH_NODE(g1, i)->dead && GRAPH_NODE(g1, i)->op == OP_CONCAT;
  CHECK(merged, "the gate and up projections were not merged");
  static uint8_t codes[3][32 * 16];
  static float scales[3][32], gain[16];
  for (int m = 0; m < 3; m++)
    for (int i = 0; i < 32 * 16; i++)
      codes[m][i] = f32_to_f8e4m3_bits((float)((i * (m + 3)) % 29 - 14) * (m + 1) * 4.0f);
  for (int m = 0; m < 3; m++)
    for (int i = 0; i < 32; i++)
      scales[m][i] = (float)(0.002 + 0.0001 * i * (m + 1));
  for (int i = 0; i < 16; i++)
    gain[i] = 1.0f + 0.05f * (float)i;
  int64_t up[2] = {32, 16}, down[2] = {16, 32}, su[1] = {32}, sd[1] = {16}, gs[1] = {16}, xs[2] = {T, K};
  Set w = {0}, in = {0};
  add(&w, "wg", DT_F8E4M3, 2, up, codes[0], sizeof codes[0]);
  add(&w, "wg_scale", DT_F32, 1, su, scales[0], sizeof scales[0]);
  add(&w, "wu", DT_F8E4M3, 2, up, codes[1], sizeof codes[1]);
  add(&w, "wu_scale", DT_F32, 1, su, scales[1], sizeof scales[1]);
  add(&w, "wd", DT_F8E4M3, 2, down, codes[2], sizeof codes[2]);
  add(&w, "wd_scale", DT_F32, 1, sd, scales[2], 16 * sizeof(float));
  add(&w, "g", DT_F32, 1, gs, gain, sizeof gain);
  add(&in, "x", DT_F32, 2, xs, x, sizeof x);
  RefTensor r0[1], r1[1];
  char err[512];
  CHECK(run_ref(g0, &w, &in, r0, err, sizeof err) == 0, "source: %s", err);
  CHECK(run_ref(g1, &w, &in, r1, err, sizeof err) == 0, "optimized: %s", err);
  for (int i = 0; i < T * 16; i++)
    CHECK(r0[0].data[i] == r1[0].data[i], "y[%d]: %.9g before the passes, %.9g after", i, r0[0].data[i], r1[0].data[i]);
  ref_free(&r0[0]);
  ref_free(&r1[0]);
  diags_free(&d);
  graph_destroy(g0);
  graph_destroy(g1);
}

static void expect_error(const Node *w, const RawTensor *codes, const RawTensor *scale, const char *want) {
  PrequantWeight p;
  char err[512] = "";
  int rc = prequant_read(NULL, w, codes, scale, &p, err, sizeof err);
  CHECK(rc == -1 && strcmp(err, want) == 0, "got '%s', expected '%s'", err, want);
  if (rc == 0)
    prequant_free(&p);
}

static void test_checks(void) {
  Graph *g = compile(model_fp8);
  const Node *w = NULL;
  for (int i = 0; i < g->nodes.len; i++)
    if (GRAPH_NODE(g, i)->op == OP_WEIGHT)
      w = GRAPH_NODE(g, i);
  RawTensor codes = {.dtype = DT_F8E4M3, .rank = 2, .shape = {N, K}, .data = q, .nbytes = sizeof q};
  RawTensor scale = {.dtype = DT_F32, .rank = 1, .shape = {N}, .data = s, .nbytes = sizeof s};
  PrequantWeight p;
  char err[512];
  CHECK(prequant_read(g, w, &codes, &scale, &p, err, sizeof err) == 0 && p.rows == N && p.cols == K &&
            !p.per_tensor && p.scale[2] == s[2],
        "%s", err);
  prequant_free(&p);
  expect_error(w, NULL, &scale, "missing weight 'w'");
  expect_error(w, &codes, NULL, "weight 'w': its scale tensor 'w_scale' is missing (an f8e4m3 weight with `scale` needs one)");
  RawTensor c2 = codes;
  c2.nbytes--;
  expect_error(w, &c2, &scale, "weight 'w': [6, 16] f8e4m3 needs 96 bytes, got 95");
  c2 = codes;
  c2.dtype = DT_F8E5M2;
  expect_error(w, &c2, &scale, "weight 'w': expected shape [6, 16] f8e4m3, got [6, 16] f8e5m2");
  RawTensor s2 = scale;
  s2.shape[0] = 16;
  expect_error(w, &codes, &s2, "scale 'w_scale' of weight 'w': shape [16]; expected [6] or [6, 1] (one per output row) "
                               "or [] or [1] (one for the tensor)");
  s2 = scale;
  s2.dtype = DT_I32;
  expect_error(w, &codes, &s2, "scale 'w_scale' of weight 'w': dtype I32; scales are F32, BF16 or F16");
  s2 = scale;
  s2.nbytes = 20;
  expect_error(w, &codes, &s2, "scale 'w_scale' of weight 'w': [6] f32 needs 24 bytes, got 20");
  float bad[4][N];
  const char *why[4] = {"(nan) is NaN", "(inf) is infinite", "(0) is zero", "(-0.5) is negative"};
  float val[4] = {NAN, INFINITY, 0.0f, -0.5f};
  for (int b = 0; b < 4; b++) {
    memcpy(bad[b], s, sizeof s);
    bad[b][4] = val[b];
    s2 = scale;
    s2.data = bad[b];
    char want[256];
    snprintf(want, sizeof want, "scale 'w_scale' of weight 'w': element 4 %s; scales must be positive finite numbers",
             why[b]);
    expect_error(w, &codes, &s2, want);
  }
  float tiny = 1e-35f;
  s2 = (RawTensor){.dtype = DT_F32, .rank = 0, .data = &tiny, .nbytes = 4};
  expect_error(w, &codes, &s2, "scale 'w_scale' of weight 'w': element 0 (1e-35) is outside 2^-110 .. 2^110; scales "
                               "must be positive finite numbers");
  graph_destroy(g);
}

int main(void) {
  make_data();
  test_stored_codes();
  test_dequantized();
  test_passes_keep_codes();
  test_checks();
  return check_result("interp_prequant_test");
}
