/* analyze_precision.c: `ffnc analyze`, first part: what the program's precision choices cost.
 *
 * The program as compiled (its storage types, its `precision matmul` / `precision weights`
 * policy, its requested FFN Fusion) runs on the calibration input, on the GPU's kernels or
 * the CPU reference; the reference is the same program with every computed value in f32
 * and no quantization (the weights and inputs as stored, cast to f32), computed by the CPU
 * reference in f64 arithmetic or, on the GPU, in f32. Each output's relative L2, largest
 * absolute difference and cosine are reported. A policy the GPU code generator refuses (fp8
 * today) is measured on the CPU reference instead, and the report says so.
 */
#include "analyze.h"
#include "codegen/driver.h"
#include "runtime/dlpack_dtype.h"
#include "runtime/rt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The reference: every computed value f32, leaves cast to f32, no quantization. */
static void widen(Graph *g) {
  g->prec.type[PREC_MATMUL] = g->prec.type[PREC_WEIGHTS] = DT_NONE;
  g->prec.group = 0;
  int n = g->nodes.len;
  for (int i = 0; i < n; i++) {
    Node *v = GRAPH_NODE(g, i);
    if (v->dead || !dtype_is_float(v->dtype) || v->dtype == DT_F32)
      continue;
    if (v->op == OP_INPUT || v->op == OP_WEIGHT) {
      Node *cast = ir_node(g, OP_CAST, DT_F32, v->shape, &v, 1, v->loc);
      ir_replace_uses(g, v, cast);
      ir_set_arg(cast, 0, v);
    } else {
      v->dtype = DT_F32;
    }
  }
  ir_toposort(g);
}

/* outs[i]: output i as floats (malloc'd), n[i] its count. */
static int run_graph_cpu(const Graph *g, const AnalyzeInput *in, float **outs, size_t *n) {
  InterpSources src = {cli_lookup_st, in->wf, cli_lookup_st, in->inf};
  RefTensor *r = calloc((size_t)g->noutputs, sizeof *r);
  char err[512];
  if (!r || interp_run(g, &src, r, err, sizeof err) != 0) {
    cli_error("analyze: %s", r ? err : "out of host memory");
    free(r);
    return EXIT_USER;
  }
  for (int i = 0; i < g->noutputs; i++)
    outs[i] = r[i].data, n[i] = (size_t)ref_numel(&r[i]); /* taken over */
  free(r);
  return 0;
}

static int fail_status(ffn_status s) { return cli_fail("analyze", NULL, s); }

/* The program's inputs from the calibration file, as host DLTensors. */
static int gpu_inputs(const ffn_program *p, const AnalyzeInput *in, DLTensor *dl) {
  const Plan *plan = p->plan;
  for (int t = 0; t < plan->ntensors; t++) {
    const PlanTensor *pt = &plan->tensors[t];
    if (pt->kind != PT_INPUT)
      continue;
    const StTensor *st = st_find(in->inf, pt->name);
    DLDataType type;
    if (!st || st->dtype != pt->dtype || !dtype_to_dl(st->dtype, &type))
      return cli_error("analyze: %s: needs the input '%s' as %s", st_label(in->inf), pt->name, dtype_name(pt->dtype)),
             EXIT_USER;
    dl[pt->index] = (DLTensor){(void *)st->data, {kDLCPU, 0}, st->rank, type, (int64_t *)st->shape, NULL, 0};
  }
  return 0;
}

static int run_program_gpu(ffn_program *p, const AnalyzeInput *in, float **outs, size_t *n) {
  const Plan *plan = p->plan;
  DLTensor dl_in[64] = {0}, dl_out[64] = {0};
  int64_t shapes[64][FFN_MAX_RANK];
  void *bufs[64] = {0};
  ffn_model *m = NULL;
  ffn_status s = FFN_OK;
  int rc = plan->ninputs > 64 || plan->noutputs > 64 ? (cli_error("analyze: too many inputs or outputs"), EXIT_USER)
                                                     : gpu_inputs(p, in, dl_in);
  if (rc == 0 && ((s = ffn_model_create(p, 0, &m)) != FFN_OK || (s = ffn_model_bind_weights_file(m, in->wpath)) ||
                  (s = ffn_model_prepare(m))))
    rc = fail_status(s);
  for (int t = 0; rc == 0 && t < plan->ntensors; t++) {
    const PlanTensor *pt = &plan->tensors[t];
    int i = pt->index, nd;
    DLDataType type;
    if (pt->kind != PT_OUTPUT || !dtype_to_dl(pt->dtype, &type))
      continue;
    if ((s = ffn_model_output_shape(m, i, dl_in, plan->ninputs, shapes[i], &nd)) != FFN_OK) {
      rc = fail_status(s);
      break;
    }
    n[i] = 1;
    for (int d = 0; d < nd; d++)
      n[i] *= (size_t)shapes[i][d];
    bufs[i] = malloc(dtype_bytes(pt->dtype, n[i]) + 16);
    dl_out[i] = (DLTensor){bufs[i], {kDLCPU, 0}, nd, type, shapes[i], NULL, 0};
  }
  if (rc == 0 && (s = ffn_model_run_host(m, dl_in, plan->ninputs, dl_out, plan->noutputs)) != FFN_OK)
    rc = fail_status(s);
  for (int t = 0; t < plan->ntensors; t++) {
    const PlanTensor *pt = &plan->tensors[t];
    int i = pt->index;
    if (pt->kind != PT_OUTPUT || !bufs[i])
      continue;
    if (rc == 0 && (outs[i] = malloc(sizeof(float) * (n[i] ? n[i] : 1))))
      for (size_t k = 0; k < n[i]; k++)
        outs[i][k] = (float)dtype_load(pt->dtype, bufs[i], k);
    free(bufs[i]);
  }
  ffn_model_destroy(m);
  return rc;
}

static int compile_graph(Graph *g, const AnalyzeInput *in, ffn_program **out) {
  Diags d;
  diags_init(&d);
  DriverOptions o = {.sm = cu_default_arch(), .opt_level = 3};
  SourceFile src = {in->file, in->text, in->len};
  Plan *plan;
  int rc = driver_compile_graph(g, &src, &o, &d, &plan);
  if (rc != 0)
    fputs(d.text ? d.text : "analyze: compilation failed\n", stderr);
  diags_free(&d);
  if (rc != 0)
    return EXIT_USER;
  ffn_status s = program_from_plan(plan, NULL, out);
  return s == FFN_OK ? 0 : fail_status(s);
}

/* The program's own outputs: the GPU's kernels where the code generator takes the policy. */
static int run_program(const AnalyzeInput *in, bool *gpu, float **outs, size_t *n) {
  if (*gpu) {
    ffn_program *p = NULL;
    ffn_status s = ffn_program_compile(in->text, in->len, in->file, NULL, &p);
    if (s == FFN_OK) {
      int rc = run_program_gpu(p, in, outs, n);
      ffn_program_destroy(p);
      return rc;
    }
    if (s != FFN_ERR_SOURCE)
      return fail_status(s);
    printf("note: the GPU code generator refuses this program's precision policy; it is measured on the CPU "
           "reference, which follows the same quantization rules\n");
    *gpu = false;
  }
  Diags d;
  diags_init(&d);
  DriverOptions o = {.opt_level = 3};
  Graph *g = driver_model_graph(in->text, in->len, in->file, &o, &d);
  if (d.len)
    fputs(d.text, stderr);
  diags_free(&d);
  if (!g)
    return EXIT_USER;
  int rc = run_graph_cpu(g, in, outs, n);
  graph_destroy(g);
  return rc;
}

static int run_reference(const AnalyzeInput *in, bool gpu, float **outs, size_t *n) {
  Diags d;
  diags_init(&d);
  DriverOptions o = {.opt_level = 3};
  Graph *g = driver_model_graph(in->text, in->len, in->file, &o, &d);
  diags_free(&d);
  if (!g)
    return EXIT_USER;
  widen(g);
  int rc;
  if (gpu) {
    ffn_program *p = NULL;
    rc = compile_graph(g, in, &p);
    if (rc == 0)
      rc = run_program_gpu(p, in, outs, n);
    ffn_program_destroy(p);
  } else {
    rc = run_graph_cpu(g, in, outs, n);
  }
  graph_destroy(g);
  return rc;
}

static PrecisionError compare(const char *name, const float *x, const float *ref, size_t n) {
  double num = 0, den = 0, xr = 0, xx = 0, maxabs = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)x[i] - ref[i];
    num += d * d, den += (double)ref[i] * ref[i], xr += (double)x[i] * ref[i], xx += (double)x[i] * x[i];
    maxabs = d != d ? INFINITY : fmax(maxabs, fabs(d)); /* NaN where the reference has none */
  }
  PrecisionError e = {.rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num), .max_abs = maxabs,
                      .cosine = den > 0 && xx > 0 ? xr / sqrt(den * xx) : 1.0};
  snprintf(e.name, sizeof e.name, "%s", name);
  return e;
}

int analyze_precision(const AnalyzeInput *in, bool gpu, PrecisionError *err, int *nerr, char *how, size_t howlen) {
  float *prog[64] = {0}, *ref[64] = {0};
  size_t np[64] = {0}, nr[64] = {0};
  Diags d;
  diags_init(&d);
  DriverOptions o = {.opt_level = 3};
  Graph *g = driver_model_graph(in->text, in->len, in->file, &o, &d);
  diags_free(&d);
  if (!g || g->noutputs > 64)
    return graph_destroy(g), cli_error("analyze: %s: cannot analyze this program", in->file), EXIT_USER;
  bool on_gpu = gpu;
  int rc = run_program(in, &on_gpu, prog, np);
  if (rc == 0)
    rc = run_reference(in, gpu, ref, nr);
  *nerr = 0;
  for (int i = 0; rc == 0 && i < g->noutputs; i++)
    if (np[i] == nr[i] && prog[i] && ref[i])
      err[(*nerr)++] = compare(g->outputs[i].name, prog[i], ref[i], np[i]);
  snprintf(how, howlen, "the program as written (%s) against the same program in f32 without quantization (%s)",
           on_gpu ? "the GPU's kernels" : "the CPU reference",
           gpu ? "the GPU's f32 kernels" : "the CPU reference, f64 arithmetic");
  for (int i = 0; i < 64; i++)
    free(prog[i]), free(ref[i]);
  graph_destroy(g);
  return rc;
}
