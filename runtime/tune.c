/* tune.c: measuring each GEMM kernel's choices on the model's device (ffn_model_tune), and
 * loading what was measured before when a model is created (tune.h has the file format).
 *
 * A GEMM kernel is timed alone, launched by exec_step as a run launches it (with the row
 * statistics kernel before the variants that read them), on the model's weights and on
 * random values in every other tensor it touches, allocated for the largest bucket. Each
 * candidate (a variant with the heuristic's split-K, or with another split the kernel can
 * take while the grid stays within two waves of resident CTAs) gets warm-up launches, then
 * single launches between CUDA events, each after L2 was flushed (a write of twice its size
 * outside the events): in a run the weights a decode product streams were evicted by the
 * other products since its last launch, so one timed back to back would read them from L2
 * (the Llama-3-8B int4 down product, 29 MB, did: its tuned choice lost 15% in the model).
 * SAMPLES launches for a kernel under 200 us, LONG_SAMPLES above; the median counts. A
 * candidate whose first launch takes 3x the best so far is not sampled further. The
 * heuristic's choice is measured first and again last (the better counts), and stays unless
 * another is faster by more than 1% (the spread of repeated measurements), so that noise does
 * not move it.
 */
#include "rt.h"

#include "../ir/size_limits.h"
#include "../ir/fnv.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* candidates(): per variant the heuristic's split and up to 8 others */
enum { WARMUP = 2, SAMPLES = 15, LONG_SAMPLES = 7, MAX_CANDIDATES = PLAN_MAX_VARIANTS * 9 };
#define LONG_US 200.0

static const int64_t default_rows[] = {1, 16, 64, 128, 256, 512, 1024, 4096, 8192};

/* ---- keys ---- */

static void mix(uint64_t h[2], const void *data, size_t n) {
  h[0] = ffn_fnv(data, n, h[0]);
  h[1] = ffn_fnv(data, n, h[1]);
}

/* Kernel `kernel`'s generated text, its section of the plan's source less the heading and the
 * #line directives (both name the .ffn file's path, which does not change the kernel); false
 * when the plan has none (loaded from an AOT file). */
static bool mix_source(uint64_t h[2], const char *src, int kernel) {
  char heading[48];
  snprintf(heading, sizeof heading, "\n// kernel k%d:", kernel);
  const char *at = src ? strstr(src, heading) : NULL;
  const char *p = at ? strchr(at + 1, '\n') : NULL;
  if (!p)
    return false;
  const char *end = strstr(p, "\n// kernel ");
  end = end ? end : p + strlen(p);
  while (p < end) {
    const char *nl = memchr(p + 1, '\n', (size_t)(end - p - 1));
    nl = nl ? nl : end;
    if (strncmp(p, "\n#line ", 7) != 0)
      mix(h, p, (size_t)(nl - p));
    p = nl;
  }
  return true;
}

void tune_kernel_id(const ffn_program *p, int kernel, char out[33]) {
  const PlanKernel *k = &p->plan->kernels[kernel];
  uint64_t h[2] = {FFN_FNV_OFFSET, FFN_FNV_OFFSET2};
  char head[160];
  int n = snprintf(head, sizeof head, "%s n %lld k %lld streams %d splittable %d variants %d", p->plan->arch,
                   (long long)k->n, (long long)k->k, k->streams, (int)k->splittable, k->nvariants);
  mix(h, head, (size_t)n);
  for (int v = 0; v < k->nvariants; v++)
    mix(h, k->variants[v].cfg.name, strlen(k->variants[v].cfg.name) + 1);
  char nvrtc[128];
  if (mix_source(h, p->plan->cuda_source, kernel)) { /* and the compiler that compiles it */
    if (nvrtc_version(nvrtc, sizeof nvrtc))
      mix(h, nvrtc, strlen(nvrtc));
  } else { /* an AOT program: the compiled code itself */
    for (int v = 0; v < k->nvariants; v++)
      for (int i = 0; i < p->nimages; i++)
        if (image_names(&p->images[i], k->variants[v].func)) {
          mix(h, p->images[i].image, p->images[i].size);
          break;
        }
  }
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)h[0], (unsigned long long)h[1]);
}

/* The first launch of kernel `kernel` in the plan's steps; -1 if none. */
static int first_step(const Plan *p, int kernel) {
  for (int s = 0; s < p->nsteps; s++)
    if (p->steps[s].kind == STEP_LAUNCH && p->steps[s].kernel == kernel)
      return s;
  return -1;
}

static bool is_tunable(const Plan *p, int kernel) {
  return p->kernels[kernel].kind == KK_GEMM && first_step(p, kernel) >= 0;
}

void tune_model_key(const ffn_model *m, int kernel, TuneKey *key) {
  const Plan *p = m->prog->plan;
  const PlanKernel *k = &p->kernels[kernel];
  *key = (TuneKey){.sms = m->sms, .driver = m->cu->version, .n = k->n, .k = k->k, .streams = k->streams};
  if (m->cu->cuDeviceGetName(key->device, (int)sizeof key->device, m->dev) != CUDA_SUCCESS)
    snprintf(key->device, sizeof key->device, "unknown");
  snprintf(key->ffnc, sizeof key->ffnc, "%s", ffn_build_info());
  tune_kernel_id(m->prog, kernel, key->kernel);
  snprintf(key->arch, sizeof key->arch, "%s", p->arch);
  snprintf(key->dtype, sizeof key->dtype, "%s", dtype_name(p->tensors[p->steps[first_step(p, kernel)].args[0]].dtype));
}

/* e's buckets as kernel k's run-time choices: 0, or -1 (why) when e names a configuration the
 * kernel was not compiled with or a split it cannot take. */
static int to_tuned(const PlanKernel *k, const TuneEntry *e, TunedKernel *out, char *why, size_t len) {
  TunedKernel t = {.n = e->n};
  for (int i = 0; i < e->n; i++) {
    int v = 0;
    while (v < k->nvariants && strcmp(k->variants[v].cfg.name, e->b[i].config) != 0)
      v++;
    if (v == k->nvariants)
      return snprintf(why, len, "configuration %s is not one of the kernel's", e->b[i].config), -1;
    if (e->b[i].splits > 1 && !k->splittable)
      return snprintf(why, len, "split-K %d for a kernel that cannot split", e->b[i].splits), -1;
    t.rows[i] = e->b[i].rows;
    t.variant[i] = (signed char)v;
    t.splits[i] = (signed char)e->b[i].splits;
  }
  *out = t;
  return 0;
}

/* ---- loading (ffn_model_create) ---- */

static bool has_tune_files(const char *dir) {
  DIR *d = opendir(dir);
  bool found = false;
  for (struct dirent *e; d && !found && (e = readdir(d));)
    found = strncmp(e->d_name, "tune-", 5) == 0;
  if (d)
    closedir(d);
  return found;
}

ffn_status tune_load_model(ffn_model *m) {
  const Plan *p = m->prog->plan;
  int gemms = 0;
  for (int k = 0; k < p->nkernels; k++)
    gemms += is_tunable(p, k);
  const char *off = getenv("FFNC_NO_TUNE"), *dir = cache_directory();
  if (off && *off && strcmp(off, "0") != 0)
    return snprintf(m->tuning, sizeof m->tuning, "tuned GEMM choices: not loaded (FFNC_NO_TUNE is set)"), FFN_OK;
  if (!gemms)
    return snprintf(m->tuning, sizeof m->tuning, "tuned GEMM choices: none (the program has no GEMM)"), FFN_OK;
  if (!dir)
    return snprintf(m->tuning, sizeof m->tuning, "tuned GEMM choices: none (no kernel cache directory in use)"), FFN_OK;
  if (!has_tune_files(dir)) /* spares hashing the kernels' images */
    return snprintf(m->tuning, sizeof m->tuning, "tuned GEMM choices: none in %s (`ffnc tune` makes them)", dir),
           FFN_OK;
  m->tuned = calloc((size_t)p->nkernels + 1, sizeof *m->tuned);
  TuneEntry *e = malloc(sizeof *e);
  if (!m->tuned || !e) {
    free(e);
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  char ignored[768] = "";
  int loaded = 0;
  size_t at = 0;
  for (int k = 0; k < p->nkernels; k++) {
    if (!is_tunable(p, k))
      continue;
    TuneKey key;
    tune_model_key(m, k, &key);
    char why[600];
    int rc = tune_load(dir, &key, e, why, sizeof why);
    if (rc == 1 && to_tuned(&p->kernels[k], e, &m->tuned[k], why, sizeof why) != 0)
      rc = -1;
    loaded += rc == 1;
    if (rc < 0 && at < sizeof ignored)
      at += (size_t)snprintf(ignored + at, sizeof ignored - at, "; k%d's file ignored: %s", k, why);
  }
  free(e);
  snprintf(m->tuning, sizeof m->tuning, "tuned GEMM choices: %d of %d GEMM kernel%s from %s%s", loaded, gemms,
           gemms == 1 ? "" : "s", dir, ignored);
  return FFN_OK;
}

const char *ffn_model_tuning(const ffn_model *m) { return m ? m->tuning : ""; }

/* ---- measuring ---- */

typedef struct {
  int variant;
  int splits; /* 0: the heuristic's */
} Candidate;

/* Kernel k's candidates at M rows: every variant with the heuristic's split, and where the
 * kernel can split, the splits it can take (>= 4 k tiles per split, >= 8 for gemm_wq and
 * gemm_wqd, as ffn_gemm_pick_splits bounds them) that keep the grid within two waves of resident CTAs. */
static int candidates(const PlanKernel *k, int M, int sms, Candidate *out) {
  static const int splits[] = {1, 2, 3, 4, 6, 8, 12, 16};
  int n = 0;
  for (int v = 0; v < k->nvariants; v++) {
    const ffn_gemm_config *c = &k->variants[v].cfg;
    out[n++] = (Candidate){v, 0};
    if (!k->splittable)
      continue;
    int h = ffn_gemm_pick_splits(M, (int)k->n, k->streams, (int)k->k, c, sms);
    long tiles = ffn_gemm_num_tiles(c, M, (int)k->n, k->streams);
    long slots = (long)sms * (c->ctas_per_sm > 0 ? c->ctas_per_sm : 1);
    int ktiles = (int)((k->k + c->bk - 1) / c->bk);
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
      int s = splits[i];
      bool wq = c->kind == FFN_GEMM_WQ || c->kind == FFN_GEMM_WQD;
      bool fits = s == 1 || (ktiles / s >= (wq ? 8 : 4) && tiles * s <= 2 * slots);
      if (s != h && fits)
        out[n++] = (Candidate){v, s};
    }
  }
  return n;
}

static LaunchChoice resolve(const PlanKernel *k, Candidate c, int M, int sms) {
  LaunchChoice l = {&k->variants[c.variant], 1, M};
  if (k->splittable)
    l.splits = c.splits ? c.splits : ffn_gemm_pick_splits(M, (int)k->n, k->streams, (int)k->k, &l.v->cfg, sms);
  return l;
}

typedef struct {
  ffn_model *m;
  const CuApi *cu;
  CUstream stream;
  CUevent ev[2 * SAMPLES];
  int nev;     /* events created */
  bool pushed; /* the model's context made current */
  CUdeviceptr flush; /* twice the L2's bytes, written before each timed launch */
  size_t flush_bytes;
  ExecRun run; /* what exec_step reads: choice per step, ptr per tensor, ws, counters, rowstats */
  CUdeviceptr *owned; /* what this kernel's measurement allocated */
  int nowned;
  uint64_t rng;
} Tuner;

static ffn_status alloc(Tuner *t, size_t bytes, CUdeviceptr *out) {
  CUresult r = t->cu->cuMemAlloc(out, bytes ? bytes : 16);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "ffn_model_tune: %zu bytes of device memory for a GEMM's operands at "
                    "the largest row count: tune at fewer rows", bytes);
  if (r != CUDA_SUCCESS)
    return cu_fail(t->cu, r, "cu->cuMemAlloc()");
  t->owned[t->nowned++] = *out;
  return FFN_OK;
}

static uint32_t next_random(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return (uint32_t)(*s >> 24);
}

/* bytes of random values of type dt at d: a 4 MiB pattern repeated (timing needs values of the
 * right kind, not independent ones). Floats uniform in [-1.7, 1.7] (variance 1); byte codes
 * (fp8, int8) in 0..63, finite in every format. */
static ffn_status fill_random(Tuner *t, CUdeviceptr d, size_t bytes, DType dt) {
  enum { CHUNK = 1 << 22 };
  unsigned char *h = malloc(CHUNK);
  if (!h)
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  size_t esize = dtype_bytes(dt, 1);
  if (dtype_is_float(dt) && esize >= 2)
    for (size_t i = 0; i < CHUNK / esize; i++)
      dtype_store(dt, h, i, 1.7 * ((double)(next_random(&t->rng) & 0xffffff) / 8388608.0 - 1.0));
  else
    for (size_t i = 0; i < CHUNK; i++)
      h[i] = (unsigned char)(next_random(&t->rng) & 0x3f);
  ffn_status s = FFN_OK;
  for (size_t off = 0; off < bytes && s == FFN_OK; off += CHUNK) {
    CUresult r = t->cu->cuMemcpyHtoD(d + off, h, bytes - off < CHUNK ? bytes - off : CHUNK);
    if (r != CUDA_SUCCESS)
      s = cu_fail(t->cu, r, "cu->cuMemcpyHtoD()");
  }
  free(h);
  return s;
}

static ffn_status launch(Tuner *t, int step, LaunchChoice c) {
  t->run.choice[step] = c;
  t->run.chain = false; /* timed alone, from a plain launch */
  return exec_step(&t->run, step);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median time of one launch of choice c with L2 cold, microseconds; only the first
 * launch's when it took more than 3x `best` (a candidate that cannot win). */
static ffn_status time_choice(Tuner *t, int step, LaunchChoice c, double best, double *us) {
  const CuApi *cu = t->cu;
  ffn_status s;
  for (int i = 0; i < WARMUP; i++)
    if ((s = launch(t, step, c)) != FFN_OK)
      return s;
  double times[SAMPLES];
  int n = SAMPLES;
  for (int i = 0; i < n; i++) {
    CU_CHECK(cu, cu->cuMemsetD32Async(t->flush, (unsigned)i, t->flush_bytes / 4, t->stream));
    CU_CHECK(cu, cu->cuEventRecord(t->ev[2 * i], t->stream));
    if ((s = launch(t, step, c)) != FFN_OK)
      return s;
    CU_CHECK(cu, cu->cuEventRecord(t->ev[2 * i + 1], t->stream));
    if (i > 0)
      continue;
    CU_CHECK(cu, cu->cuEventSynchronize(t->ev[1])); /* a fault in the kernel shows here */
    float ms;
    CU_CHECK(cu, cu->cuEventElapsedTime(&ms, t->ev[0], t->ev[1]));
    if (best > 0 && ms * 1000.0 > 3 * best) {
      *us = ms * 1000.0;
      return FFN_OK;
    }
    n = ms * 1000.0 < LONG_US ? SAMPLES : LONG_SAMPLES;
  }
  CU_CHECK(cu, cu->cuEventSynchronize(t->ev[2 * n - 1]));
  for (int i = 0; i < n; i++) {
    float ms;
    CU_CHECK(cu, cu->cuEventElapsedTime(&ms, t->ev[2 * i], t->ev[2 * i + 1]));
    times[i] = ms * 1000.0;
  }
  qsort(times, (size_t)n, sizeof times[0], cmp_double);
  *us = times[n / 2];
  return FFN_OK;
}

/* The M of each requested row count for this launch step (its rows are the product of its row
 * dims: the first dynamic one set to the count, any other to 1), ascending and distinct; a
 * step whose rows are static has that one M. dims gets the binding of the largest count. */
static int bucket_rows(const Plan *p, const PlanStep *ps, const int64_t *req, int nreq, int64_t *rows, int64_t *dims) {
  int dyn = -1;
  for (int d = 0; d < ps->nrowdims && dyn < 0; d++)
    if (ps->rowdims[d].sym >= 0)
      dyn = ps->rowdims[d].sym;
  int n = 0;
  for (int i = 0; i < (dyn < 0 ? 1 : nreq); i++) {
    for (int d = 0; d < p->ndims; d++)
      dims[d] = 1;
    if (dyn >= 0)
      dims[dyn] = req[i];
    int64_t M = 1;
    for (int d = 0; d < ps->nrowdims && M <= FFN_MAX_DIM; d++)
      M *= ps->rowdims[d].sym >= 0 ? dims[ps->rowdims[d].sym] : ps->rowdims[d].size;
    if (M < 1 || M > FFN_MAX_DIM)
      continue;
    int j = n; /* insertion into the sorted list */
    while (j > 0 && rows[j - 1] > M)
      j--;
    if (j > 0 && rows[j - 1] == M)
      continue;
    memmove(&rows[j + 1], &rows[j], sizeof rows[0] * (size_t)(n - j));
    rows[j] = M;
    n++;
  }
  int64_t most = 1; /* M grows with the count: the largest count binds the largest buffers */
  for (int i = 0; i < nreq; i++)
    most = req[i] > most ? req[i] : most;
  for (int d = 0; d < p->ndims; d++)
    dims[d] = 1;
  if (dyn >= 0)
    dims[dyn] = most;
  return n;
}

/* The operands of step `step` for kernel k at `dims` (the largest row count's), and a workspace,
 * split-K counters and row statistics for the largest of the candidates at rows[0..nb): the
 * model's weights, random activations. Freed by tune_kernel. */
static ffn_status tune_operands(Tuner *t, const PlanKernel *k, int step, const int64_t *rows, int nb,
                                const int64_t *dims) {
  ffn_model *m = t->m;
  const Plan *p = m->prog->plan;
  const PlanStep *ps = &p->steps[step];
  Candidate cand[MAX_CANDIDATES];
  size_t ws = 0, tiles = 0, dq = 0;
  for (int b = 0; b < nb; b++) { /* the workspace of the largest candidate */
    int nc = candidates(k, (int)rows[b], m->sms, cand);
    for (int i = 0; i < nc; i++) {
      LaunchChoice l = resolve(k, cand[i], (int)rows[b], m->sms);
      if (l.v->dq) /* its weights as bf16, made by each timed launch (exec_step) */
        dq = exec_dq_bytes(k);
      size_t f = ffn_gemm_ws_floats(&l.v->cfg, (int)rows[b], (int)k->n, k->streams, l.splits);
      size_t n = (size_t)ffn_gemm_num_tiles(&l.v->cfg, (int)rows[b], (int)k->n, k->streams);
      ws = f > ws ? f : ws;
      tiles = n > tiles ? n : tiles;
    }
  }
  ffn_status s = FFN_OK;
  memset(t->run.ptr, 0, sizeof(CUdeviceptr) * (size_t)p->ntensors);
  for (int j = 0; j < ps->nargs && s == FFN_OK; j++) {
    int a = ps->args[j];
    const PlanTensor *pt = &p->tensors[a];
    if (pt->kind == PT_WEIGHT || pt->kind == PT_DERIVED) {
      t->run.ptr[a] = m->tensor[a];
      if (!m->tensor[a] && plan_numel(p, a, NULL) > 0)
        s = rt_error(FFN_ERR_TENSOR, "ffn_model_tune: weight %s is not on the device", pt->name ? pt->name : "");
    } else if (!t->run.ptr[a]) {
      size_t bytes = dtype_bytes(pt->dtype, (size_t)plan_numel(p, a, dims));
      if ((s = alloc(t, bytes, &t->run.ptr[a])) == FFN_OK)
        s = fill_random(t, t->run.ptr[a], bytes, pt->dtype);
    }
  }
  CUdeviceptr ws_ptr = 0, counters = 0, rowstats = 0, dq_ptr = 0;
  if (s == FFN_OK && (s = alloc(t, ws * 4, &ws_ptr)) == FFN_OK && (s = alloc(t, (tiles + 4) * 4, &counters)) == FFN_OK)
    s = alloc(t, (size_t)rows[nb - 1] * 8, &rowstats);
  if (s == FFN_OK && dq)
    s = alloc(t, dq, &dq_ptr);
  CUresult r;
  /* split-K tile counters start at zero; the kernels leave them so */
  if (s == FFN_OK && (r = t->cu->cuMemsetD8Async(counters, 0, (tiles + 4) * 4, t->stream)) != CUDA_SUCCESS)
    s = cu_fail(t->cu, r, "cu->cuMemsetD8Async()");
  t->run.ws = ws_ptr, t->run.counters = counters, t->run.rowstats = rowstats, t->run.dq = dq_ptr;
  return s;
}

/* Every candidate of kernel k at M rows, the rule's choice first (it sets the bar) and once more
 * at the end, into tb; *splits gets the fastest's split-K. */
static ffn_status tune_bucket(Tuner *t, const PlanKernel *k, int step, int M, TuneBucket *tb, int *splits) {
  ffn_model *m = t->m;
  Candidate cand[MAX_CANDIDATES];
  int nc = candidates(k, M, m->sms, cand);
  LaunchChoice dflt = exec_heuristic(k, M, m->sms, m->dram_gbs);
  int first = 0;
  while (first < nc && !(&k->variants[cand[first].variant] == dflt.v && cand[first].splits == 0))
    first++;
  if (first == nc) /* cannot happen: every variant is a candidate with the heuristic's split */
    first = 0;
  double best_us = INFINITY, default_us = 0;
  int best = first;
  ffn_status s = FFN_OK;
  for (int i = -1; i < nc && s == FFN_OK; i++) {
    int c = i < 0 ? first : i;
    if (i >= 0 && c == first)
      continue;
    double us;
    s = time_choice(t, step, resolve(k, cand[c], M, m->sms), isfinite(best_us) ? best_us : 0, &us);
    if (s == FFN_OK && c == first)
      default_us = us;
    if (s == FFN_OK && us < best_us)
      best_us = us, best = c;
  }
  /* the rule's choice once more: the first measurement may have met a GPU still raising its
   * clocks, which would flatter every later candidate */
  double again = 0;
  if (s == FFN_OK && nc > 1 && (s = time_choice(t, step, resolve(k, cand[first], M, m->sms), 0, &again)) == FFN_OK &&
      again < default_us) {
    default_us = again;
    if (best == first)
      best_us = again;
  }
  if (s != FFN_OK)
    return s;
  if (best != first && best_us >= 0.99 * default_us)
    best = first, best_us = default_us;
  *tb = (TuneBucket){.rows = M, .splits = cand[best].splits, .us = best_us, .default_us = default_us};
  snprintf(tb->config, sizeof tb->config, "%s", k->variants[cand[best].variant].cfg.name);
  *splits = resolve(k, cand[best], M, m->sms).splits;
  return FFN_OK;
}

/* Measures kernel `kernel` (first launched by step `step`) at the requested rows into e and
 * the progress arrays. */
static ffn_status tune_kernel(Tuner *t, int kernel, int step, const int64_t *req, int nreq, TuneEntry *e,
                              int *splits_used) {
  const Plan *p = t->m->prog->plan;
  const PlanKernel *k = &p->kernels[kernel];
  int64_t rows[TUNE_MAX_BUCKETS], dims[64];
  int nb = bucket_rows(p, &p->steps[step], req, nreq, rows, dims);
  if (nb == 0)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_tune: no row count within the kernels' limits");
  ffn_status s = tune_operands(t, k, step, rows, nb, dims);
  *e = (TuneEntry){.n = nb};
  tune_model_key(t->m, kernel, &e->key);
  for (int b = 0; b < nb && s == FFN_OK; b++)
    s = tune_bucket(t, k, step, (int)rows[b], &e->b[b], &splits_used[b]);
  CUresult r;
  if (s == FFN_OK && (r = t->cu->cuStreamSynchronize(t->stream)) != CUDA_SUCCESS)
    s = cu_fail(t->cu, r, "cu->cuStreamSynchronize()");
  for (int i = 0; i < t->nowned; i++) /* after the launches that read them (synchronized above) */
    t->cu->cuMemFree(t->owned[i]);
  t->nowned = 0;
  return s;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static ffn_status tune_all(Tuner *t, const int64_t *req, int nreq, ffn_tune_progress_fn fn, void *user, int *saved,
                           char *save_err, size_t errlen) {
  ffn_model *m = t->m;
  const Plan *p = m->prog->plan;
  const char *dir = cache_directory();
  int gemms = 0, done = 0;
  for (int k = 0; k < p->nkernels; k++)
    gemms += is_tunable(p, k);
  TuneEntry *e = malloc(sizeof *e);
  if (!e)
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  double t0 = now_seconds();
  ffn_status s = FFN_OK;
  if (!dir)
    snprintf(save_err, errlen, "no kernel cache directory in use (FFNC_NO_CACHE, or an untrusted FFNC_CACHE_DIR)");
  for (int k = 0; k < p->nkernels && s == FFN_OK; k++) {
    if (!is_tunable(p, k))
      continue;
    int splits[TUNE_MAX_BUCKETS];
    s = tune_kernel(t, k, first_step(p, k), req, nreq, e, splits);
    if (s != FFN_OK)
      break;
    char why[600];
    if (to_tuned(&p->kernels[k], e, &m->tuned[k], why, sizeof why) != 0) { /* cannot happen: our own names */
      s = rt_error(FFN_ERR_UNSUPPORTED, "ffn_model_tune: %s", why);
      break;
    }
    if (dir && tune_save(dir, e, why, sizeof why) == 0)
      (*saved)++;
    else if (dir && !save_err[0])
      snprintf(save_err, errlen, "%s", why);
    done++;
    if (fn) {
      int64_t rows[TUNE_MAX_BUCKETS];
      const char *config[TUNE_MAX_BUCKETS];
      double us[TUNE_MAX_BUCKETS], dus[TUNE_MAX_BUCKETS];
      for (int b = 0; b < e->n; b++)
        rows[b] = e->b[b].rows, config[b] = e->b[b].config, us[b] = e->b[b].us, dus[b] = e->b[b].default_us;
      char name[32];
      snprintf(name, sizeof name, "k%d", k);
      ffn_tune_progress pr = {.gemm = done, .gemms = gemms, .kernel = name, .dtype = e->key.dtype,
                              .n = p->kernels[k].n, .k = p->kernels[k].k, .streams = p->kernels[k].streams,
                              .nbuckets = e->n, .rows = rows, .config = config, .splits = splits, .us = us,
                              .default_us = dus, .seconds = now_seconds() - t0};
      fn(user, &pr);
    }
  }
  free(e);
  snprintf(m->tuning, sizeof m->tuning, "tuned GEMM choices: %d of %d GEMM kernel%s, measured now%s%s", done, gemms,
           gemms == 1 ? "" : "s", *saved == done ? " and saved to " : " (not saved: ",
           *saved == done ? (dir ? dir : "") : save_err);
  if (*saved != done) {
    size_t l = strlen(m->tuning);
    snprintf(m->tuning + l, sizeof m->tuning - l, ")");
  }
  return s;
}

/* What a tuning needs besides the model: host arrays for exec_step, the model's context
 * current, a stream, the L2 flush buffer and the events. tuner_close undoes whatever of it was
 * made, after a failure too. */
static ffn_status tuner_open(Tuner *t, ffn_model *m) {
  const Plan *p = m->prog->plan;
  const CuApi *cu = m->cu;
  *t = (Tuner){.m = m, .cu = cu, .rng = 0x9e3779b97f4a7c15ull};
  t->run = (ExecRun){.m = m};
  t->run.choice = calloc((size_t)p->nsteps + 1, sizeof *t->run.choice);
  t->run.ptr = calloc((size_t)p->ntensors + 1, sizeof *t->run.ptr);
  t->owned = calloc((size_t)FFN_KARGS_SLOTS + 5, sizeof *t->owned); /* operands, ws, counters, rowstats, dq */
  if (!t->run.choice || !t->run.ptr || !t->owned)
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  CUresult r = cu->cuCtxPushCurrent(m->ctx);
  if (r != CUDA_SUCCESS)
    return cu_fail(cu, r, "cu->cuCtxPushCurrent()");
  t->pushed = true;
  if ((r = cu->cuStreamCreate(&t->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
    return cu_fail(cu, r, "cu->cuStreamCreate()");
  t->run.stream = t->stream;
  int l2 = 0;
  if ((r = cu->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, m->dev)) != CUDA_SUCCESS)
    return cu_fail(cu, r, "cu->cuDeviceGetAttribute(L2_CACHE_SIZE)");
  t->flush_bytes = 2 * (size_t)(l2 > (1 << 20) ? l2 : 1 << 20);
  if ((r = cu->cuMemAlloc(&t->flush, t->flush_bytes)) != CUDA_SUCCESS)
    return r == CUDA_ERROR_OUT_OF_MEMORY
               ? rt_error(FFN_ERR_OUT_OF_MEMORY, "ffn_model_tune: %zu bytes of device memory to flush L2 between "
                          "timed launches", t->flush_bytes)
               : cu_fail(cu, r, "cu->cuMemAlloc()");
  for (; t->nev < 2 * SAMPLES; t->nev++)
    if ((r = cu->cuEventCreate(&t->ev[t->nev], CU_EVENT_DEFAULT)) != CUDA_SUCCESS)
      return cu_fail(cu, r, "cu->cuEventCreate()");
  return FFN_OK;
}

static void tuner_close(Tuner *t) {
  const CuApi *cu = t->cu;
  for (int i = 0; i < t->nev; i++)
    cu->cuEventDestroy(t->ev[i]);
  if (t->flush)
    cu->cuMemFree(t->flush);
  if (t->stream)
    cu->cuStreamDestroy(t->stream);
  if (t->pushed) {
    CUcontext c;
    cu->cuCtxPopCurrent(&c);
  }
  free(t->run.choice), free(t->run.ptr), free(t->owned);
}

ffn_status ffn_model_tune(ffn_model *m, const int64_t *rows, int nrows, ffn_tune_progress_fn fn, void *user) {
  if (!m || (nrows && !rows) || nrows < 0 || nrows > TUNE_MAX_BUCKETS)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_tune: NULL model, or rows not 1..%d counts", TUNE_MAX_BUCKETS);
  if (!rows || !nrows) {
    rows = default_rows;
    nrows = (int)(sizeof default_rows / sizeof default_rows[0]);
  }
  for (int i = 0; i < nrows; i++)
    if (rows[i] < 1 || rows[i] > FFN_MAX_DIM)
      return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_tune: row count %lld is not in 1..%lld", (long long)rows[i],
                      (long long)FFN_MAX_DIM);
  if (!m->prepared)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_tune: call ffn_model_prepare first (the GEMMs are timed on "
                    "the model's weights)");
  const Plan *p = m->prog->plan;
  if (!m->tuned && !(m->tuned = calloc((size_t)p->nkernels + 1, sizeof *m->tuned)))
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  Tuner t;
  ffn_status s = tuner_open(&t, m);
  int saved = 0;
  char save_err[700] = "";
  if (s == FFN_OK)
    s = tune_all(&t, rows, nrows, fn, user, &saved, save_err, sizeof save_err);
  tuner_close(&t);
  if (s == FFN_OK && save_err[0])
    s = rt_error(FFN_ERR_IO, "ffn_model_tune: the choices apply to this model, but could not be saved: %s", save_err);
  return s;
}
