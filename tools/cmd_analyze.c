/* cmd_analyze.c: `ffnc analyze`: what FFN Fusion would cost, measured on calibration data
 * (after the precision report of analyze_precision.c).
 *
 * The model must be one chain of residual FFN sublayers from its input to its outputs (an
 * FFN stack, as the examples are). Each sublayer j becomes a program of its own, P_j: x ->
 * x + FFN_j(x) (compiled kernels on the GPU, the reference interpreter on the CPU), and the
 * host chains them:
 *   - the base run: x_0 = the calibration input, x_{j+1} = P_j(x_j); h_j = x_{j+1} - x_j;
 *   - with sublayer i removed (FFN Fusion paper, arXiv 2503.18908): the same chain skipping
 *     P_i; h_j^{-i} is sublayer j's contribution there, and M[i, j] = 1 - cos(h_j, h_j^{-i})
 *     for i < j. All removal variants advance together, stacked along the rows, so the whole
 *     matrix costs one call per sublayer;
 *   - a fused run A..B is y = x_A + sum (P_k(x_A) - x_A), dsl.md's definition (which the
 *     fused kernels compute, ffn_fusion_test), followed by the rest of the chain; its error
 *     is the relative L2 and cosine of the final output against the base run.
 * Candidates are the run of each length with the lowest M_max; a greedy selection takes the
 * longest, least dependent runs whose combined error stays under --max-error.
 */
#include "analyze.h"
#include "codegen/driver.h"
#include "runtime/dlpack_dtype.h"
#include "runtime/rt.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


typedef struct {
  Graph *g;      /* x -> x + FFN_j(x), the model graph (what the CPU reference runs) */
  ffn_model *m;  /* the same, compiled (GPU) */
  ffn_program *prog;
  int launches;  /* kernel launches of one call */
} Part;

typedef struct {
  int first, last;
  double m_max, m_sum, rel_l2, cosine;
  int saved; /* kernel launches saved per call */
} Run;

typedef struct {
  const char *file;
  char *text;
  size_t len;
  StFile *wf, *inf;
  const char *wpath;
  bool gpu, progress;
  const char *no_fusion; /* why the fusion analysis cannot run, or NULL */
  PrecisionError prec[64];
  int nprec;
  char prec_how[256];
  int n;             /* sublayers */
  Part *parts;
  int64_t rows, D;   /* calibration rows, model width */
  DType dt;          /* the input's element type */
  const char *input; /* its name */
  float **base;      /* base[j]: x_j of the base run, j = 0..n */
  double *M;         /* M[i * n + j] */
} An;

/* ---- one sublayer as a program ---- */

static Graph *model_graph(An *a, Diags *d) {
  Graph *g = frontend_compile_string(a->text, a->len, a->file, NULL, d);
  if (g)
    g->nfuse = 0; /* analyze the model as written, unfused */
  return g;
}

/* Why g is not one chain of n >= 2 sublayers from its only input (rank 2) to its outputs, or
 * NULL if it is: the shape the fusion analysis needs. */
static const char *chain_problem(Graph *g, const FfnSublayer *s, int n) {
  Node *in = NULL;
  int inputs = 0;
  for (int i = 0; i < g->nodes.len; i++)
    if (GRAPH_NODE(g, i)->op == OP_INPUT)
      in = GRAPH_NODE(g, i), inputs++;
  if (n < 2)
    return "the model has fewer than two FFN sublayers";
  if (inputs != 1 || s[0].x != in || in->shape.rank != 2)
    return "the first FFN sublayer does not read the model's only input (of rank 2)";
  for (int k = 1; k < n; k++)
    if (s[k].x != s[k - 1].res)
      return "something else is computed between two of its FFN sublayers";
  for (int i = 0; i < g->noutputs; i++)
    if (g->outputs[i].node != s[n - 1].res)
      return "an output is not the last FFN sublayer's value";
  return NULL;
}

/* g keeps only sublayer j, reading the model's input in place of x_j, writing output "y". */
static void cut_sublayer(Graph *g, const FfnSublayer *s, int j) {
  Node *in = s[0].x;
  g->outputs[0] = (Output){"y", s[j].res};
  g->noutputs = 1;
  if (j > 0) {
    Node *x = ir_input(g, in->name, in->shape, in->dtype, in->loc);
    ir_replace_uses(g, s[j].x, x);
    in->dead = true;
  }
  ir_compact(g);
  ir_toposort(g);
}

static int compile_part(An *a, Part *p, Graph *g, Diags *d) {
  DriverOptions o = {.sm = cu_default_arch(), .opt_level = 3};
  SourceFile src = {a->file, a->text, a->len};
  Plan *plan;
  if (driver_compile_graph(g, &src, &o, d, &plan) != 0)
    return -1; /* the GPU code generator refuses it (a precision policy): the caller falls back */
  p->launches = 0;
  for (int i = 0; i < plan->nsteps; i++)
    p->launches += plan->steps[i].kind == STEP_LAUNCH;
  ffn_status st = program_from_plan(plan, NULL, &p->prog);
  if (st == FFN_OK)
    st = ffn_model_create(p->prog, 0, &p->m);
  if (st == FFN_OK)
    st = ffn_model_bind_weights_file(p->m, a->wpath);
  if (st == FFN_OK)
    st = ffn_model_prepare(p->m);
  if (st != FFN_OK) {
    cli_error("analyze: %s", ffn_last_error());
    return cli_status_exit(st);
  }
  return 0;
}

/* The sublayer programs; 0 or an exit status. */
static int build_parts(An *a) {
  Diags d;
  diags_init(&d);
  int rc = 0;
  for (int j = 0; j < a->n && rc == 0; j++) {
    Graph *g = model_graph(a, &d);
    FfnSublayer *s;
    if (!g || ffn_sublayers(g, &s) != a->n) {
      cli_error("analyze: internal error: sublayer %d could not be cut out", j);
      return EXIT_USER;
    }
    cut_sublayer(g, s, j);
    free(s);
    Part *p = &a->parts[j];
    if (a->gpu) {
      if (a->progress)
        fprintf(stderr, "\ranalyze: compiling sublayer %d/%d", j + 1, a->n);
      rc = compile_part(a, p, g, &d);
      graph_destroy(g);
      if (rc == -1) { /* as the precision report does: the reference follows the same rules */
        const char *why = d.text ? d.text : "", *eol = strchr(why, '\n');
        printf("note: the GPU code generator refuses a sublayer (%.*s); the fusion analysis runs on the CPU "
               "reference\n", eol ? (int)(eol - why) : (int)strlen(why), why);
        diags_free(&d);
        for (int k = 0; k < j; k++) {
          ffn_model_destroy(a->parts[k].m);
          ffn_program_destroy(a->parts[k].prog);
          a->parts[k] = (Part){0};
        }
        a->gpu = false;
        return build_parts(a);
      }
    } else {
      p->g = g;
      p->launches = 2; /* not compiled: the two kernels of a sublayer */
    }
  }
  diags_free(&d);
  return rc;
}

/* ---- evaluation ---- */

static int lookup_input(void *ctx, const char *name, RawTensor *out) {
  (void)name; /* the part's one input */
  *out = *(RawTensor *)ctx;
  return 0;
}

static DLDataType dl_of(DType t) {
  DLDataType dl = {kDLFloat, 32, 1};
  dtype_to_dl(t, &dl); /* the model's float input type: always carried */
  return dl;
}

/* y = P_j(x) for rows x rows (f32 on the host; rounded to the model's type on the way in). */
static int part_run(An *a, int j, const float *x, int64_t rows, float *y) {
  size_t n = (size_t)(rows * a->D), bytes = dtype_bytes(a->dt, n);
  void *buf = malloc(bytes + 16), *obuf = malloc(bytes + 16);
  if (!buf || !obuf)
    return free(buf), free(obuf), cli_error("analyze: out of host memory"), EXIT_USER;
  for (size_t i = 0; i < n; i++)
    dtype_store(a->dt, buf, i, x[i]);
  int64_t shape[2] = {rows, a->D};
  int rc = 0;
  if (a->gpu) {
    DLTensor in = {buf, {kDLCPU, 0}, 2, dl_of(a->dt), shape, NULL, 0};
    DLTensor out = {obuf, {kDLCPU, 0}, 2, dl_of(a->dt), shape, NULL, 0};
    ffn_status st = ffn_model_run_host(a->parts[j].m, &in, 1, &out, 1);
    if (st != FFN_OK)
      rc = (cli_error("analyze: sublayer %d: %s", j, ffn_last_error()), cli_status_exit(st));
    for (size_t i = 0; rc == 0 && i < n; i++)
      y[i] = (float)dtype_load(a->dt, obuf, i);
  } else {
    RawTensor raw = {.dtype = a->dt, .rank = 2, .shape = {rows, a->D}, .data = buf, .nbytes = bytes};
    InterpSources src = {cli_lookup_st, a->wf, lookup_input, &raw};
    RefTensor out = {0};
    char err[512];
    if (interp_run(a->parts[j].g, &src, &out, err, sizeof err) != 0)
      rc = (cli_error("analyze: sublayer %d: %s", j, err), EXIT_USER);
    else
      memcpy(y, out.data, sizeof(float) * n);
    ref_free(&out);
  }
  free(buf);
  free(obuf);
  return rc;
}

static double cosine(const float *a0, const float *a1, const float *b0, const float *b1, size_t n) {
  double ab = 0, aa = 0, bb = 0; /* of (a1 - a0) and (b1 - b0) */
  for (size_t i = 0; i < n; i++) {
    double u = (double)a1[i] - a0[i], v = (double)b1[i] - b0[i];
    ab += u * v, aa += u * u, bb += v * v;
  }
  return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

static void progress(An *a, const char *what, int k, int n) {
  if (a->progress)
    fprintf(stderr, "\ranalyze: %s %d/%d   ", what, k, n);
}

static int base_run(An *a) {
  size_t n = (size_t)(a->rows * a->D);
  for (int j = 0; j < a->n; j++) {
    progress(a, "base run, sublayer", j + 1, a->n);
    if (!(a->base[j + 1] = malloc(sizeof(float) * n)))
      return cli_error("analyze: out of host memory"), EXIT_USER;
    int rc = part_run(a, j, a->base[j], a->rows, a->base[j + 1]);
    if (rc)
      return rc;
  }
  return 0;
}

/* M[i, j] for i < j: every removal variant i < j advances through sublayer j in one call. */
static int dependency(An *a) {
  size_t n = (size_t)(a->rows * a->D);
  float *v = malloc(sizeof(float) * n * (size_t)a->n), *y = malloc(sizeof(float) * n * (size_t)a->n);
  if (!v || !y)
    return free(v), free(y), cli_error("analyze: out of host memory"), EXIT_USER;
  int rc = 0;
  for (int j = 1; j < a->n && rc == 0; j++) {
    progress(a, "dependency, sublayer", j + 1, a->n);
    /* variant j-1 (sublayer j-1 removed) reaches sublayer j with the base's x_{j-1} */
    memcpy(v + (size_t)(j - 1) * n, a->base[j - 1], sizeof(float) * n);
    rc = part_run(a, j, v, a->rows * j, y);
    for (int i = 0; rc == 0 && i < j; i++) {
      a->M[i * a->n + j] = 1.0 - cosine(a->base[j], a->base[j + 1], v + i * n, y + i * n, n);
      memcpy(v + i * n, y + i * n, sizeof(float) * n);
    }
  }
  free(v);
  free(y);
  return rc;
}

/* The chain's final output with the runs sel[0..nsel) fused, against the base run. */
static int measure(An *a, const Run *sel, int nsel, double *rel, double *cos) {
  size_t n = (size_t)(a->rows * a->D);
  float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *acc = malloc(sizeof(float) * n);
  int rc = x && y && acc ? 0 : (cli_error("analyze: out of host memory"), EXIT_USER);
  if (rc == 0)
    memcpy(x, a->base[0], sizeof(float) * n);
  for (int j = 0; j < a->n && rc == 0;) {
    const Run *r = NULL;
    for (int k = 0; k < nsel; k++)
      r = sel[k].first == j ? &sel[k] : r;
    if (!r) {
      rc = part_run(a, j, x, a->rows, y);
      memcpy(x, y, sizeof(float) * n);
      j++;
      continue;
    }
    memcpy(acc, x, sizeof(float) * n); /* y = x + sum_k (P_k(x) - x) */
    for (int k = r->first; k < r->last && rc == 0; k++) {
      rc = part_run(a, k, x, a->rows, y);
      for (size_t i = 0; i < n; i++)
        acc[i] += y[i] - x[i];
    }
    for (size_t i = 0; i < n; i++)
      x[i] = (float)round_to_dtype(acc[i], a->dt);
    j = r->last;
  }
  if (rc == 0) {
    const float *b = a->base[a->n];
    double num = 0, den = 0, ab = 0, xx = 0;
    for (size_t i = 0; i < n; i++) {
      double d = (double)x[i] - b[i];
      num += d * d, den += (double)b[i] * b[i], ab += (double)x[i] * b[i], xx += (double)x[i] * x[i];
    }
    *rel = den > 0 ? sqrt(num / den) : sqrt(num);
    *cos = den > 0 && xx > 0 ? ab / sqrt(den * xx) : 1.0;
  }
  free(x);
  free(y);
  free(acc);
  return rc;
}

/* ---- candidates and selection ---- */

static Run run_stats(An *a, int first, int last) {
  Run r = {.first = first, .last = last, .saved = a->parts[first].launches * (last - first - 1)};
  for (int i = first; i < last; i++)
    for (int j = i + 1; j < last; j++) {
      double m = a->M[i * a->n + j];
      r.m_max = fmax(r.m_max, m);
      r.m_sum += m;
    }
  return r;
}

/* The run of each length with the lowest M_max, measured. Returns the count. */
static int candidates(An *a, Run *out, int *rc) {
  int nc = 0;
  for (int len = 2; len <= a->n && *rc == 0; len++) {
    Run best = {.m_max = INFINITY};
    for (int f = 0; f + len <= a->n; f++) {
      Run r = run_stats(a, f, f + len);
      if (r.m_max < best.m_max || (r.m_max == best.m_max && r.m_sum < best.m_sum))
        best = r;
    }
    progress(a, "candidate", len - 1, a->n - 1);
    *rc = measure(a, &best, 1, &best.rel_l2, &best.cosine);
    out[nc++] = best;
  }
  return nc;
}

static int by_length_then_dependency(const void *x, const void *y) {
  const Run *a = x, *b = y;
  int la = a->last - a->first, lb = b->last - b->first;
  if (la != lb)
    return lb - la;
  return a->m_max < b->m_max ? -1 : a->m_max > b->m_max;
}

/* Greedy: the longest, least dependent runs first, each kept if the selection's measured
 * error stays within max_error; at most 4n trials. */
static int select_runs(An *a, double max_error, Run *sel, int *nsel, double *rel, double *cos) {
  int nall = 0, rc = 0;
  Run *all = malloc(sizeof *all * (size_t)(a->n * a->n));
  if (!all)
    return cli_error("analyze: out of host memory"), EXIT_USER;
  for (int f = 0; f < a->n; f++)
    for (int l = f + 2; l <= a->n; l++)
      all[nall++] = run_stats(a, f, l);
  qsort(all, (size_t)nall, sizeof *all, by_length_then_dependency);
  *nsel = 0, *rel = 0, *cos = 1;
  for (int i = 0, trials = 0; i < nall && trials < 4 * a->n && rc == 0; i++) {
    bool disjoint = true;
    for (int k = 0; k < *nsel; k++)
      disjoint &= all[i].last <= sel[k].first || sel[k].last <= all[i].first;
    if (!disjoint)
      continue;
    progress(a, "selection trial", ++trials, 4 * a->n);
    sel[*nsel] = all[i];
    double r, c;
    rc = measure(a, sel, *nsel + 1, &r, &c);
    if (rc == 0 && r <= max_error)
      (*nsel)++, *rel = r, *cos = c;
  }
  free(all);
  for (int i = 1; i < *nsel; i++) /* in program order */
    for (int k = i; k > 0 && sel[k].first < sel[k - 1].first; k--) {
      Run t = sel[k];
      sel[k] = sel[k - 1], sel[k - 1] = t;
    }
  return rc;
}

/* ---- report ---- */

static void print_matrix(const An *a) {
  printf("\nDependency M[i, j] = 1 - cos(h_j, h_j without sublayer i): how much sublayer j's contribution\n"
         "changes when sublayer i is removed (0: independent; fusing i..j costs little).\n     j");
  for (int j = 1; j < a->n; j++)
    printf(" %6d", j);
  printf("\n");
  for (int i = 0; i + 1 < a->n; i++) {
    printf("i %3d", i);
    for (int j = 1; j < a->n; j++)
      if (j <= i)
        printf("       ");
      else
        printf(" %6.4f", a->M[i * a->n + j]);
    printf("\n");
  }
}

static void print_runs(const Run *r, int n) {
  printf("%-10s %9s %9s %10s %10s %15s\n", "run", "M_max", "M_sum", "rel_l2", "cosine", "launches saved");
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "%d..%d", r[i].first, r[i].last);
    printf("%-10s %9.4f %9.4f %10.3g %10.6f %15d\n", name, r[i].m_max, r[i].m_sum, r[i].rel_l2, r[i].cosine,
           r[i].saved);
  }
}

static json_t *runs_json(const Run *r, int n) {
  json_t *arr = json_array();
  for (int i = 0; i < n; i++)
    json_array_append_new(arr, json_pack("{s:i, s:i, s:f, s:f, s:f, s:f, s:i}", "first", r[i].first, "last",
                                         r[i].last, "m_max", r[i].m_max, "m_sum", r[i].m_sum, "rel_l2", r[i].rel_l2,
                                         "cosine", r[i].cosine, "launches_saved", r[i].saved));
  return arr;
}

/* The fusion analysis's numbers into root. */
static void fusion_json(const An *a, json_t *root, const Run *c, int nc, const Run *sel, int nsel, double max_error,
                        double rel, double cos) {
  json_t *m = json_array();
  for (int i = 0; i < a->n; i++) {
    json_t *row = json_array();
    for (int j = 0; j < a->n; j++)
      json_array_append_new(row, j > i ? json_real(a->M[i * a->n + j]) : json_null());
    json_array_append_new(m, row);
  }
  json_object_set_new(root, "sublayers", json_integer(a->n));
  json_object_set_new(root, "rows", json_integer(a->rows));
  json_object_set_new(root, "dependency", m);
  json_object_set_new(root, "candidates", runs_json(c, nc));
  json_object_set_new(root, "selection", json_pack("{s:f, s:o, s:f, s:f}", "max_error", max_error, "runs",
                                                   runs_json(sel, nsel), "rel_l2", rel, "cosine", cos));
}

/* PREFIX.dat (the matrix, gnuplot's matrix format) and PREFIX.gp; PREFIX.png where gnuplot is. */
static int write_plot(const An *a, const char *prefix) {
  char path[4096], cmd[8400];
  snprintf(path, sizeof path, "%s.dat", prefix);
  FILE *f = fopen(path, "w");
  if (!f)
    return cli_error("analyze: cannot write %s: %m", path), -1;
  for (int i = 0; i < a->n; i++)
    for (int j = 0; j < a->n; j++)
      fprintf(f, j + 1 < a->n ? "%.6f " : "%.6f\n", j > i ? a->M[i * a->n + j] : NAN);
  bool bad = fclose(f) != 0;
  snprintf(path, sizeof path, "%s.gp", prefix);
  const char *base = strrchr(prefix, '/') ? strrchr(prefix, '/') + 1 : prefix;
  if (bad || !(f = fopen(path, "w")))
    return cli_error("analyze: cannot write %s", path), -1;
  fprintf(f,
          "set terminal pngcairo size 900,800\nset output '%s.png'\n"
          "set title 'FFN Fusion dependency M[i, j] (%s, %lld calibration rows)'\n"
          "set xlabel 'sublayer j'\nset ylabel 'removed sublayer i'\nset yrange [] reverse\n"
          "set cblabel '1 - cos(h_j, h_j^{-i})'\nset palette rgbformulae 33,13,10\n"
          "plot '%s.dat' matrix with image notitle\n",
          base, a->file, (long long)a->rows, base);
  bad = fclose(f) != 0;
  char dir[4096];
  snprintf(dir, sizeof dir, "%.*s", base == prefix ? 1 : (int)(base - prefix - 1), base == prefix ? "." : prefix);
  snprintf(cmd, sizeof cmd, "command -v gnuplot >/dev/null 2>&1 && cd '%s' && gnuplot '%s.gp'", dir, base);
  if (!bad && system(cmd) != 0)
    fprintf(stderr, "analyze: gnuplot not found here; render the heatmap with `gnuplot %s.gp`\n", base);
  return bad ? -1 : 0;
}

/* ---- the command ---- */

static const char usage[] =
    "usage: ffnc analyze FILE.ffn --weights W.safetensors --input CALIB.safetensors [--device gpu|cpu]\n"
    "                    [--json OUT.json] [--plot PREFIX] [--max-error X]\n"
    "What the program's lossy choices cost on calibration data (its inputs, by name, any number of rows):\n"
    "  precision: each output of the program as written (storage types, `precision` policy, its `fuse ffn`\n"
    "    lines) against the same program in f32 without quantization: relative L2, max abs, cosine;\n"
    "  FFN Fusion (for a model that is one chain of residual FFN sublayers, analyzed unfused): the dependency\n"
    "    matrix M[i, j] (cosine distance between sublayer j's contribution with and without sublayer i), the\n"
    "    least dependent run of each length with the measured error of fusing it (relative L2 and cosine of\n"
    "    the final output against the unfused model), and a greedy selection of runs whose combined error\n"
    "    stays within --max-error (default 0.01), as `fuse ffn A..B` lines.\n"
    "--device gpu (default where a GPU is present) runs the compiled kernels; cpu the reference interpreter.\n"
    "--json writes every number; --plot writes PREFIX.dat/.gp (and PREFIX.png where gnuplot is installed).\n";

typedef struct {
  const char *file, *wpath, *ipath, *device, *json, *plot;
  double max_error;
} AnalyzeArgs;

enum { O_WEIGHTS, O_INPUT, O_DEVICE, O_JSON, O_PLOT, O_MAX_ERROR };

/* 0 to go on, 1 after --help, -1 on bad usage (message printed). */
static int parse_args(int argc, char **argv, AnalyzeArgs *o) {
  static const CliOpt opts[] = {CLI_OPT("--weights", "W.safetensors", O_WEIGHTS),
                                CLI_OPT("--input", "CALIB.safetensors", O_INPUT),
                                CLI_OPT("--device", "gpu|cpu", O_DEVICE),
                                CLI_OPT("--json", "OUT.json", O_JSON),
                                CLI_OPT("--plot", "PREFIX", O_PLOT),
                                CLI_OPT("--max-error", "X", O_MAX_ERROR),
                                {0}};
  const char *v;
  const char **paths[] = {[O_WEIGHTS] = &o->wpath, [O_INPUT] = &o->ipath, [O_DEVICE] = &o->device,
                          [O_JSON] = &o->json, [O_PLOT] = &o->plot};
  *o = (AnalyzeArgs){.max_error = 0.01};
  CliParser p;
  cli_parser_init(&p, "analyze", opts, argc, argv);
  for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
    if (id == CLI_HELP)
      return fputs(usage, stdout), 1;
    if (id == CLI_BAD || (id == O_MAX_ERROR && cli_double("analyze", "--max-error", v, 0, INFINITY, &o->max_error)))
      return -1;
    if (id == CLI_ARG && o->file)
      return cli_error("analyze: unexpected argument '%s' (one FILE.ffn)", v), -1;
    if (id == CLI_ARG)
      o->file = v;
    else if (id != O_MAX_ERROR)
      *paths[id] = v;
  }
  if (!o->file || !o->wpath || !o->ipath)
    return cli_error("analyze: usage: ffnc analyze FILE.ffn --weights W.safetensors --input CALIB.safetensors"), -1;
  if (o->device && strcmp(o->device, "gpu") != 0 && strcmp(o->device, "cpu") != 0)
    return cli_error("analyze: --device must be gpu or cpu, not '%s'", o->device), -1;
  return 0;
}

/* The model, its files, its sublayers and (for an FFN stack) the calibration rows; 0 or an
 * exit status. */
static int setup(An *a, const AnalyzeArgs *o) {
  char err[512];
  if (read_file(o->file, &a->text, &a->len, err, sizeof err) != 0)
    return cli_error("%s", err), EXIT_USER;
  if (!(a->wf = st_open(o->wpath, err, sizeof err)) || !(a->inf = st_open(o->ipath, err, sizeof err)))
    return cli_error("%s", err), EXIT_USER;
  Diags d;
  diags_init(&d);
  Graph *g = model_graph(a, &d);
  if (d.len)
    fputs(d.text, stderr);
  diags_free(&d);
  if (!g)
    return EXIT_USER;
  FfnSublayer *s;
  a->n = ffn_sublayers(g, &s);
  if (a->n < 0)
    return graph_destroy(g), cli_error("analyze: out of host memory"), EXIT_USER;
  if (!(a->no_fusion = chain_problem(g, s, a->n))) {
    Node *in = s[0].x;
    a->input = strdup(in->name), a->dt = in->dtype, a->D = in->shape.d[1].size;
  }
  free(s);
  graph_destroy(g);
  return 0;
}

/* The calibration rows of an FFN stack, as the model's type holds them. */
static int setup_fusion(An *a, const char *ipath) {
  const StTensor *x = st_find(a->inf, a->input);
  if (!x || x->rank != 2 || x->shape[1] != a->D || x->shape[0] < 1)
    return cli_error("%s: needs the input '%s' as [rows, %lld] (rows >= 1)", ipath, a->input, (long long)a->D),
           EXIT_USER;
  a->rows = x->shape[0];
  size_t n = (size_t)(a->rows * a->D);
  a->base = calloc((size_t)a->n + 1, sizeof *a->base);
  a->M = calloc((size_t)(a->n * a->n), sizeof *a->M);
  a->parts = calloc((size_t)a->n, sizeof *a->parts);
  if (!a->base || !a->M || !a->parts || !(a->base[0] = malloc(sizeof(float) * n)))
    return cli_error("analyze: out of host memory"), EXIT_USER;
  for (size_t i = 0; i < n; i++)
    a->base[0][i] = (float)round_to_dtype(dtype_load(x->dtype, x->data, i), a->dt);
  return 0;
}

static void teardown(An *a) {
  for (int j = 0; a->parts && j < a->n; j++) {
    ffn_model_destroy(a->parts[j].m);
    ffn_program_destroy(a->parts[j].prog);
    graph_destroy(a->parts[j].g);
  }
  for (int j = 0; a->base && j <= a->n; j++)
    free(a->base[j]);
  free(a->base);
  free(a->parts);
  free(a->M);
  free(a->text);
  free((char *)a->input);
  st_close(a->wf);
  st_close(a->inf);
}

static int report_fusion(An *a, const AnalyzeArgs *o, json_t *root) {
  Run *cand = calloc((size_t)a->n, sizeof *cand), *sel = calloc((size_t)a->n, sizeof *sel);
  int rc = cand && sel ? 0 : EXIT_USER, nc = 0, nsel = 0;
  double rel = 0, cos = 1;
  if (rc == 0)
    nc = candidates(a, cand, &rc);
  if (rc == 0)
    rc = select_runs(a, o->max_error, sel, &nsel, &rel, &cos);
  if (a->progress)
    fprintf(stderr, "\r%60s\r", "");
  if (rc == 0) {
    print_matrix(a);
    printf("\nThe least dependent run of each length, fused alone (error of the final output):\n");
    print_runs(cand, nc);
    printf("\nGreedy selection under --max-error %g: %d run%s, rel_l2 %.3g, cosine %.6f\n", o->max_error, nsel,
           nsel == 1 ? "" : "s", rel, cos);
    if (nsel)
      print_runs(sel, nsel);
    else
      printf("(no run of two or more sublayers stays within the bound)\n");
    for (int i = 0; i < nsel; i++)
      printf("fuse ffn %d..%d\n", sel[i].first, sel[i].last);
    fusion_json(a, root, cand, nc, sel, nsel, o->max_error, rel, cos);
  }
  if (rc == 0 && o->plot && write_plot(a, o->plot) != 0)
    rc = EXIT_USER;
  free(cand);
  free(sel);
  return rc;
}

/* The FFN Fusion analysis of an FFN stack: sublayer programs, base run, matrix, report. */
static int analyze_fusion(An *a, const AnalyzeArgs *o, json_t *root) {
  if (a->no_fusion) {
    printf("\nFFN Fusion: not analyzed: %s (it needs one chain of FFN sublayers from the input to the "
           "outputs)\n", a->no_fusion);
    json_object_set_new(root, "fusion_skipped", json_string(a->no_fusion));
    return 0;
  }
  int rc = setup_fusion(a, o->ipath);
  if (rc == 0)
    rc = build_parts(a);
  if (rc == 0) {
    printf("\nFFN Fusion: %d sublayers, %lld calibration rows\n", a->n, (long long)a->rows);
    fflush(stdout);
    rc = base_run(a);
  }
  if (rc == 0)
    rc = dependency(a);
  if (rc == 0)
    rc = report_fusion(a, o, root);
  return rc;
}

static int analyze_prec(An *a, json_t *root) {
  AnalyzeInput in = {a->file, a->text, a->len, a->wf, a->wpath, a->inf};
  int rc = analyze_precision(&in, a->gpu, a->prec, &a->nprec, a->prec_how, sizeof a->prec_how);
  if (rc)
    return rc;
  printf("\nPrecision: %s, on the calibration input:\n", a->prec_how);
  printf("%-24s %10s %10s %10s\n", "output", "rel_l2", "max_abs", "cosine");
  json_t *outs = json_array();
  for (int i = 0; i < a->nprec; i++) {
    const PrecisionError *e = &a->prec[i];
    printf("%-24s %10.3g %10.3g %10.6f\n", e->name, e->rel_l2, e->max_abs, e->cosine);
    json_array_append_new(outs, json_pack("{s:s, s:f, s:f, s:f}", "output", e->name, "rel_l2", e->rel_l2, "max_abs",
                                          e->max_abs, "cosine", e->cosine));
  }
  json_object_set_new(root, "precision", json_pack("{s:s, s:o}", "how", a->prec_how, "outputs", outs));
  return 0;
}

static void device_name(bool gpu, char *buf, size_t len) {
  snprintf(buf, len, "the CPU reference interpreter");
  const CuApi *cu = gpu ? cu_api(NULL, 0) : NULL;
  CUdevice dev;
  char name[256] = "?";
  if (cu && cu->cuDeviceGet(&dev, 0) == CUDA_SUCCESS)
    cu->cuDeviceGetName(name, sizeof name, dev);
  if (gpu)
    snprintf(buf, len, "GPU 0 (%s), compiled kernels", name);
}

int cmd_analyze(int argc, char **argv) {
  AnalyzeArgs o;
  int parsed = parse_args(argc, argv, &o);
  if (parsed != 0)
    return parsed > 0 ? 0 : EXIT_USAGE;
  char why[256] = "";
  bool have_gpu = ffn_device_count(why, sizeof why) > 0;
  if (!o.device && !have_gpu)
    fprintf(stderr, "ffnc: note: %s; analyzing on the CPU reference interpreter\n", why);
  if (!o.device)
    o.device = have_gpu ? "gpu" : "cpu";
  if (strcmp(o.device, "gpu") == 0 && !have_gpu)
    return cli_error("analyze: --device gpu: %s", why), EXIT_DEVICE;
  An a = {.file = o.file, .wpath = o.wpath, .gpu = strcmp(o.device, "gpu") == 0, .progress = isatty(2)};
  char device[300];
  device_name(a.gpu, device, sizeof device);
  json_t *root = json_pack("{s:s, s:s}", "model", o.file, "device", device);
  int rc = setup(&a, &o);
  if (rc == 0) {
    printf("ffnc analyze: %s on %s\n", o.file, device);
    rc = analyze_prec(&a, root);
  }
  if (rc == 0)
    rc = analyze_fusion(&a, &o, root);
  if (rc == 0 && o.json && json_dump_file(root, o.json, JSON_INDENT(1)) != 0)
    rc = (cli_error("analyze: cannot write %s", o.json), EXIT_USER);
  json_decref(root);
  teardown(&a);
  return rc;
}
