/* tune_sim_test.c: ffn_model_tune and the loading of its files, end to end, against a simulated
 * CUDA driver (no GPU): what runs on the device is checked here as far as the host decides it.
 *
 *   tune_sim_test MODEL.ffn...   (each compiled for sm_90 to a plan, no NVRTC)
 *
 * The simulated driver backs device memory with host memory and refuses any copy or memset
 * outside an allocation; each kernel launch advances a virtual clock by a synthetic time and
 * events read that clock. Every GEMM launch is checked as the kernels would need it: its grid
 * (tiles x 1 x splits; whole 2-CTA clusters covering every tile for FFN_GEMM_SM90C), the tensor
 * maps of the TMA kinds (A's box half the row tile in a cluster), its operands allocated, split-K partials and tile counters at least as
 * large as the launch needs, rows set. The synthetic times make one candidate the fastest
 * where the tuner can reach it (sm80_32x128x64 with split-K 6: 40 us; the rule's choice 100 us;
 * anything else 130 us; the rule's choice 25 us when launched with L2 warm, i.e. without a
 * write of twice the simulated L2 since the last launch, so a tuner that timed launches back to
 * back would keep it): the tuner must pick exactly it where it is a candidate, keep the
 * rule's choice elsewhere, report every GEMM once, free what it allocated, and save a file per
 * GEMM kernel that a new model (tune_load_model) loads into the same choices; FFNC_NO_TUNE=1
 * loads none, a damaged file is ignored and said. A kernel's identity does not depend on the
 * path the .ffn file was compiled from, and differs between models.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/driver.h"
#include "runtime/rt.h"

#include "check.h"

/* ---- the simulated driver ---- */

typedef struct {
  unsigned char *base;
  size_t size;
} Block;

static Block blocks[256];
static int nblocks, live_blocks;
static double clock_us;
static double event_at[256];
enum { SIM_L2 = 1 << 20 };
static bool l2_cold; /* L2 flushed since the last launch */
static int nevents;
static const Plan *sim_plan; /* the program whose kernels are launched */
static int launches, bad_launches, tma_launches, cluster_launches, all_cluster_launches, mx_launches;
static CUdeviceptr dq_out; /* where the last dequantization (kernel 8) wrote, if it had room */
static bool dq_room;

static const Block *find_block(CUdeviceptr p, size_t n) {
  for (int i = 0; i < nblocks; i++)
    if (blocks[i].base && (uintptr_t)p >= (uintptr_t)blocks[i].base &&
        (uintptr_t)p + n <= (uintptr_t)blocks[i].base + blocks[i].size)
      return &blocks[i];
  return NULL;
}

static CUresult sim_alloc(CUdeviceptr *p, size_t n) {
  if (nblocks == 256)
    return CUDA_ERROR_OUT_OF_MEMORY;
  blocks[nblocks] = (Block){malloc(n), n};
  if (!blocks[nblocks].base)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *p = (CUdeviceptr)(uintptr_t)blocks[nblocks++].base;
  live_blocks++;
  return CUDA_SUCCESS;
}

static CUresult sim_free(CUdeviceptr p) {
  for (int i = 0; i < nblocks; i++)
    if (blocks[i].base && (CUdeviceptr)(uintptr_t)blocks[i].base == p) {
      free(blocks[i].base);
      blocks[i].base = NULL;
      live_blocks--;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;
}

static CUresult sim_htod(CUdeviceptr d, const void *h, size_t n) {
  if (!find_block(d, n))
    return CUDA_ERROR_INVALID_VALUE;
  memcpy((void *)(uintptr_t)d, h, n);
  return CUDA_SUCCESS;
}

static CUresult sim_memset(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  (void)s;
  if (!find_block(d, n))
    return CUDA_ERROR_INVALID_VALUE;
  memset((void *)(uintptr_t)d, v, n);
  return CUDA_SUCCESS;
}

static CUresult sim_memset32(CUdeviceptr d, unsigned v, size_t n, CUstream s) {
  (void)s;
  if (!find_block(d, 4 * n))
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; i++)
    ((unsigned *)(uintptr_t)d)[i] = v;
  l2_cold |= 4 * n >= 2 * (size_t)SIM_L2;
  return CUDA_SUCCESS;
}

static CUresult sim_attr(int *v, CUdevice_attribute a, CUdevice d) {
  (void)d;
  if (a != CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
    return CUDA_ERROR_INVALID_VALUE;
  *v = SIM_L2;
  return CUDA_SUCCESS;
}

/* kernel k variant v is CUfunction 1000 * (k + 1) + v; the row statistics kernel 7, the dequantization 8 */
static CUfunction func_of(int k, int v) { return (CUfunction)(uintptr_t)(1000 * (k + 1) + v); }

static double synthetic_us(const ffn_gemm_config *c, int splits, bool rule) {
  if (strcmp(c->name, "sm80_32x128x64") == 0 && splits == 6)
    return 40;
  return rule ? 100 : 130;
}

/* Tensor maps: the simulated driver keeps what it was asked for in the opaque words (address,
 * K units, rows, box), so that a launch can check them against its arguments. */
static CUresult sim_tmap(CUtensorMap *map, CUtensorMapDataType t, cuuint32_t rank, void *addr, const cuuint64_t *dims,
                         const cuuint64_t *strides, const cuuint32_t *box, const cuuint32_t *estrides,
                         CUtensorMapInterleave il, CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
                         CUtensorMapFloatOOBfill oob) {
  (void)l2, (void)oob;
  if (t != CU_TENSOR_MAP_DATA_TYPE_UINT16 || rank != 2 || ((uintptr_t)addr & 15) || strides[0] != dims[0] * 2 ||
      estrides[0] != 1 || estrides[1] != 1 || il != CU_TENSOR_MAP_INTERLEAVE_NONE || sw != CU_TENSOR_MAP_SWIZZLE_128B ||
      box[0] * 2 != 128 || box[1] > 256)
    return CUDA_ERROR_INVALID_VALUE;
  memset(map, 0, sizeof *map);
  map->opaque[0] = (cuuint64_t)(uintptr_t)addr, map->opaque[1] = dims[0], map->opaque[2] = dims[1];
  map->opaque[3] = box[0], map->opaque[4] = box[1];
  return CUDA_SUCCESS;
}

static bool tmap_ok(const TmaMap *m, const void *addr, int64_t k, int64_t rows, int box_rows) {
  return m->opaque[0] == (cuuint64_t)(uintptr_t)addr && m->opaque[1] == (cuuint64_t)k && m->opaque[2] == (cuuint64_t)rows &&
         m->opaque[4] == (cuuint64_t)box_rows;
}

static CUresult sim_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                           unsigned smem, CUstream s, void **params, void **extra) {
  (void)by, (void)bz, (void)s, (void)extra;
  uintptr_t id = (uintptr_t)f;
  if (id == 7) /* row statistics: free */
    return CUDA_SUCCESS;
  if (id == 8) { /* quantized weights as bf16 [R, K] (a dq variant's), free as well: into an allocation that holds them */
    dq_out = *(CUdeviceptr *)params[2];
    dq_room = find_block(dq_out, (size_t)*(long long *)params[3] * (size_t)*(long long *)params[4] * 2) != NULL;
    return CUDA_SUCCESS;
  }
  int k = (int)(id / 1000) - 1, v = (int)(id % 1000);
  if (k < 0 || k >= sim_plan->nkernels || v >= sim_plan->kernels[k].nvariants)
    return CUDA_ERROR_INVALID_HANDLE;
  const PlanKernel *pk = &sim_plan->kernels[k];
  const KernelVariant *kv = &pk->variants[v];
  const KArgs *a = params[0];
  int M = (int)a->m, N = (int)pk->n, S = pk->streams;
  launches++;
  /* what the kernels need: the grid, threads, operands, partials, counters */
  unsigned grid[3];
  ffn_gemm_launch_grid(&kv->cfg, M, N, S, a->splits, 132, grid);
  bool ok = gx == grid[0] && gy == grid[1] && gz == grid[2] && a->splits >= 1 &&
            bx == (unsigned)kv->threads && smem == (unsigned)kv->smem && M >= 1;
  /* the operands: the model's weights, or an allocation of the tensor's size at M rows (every
   * dim of these models is the token count) */
  int step = 0;
  while (sim_plan->steps[step].kind != STEP_LAUNCH || sim_plan->steps[step].kernel != k)
    step++;
  const PlanStep *ps = &sim_plan->steps[step];
  int64_t dims[64];
  for (int d = 0; d < sim_plan->ndims; d++)
    dims[d] = M;
  for (int j = 0; j < ps->nargs; j++) {
    const PlanTensor *pt = &sim_plan->tensors[ps->args[j]];
    size_t bytes = dtype_bytes(pt->dtype, (size_t)plan_numel(sim_plan, ps->args[j], dims));
    ok &= a->p[j] != NULL;
    if (pt->kind != PT_WEIGHT && pt->kind != PT_DERIVED)
      ok &= find_block((CUdeviceptr)(uintptr_t)a->p[j], bytes) != NULL;
  }
  size_t ws = ffn_gemm_ws_floats(&kv->cfg, M, N, S, a->splits) * 4,
         tiles = (size_t)ffn_gemm_num_tiles(&kv->cfg, M, N, S) * 4;
  ok &= ws == 0 || find_block((CUdeviceptr)(uintptr_t)a->ws, ws) != NULL;
  ok &= find_block((CUdeviceptr)(uintptr_t)a->counters, tiles) != NULL;
  ok &= !kv->ext_stats || find_block((CUdeviceptr)(uintptr_t)a->rowstats, (size_t)M * 8) != NULL;
  /* a dq variant reads the weights the dequantization just wrote, in room for all of them */
  ok &= !kv->dq || (dq_room && a->p[1] == (void *)(uintptr_t)dq_out);
  dq_out = 0, dq_room = false;
  bool cluster = kv->cfg.kind == FFN_GEMM_SM90C; /* 2-CTA clusters, each CTA loading half of A's rows */
  if (kv->cfg.kind == FFN_GEMM_SM90T || kv->cfg.kind == FFN_GEMM_SM90P || cluster) { /* A's and B's tensor maps, as the kernel will read them */
    const TmaMaps *t = params[1];
    ok &= tmap_ok(&t->a, a->p[0], pk->k, M, cluster ? kv->cfg.bm / 2 : kv->cfg.bm);
    if (kv->mx) { /* a mixed-input tile copies B's codes without a map: none, and codes and scales as operands */
      static const TmaMap none;
      ok &= memcmp(&t->b, &none, sizeof none) == 0 && pk->wq_bits && ps->nargs >= 3 && !kv->dq;
      mx_launches++;
    } else
      ok &= tmap_ok(&t->b, a->p[1], pk->k, (int64_t)S * N, kv->cfg.bn);
    tma_launches++;
  }
  if (cluster) { /* pairs of CTAs, one per column tile and the last pair padded */
    long tiles_n = ffn_gemm_tiles_n(&kv->cfg, N, S);
    ok &= gx % 2 == 0 && gx == 2 * ((tiles_n + 1) / 2) * ffn_gemm_tiles_m(&kv->cfg, M);
    cluster_launches++;
  }
  if (!ok && bad_launches++ < 5)
    fprintf(stderr, "bad launch of k%d %s: M %d splits %d grid %u,%u,%u\n", k, kv->cfg.name, M, a->splits, gx, gy, gz);
  LaunchChoice rule = exec_heuristic(pk, M, 132, 0);
  bool is_rule = rule.v == kv && rule.splits == a->splits;
  clock_us += is_rule && !l2_cold ? 25 : synthetic_us(&kv->cfg, a->splits, is_rule);
  l2_cold = false;
  return CUDA_SUCCESS;
}

static CUresult sim_ok_ctx(CUcontext c) { (void)c; return CUDA_SUCCESS; }
static CUresult sim_pop(CUcontext *c) { *c = NULL; return CUDA_SUCCESS; }
static CUresult sim_stream_create(CUstream *s, unsigned flags) {
  (void)flags;
  *s = (CUstream)(uintptr_t)0x5;
  return CUDA_SUCCESS;
}
static CUresult sim_stream(CUstream s) { (void)s; return CUDA_SUCCESS; }
static CUresult sim_event_create(CUevent *e, unsigned flags) {
  (void)flags;
  if (nevents == 256)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *e = (CUevent)(uintptr_t)(++nevents);
  return CUDA_SUCCESS;
}
static CUresult sim_event(CUevent e) { (void)e; return CUDA_SUCCESS; }
static CUresult sim_record(CUevent e, CUstream s) {
  (void)s;
  event_at[(uintptr_t)e - 1] = clock_us;
  return CUDA_SUCCESS;
}
static CUresult sim_elapsed(float *ms, CUevent a, CUevent b) {
  *ms = (float)((event_at[(uintptr_t)b - 1] - event_at[(uintptr_t)a - 1]) / 1000.0);
  return CUDA_SUCCESS;
}
static CUresult sim_name(char *name, int len, CUdevice d) {
  (void)d;
  snprintf(name, (size_t)len, "Simulated H200");
  return CUDA_SUCCESS;
}
static CUresult sim_error_text(CUresult r, const char **s) {
  (void)r;
  *s = "simulated error";
  return CUDA_SUCCESS;
}

static CuApi sim_api(void) {
  CuApi cu = {0};
  cu.cuCtxPushCurrent = sim_ok_ctx;
  cu.cuCtxPopCurrent = sim_pop;
  cu.cuStreamCreate = sim_stream_create;
  cu.cuStreamDestroy = sim_stream;
  cu.cuStreamSynchronize = sim_stream;
  cu.cuEventCreate = sim_event_create;
  cu.cuEventDestroy = sim_event;
  cu.cuEventSynchronize = sim_event;
  cu.cuEventRecord = sim_record;
  cu.cuEventElapsedTime = sim_elapsed;
  cu.cuMemAlloc = sim_alloc;
  cu.cuMemFree = sim_free;
  cu.cuMemcpyHtoD = sim_htod;
  cu.cuMemsetD8Async = sim_memset;
  cu.cuMemsetD32Async = sim_memset32;
  cu.cuDeviceGetAttribute = sim_attr;
  cu.cuLaunchKernel = sim_launch;
  cu.cuTensorMapEncodeTiled = sim_tmap;
  cu.cuDeviceGetName = sim_name;
  cu.cuGetErrorName = sim_error_text;
  cu.cuGetErrorString = sim_error_text;
  cu.version = 13000;
  return cu;
}

/* ---- a model on the simulated device ---- */

static ffn_model *sim_model(const ffn_program *prog, const CuApi *cu) {
  const Plan *p = prog->plan;
  ffn_model *m = calloc(1, sizeof *m);
  m->prog = prog, m->cu = cu, m->sms = 132, m->ctx = (CUcontext)(uintptr_t)0x1, m->prepared = true;
  m->tensor = calloc((size_t)p->ntensors + 1, sizeof *m->tensor);
  m->func_base = calloc((size_t)p->nkernels + 1, sizeof(int));
  int nf = 0;
  for (int k = 0; k < p->nkernels; k++)
    m->func_base[k] = nf, nf += p->kernels[k].nvariants;
  m->funcs = calloc((size_t)nf + 1, sizeof(CUfunction));
  for (int k = 0; k < p->nkernels; k++)
    for (int v = 0; v < p->kernels[k].nvariants; v++)
      m->funcs[m->func_base[k] + v] = func_of(k, v);
  m->row_stats = (CUfunction)(uintptr_t)7;
  m->wq_dequant = (CUfunction)(uintptr_t)8;
  for (int t = 0; t < p->ntensors; t++) /* weights and load-time results: the model's, a byte each */
    if (p->tensors[t].kind == PT_WEIGHT || p->tensors[t].kind == PT_DERIVED)
      m->tensor[t] = (CUdeviceptr)(uintptr_t)malloc(1);
  pthread_mutex_init(&m->lock, NULL);
  return m;
}

static void sim_model_free(ffn_model *m) {
  for (int t = 0; t < m->prog->plan->ntensors; t++)
    free((void *)(uintptr_t)m->tensor[t]);
  free(m->tensor), free(m->func_base), free(m->funcs), free(m->tuned);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

/* ---- the checks ---- */

static int progress_calls, progress_bad;

static bool near(double a, double b) { return fabs(a - b) < 1e-3 * b; }

static void on_progress(void *user, const ffn_tune_progress *p) {
  const ffn_model *m = user;
  const Plan *plan = m->prog->plan;
  progress_calls++;
  int k = atoi(p->kernel + 1);
  CHECK(p->kernel[0] == 'k' && k >= 0 && k < plan->nkernels && plan->kernels[k].kind == KK_GEMM, "kernel %s",
        p->kernel);
  for (int b = 0; b < p->nbuckets; b++) {
    const PlanKernel *pk = &plan->kernels[k];
    LaunchChoice rule = exec_heuristic(pk, p->rows[b], m->sms, m->dram_gbs);
    bool special = strcmp(p->config[b], "sm80_32x128x64") == 0 && p->splits[b] == 6;
    bool is_rule = strcmp(p->config[b], rule.v->cfg.name) == 0 && p->splits[b] == rule.splits;
    /* the special candidate, where it is one, else the rule's choice, each at its time */
    bool reachable = false;
    for (int v = 0; v < pk->nvariants; v++)
      if (strcmp(pk->variants[v].cfg.name, "sm80_32x128x64") == 0) {
        const ffn_gemm_config *c = &pk->variants[v].cfg;
        long tiles = ffn_gemm_num_tiles(c, (int)p->rows[b], (int)pk->n, pk->streams);
        int ktiles = (int)((pk->k + c->bk - 1) / c->bk);
        reachable = pk->splittable && ktiles / 6 >= 4 && tiles * 6 <= 2L * 132 * c->ctas_per_sm;
      }
    /* (times through the events' float milliseconds: equal to 1e-3) */
    if (special != reachable || (special ? !near(p->us[b], 40) : !is_rule || !near(p->us[b], 100)) ||
        !near(p->default_us[b], 100)) {
      progress_bad++;
      printf("k%d at %lld rows: %s/%d %.1f us (rule %s/%d %.1f us), special reachable %d\n", k, (long long)p->rows[b],
             p->config[b], p->splits[b], p->us[b], rule.v->cfg.name, rule.splits, p->default_us[b], reachable);
    }
  }
}

static int tune_files(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    size_t l = strlen(e->d_name);
    n += strncmp(e->d_name, "tune-", 5) == 0 && l > 9 && strcmp(e->d_name + l - 4, ".txt") == 0;
  }
  if (d)
    closedir(d);
  return n;
}

static void check_model(const char *path, const char *dir) {
  char *text, err[512];
  size_t len;
  CHECK(read_file(path, &text, &len, err, sizeof err) == 0, "%s", err);
  Diags d;
  diags_init(&d);
  DriverOptions o = {.sm = 90, .opt_level = 3};
  Plan *plan = NULL;
  CHECK(driver_compile(text, len, path, &o, &d, &plan, NULL) == 0, "%s", d.text ? d.text : "");
  ffn_program prog = {.plan = plan};
  sim_plan = plan;
  int gemms = 0;
  for (int k = 0; k < plan->nkernels; k++)
    gemms += plan->kernels[k].kind == KK_GEMM;
  CuApi cu = sim_api();
  ffn_model *m = sim_model(&prog, &cu);
  int files_before = tune_files(dir), blocks_before = live_blocks;
  progress_calls = progress_bad = launches = bad_launches = tma_launches = cluster_launches = mx_launches = nevents = 0;
  static const int64_t rows[] = {1, 16, 64, 128, 1000, 2048}; /* host memory backs the operands */
  /* refused before anything runs: bad row counts, too many, a model not prepared */
  static const int64_t zero[] = {16, 0}, huge[] = {1, 2147483648LL};
  CHECK(ffn_model_tune(NULL, rows, 6, NULL, NULL) == FFN_ERR_INVALID_ARGUMENT, "NULL model");
  CHECK(ffn_model_tune(m, zero, 2, NULL, NULL) == FFN_ERR_INVALID_ARGUMENT, "0 rows");
  CHECK(ffn_model_tune(m, huge, 2, NULL, NULL) == FFN_ERR_INVALID_ARGUMENT, "2^31 rows");
  CHECK(ffn_model_tune(m, rows, 33, NULL, NULL) == FFN_ERR_INVALID_ARGUMENT, "33 row counts");
  m->prepared = false;
  CHECK(ffn_model_tune(m, rows, 6, NULL, NULL) == FFN_ERR_INVALID_ARGUMENT &&
        strstr(ffn_last_error(), "ffn_model_prepare"), "%s", ffn_last_error());
  m->prepared = true;
  CHECK(launches == 0 && live_blocks == blocks_before, "something ran");
  ffn_status s = ffn_model_tune(m, rows, 6, on_progress, m);
  CHECK(s == FFN_OK, "%s: tune: %s", path, ffn_last_error());
  printf("%s: %d GEMM kernels, %d launches; %s\n", path, gemms, launches, ffn_model_tuning(m));
  CHECK(progress_calls == gemms && progress_bad == 0, "%s: %d progress calls, %d wrong choices", path, progress_calls,
        progress_bad);
  CHECK(launches > 0 && bad_launches == 0, "%s: %d of %d launches wrong", path, bad_launches, launches);
  int tma_variants = 0, cluster_variants = 0, mx_variants = 0;
  for (int k = 0; k < plan->nkernels; k++)
    for (int v = 0; v < plan->kernels[k].nvariants; v++) {
      tma_variants += plan->kernels[k].variants[v].cfg.kind == FFN_GEMM_SM90T;
      cluster_variants += plan->kernels[k].variants[v].cfg.kind == FFN_GEMM_SM90C;
      mx_variants += plan->kernels[k].variants[v].mx;
    }
  CHECK((mx_variants > 0) == (mx_launches > 0), "%s: %d mixed-input kernels, %d launches of them", path, mx_variants,
        mx_launches);
  CHECK((tma_variants > 0) == (tma_launches > 0), "%s: %d TMA kernels, %d launches of them", path, tma_variants,
        tma_launches);
  CHECK((cluster_variants > 0) == (cluster_launches > 0), "%s: %d clustered kernels, %d launches of them", path,
        cluster_variants, cluster_launches);
  all_cluster_launches += cluster_launches;
  CHECK(live_blocks == blocks_before, "%s: %d device allocations left", path, live_blocks - blocks_before);
  /* a file per GEMM kernel (two models may share a kernel, and then its file: without images
   * here, llama3_8b_layer and llama3_8b_4layers do) */
  CHECK(tune_files(dir) <= files_before + gemms, "%s: more files than GEMM kernels", path);
  for (int k = 0; k < plan->nkernels; k++)
    if (plan->kernels[k].kind == KK_GEMM) {
      TuneKey key;
      char file[4096];
      tune_model_key(m, k, &key);
      tune_path(dir, &key, file, sizeof file);
      CHECK(access(file, R_OK) == 0, "%s: no %s for k%d", path, file, k);
    }

  /* a new model loads them into the same choices */
  ffn_model *again = sim_model(&prog, &cu);
  CHECK(tune_load_model(again) == FFN_OK, "%s", ffn_last_error());
  char expect[128];
  snprintf(expect, sizeof expect, "tuned GEMM choices: %d of %d", gemms, gemms);
  CHECK(strstr(again->tuning, expect) != NULL, "%s: %s", path, again->tuning);
  for (int k = 0; k < plan->nkernels; k++)
    if (plan->kernels[k].kind == KK_GEMM)
      CHECK(memcmp(&again->tuned[k], &m->tuned[k], sizeof m->tuned[k]) == 0 && m->tuned[k].n == 6,
            "%s: k%d's choices differ after loading", path, k);
  for (int64_t r = 1; r < 20000; r = r * 2 + 1)
    for (int k = 0; k < plan->nkernels; k++) {
      LaunchChoice a = exec_choose(m, &plan->kernels[k], r), b = exec_choose(again, &plan->kernels[k], r);
      CHECK(a.v == b.v && a.splits == b.splits, "%s: k%d at %lld rows", path, k, (long long)r);
    }
  sim_model_free(again);

  /* FFNC_NO_TUNE=1 */
  setenv("FFNC_NO_TUNE", "1", 1);
  again = sim_model(&prog, &cu);
  CHECK(tune_load_model(again) == FFN_OK && !again->tuned && strstr(again->tuning, "FFNC_NO_TUNE"), "%s",
        again->tuning);
  sim_model_free(again);
  unsetenv("FFNC_NO_TUNE");

  /* one damaged file: ignored, the others loaded */
  int k0 = 0;
  while (plan->kernels[k0].kind != KK_GEMM)
    k0++;
  TuneKey key;
  char file[4096];
  tune_model_key(m, k0, &key);
  tune_path(dir, &key, file, sizeof file);
  FILE *f = fopen(file, "r+b");
  CHECK(f && fseek(f, -3, SEEK_END) == 0 && fputc('x', f) != EOF, "%s", file);
  if (f)
    fclose(f);
  again = sim_model(&prog, &cu);
  CHECK(tune_load_model(again) == FFN_OK, "%s", ffn_last_error());
  snprintf(expect, sizeof expect, "tuned GEMM choices: %d of %d", gemms - 1, gemms);
  CHECK(strstr(again->tuning, expect) && strstr(again->tuning, "ignored: ") && again->tuned[k0].n == 0, "%s",
        again->tuning);
  printf("  damaged: %s\n", again->tuning);
  sim_model_free(again);
  sim_model_free(m);
  plan_destroy(plan);
  diags_free(&d);
  free(text);
}

static Plan *plan_of(const char *path) {
  char *text, err[512];
  size_t len;
  Plan *plan = NULL;
  if (read_file(path, &text, &len, err, sizeof err) != 0)
    return NULL;
  Diags d;
  diags_init(&d);
  DriverOptions o = {.sm = 90, .opt_level = 3};
  driver_compile(text, len, path, &o, &d, &plan, NULL);
  diags_free(&d);
  free(text);
  return plan;
}

/* A kernel's identity is its generated code: the same from another path to the same file (the
 * #line directives and headings name it), another for another model's kernel. */
static void check_identity(const char *root, const char *dir) {
  char a[4096], b[4096], c[4096], cmd[9000], id_a[33], id_b[33], id_c[33];
  snprintf(a, sizeof a, "%s/examples/llama3_tiny.ffn", root);
  snprintf(b, sizeof b, "%s/copy of llama3_tiny.ffn", dir);
  snprintf(c, sizeof c, "%s/examples/phi3_tiny.ffn", root);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", a, b);
  CHECK(system(cmd) == 0, "%s", cmd);
  Plan *pa = plan_of(a), *pb = plan_of(b), *pc = plan_of(c);
  CHECK(pa && pb && pc && pa->nkernels == pb->nkernels, "plans");
  ffn_program A = {.plan = pa}, B = {.plan = pb}, C = {.plan = pc};
  for (int k = 0; pa && pb && pc && k < pa->nkernels; k++) {
    if (pa->kernels[k].kind != KK_GEMM)
      continue;
    CHECK(strstr(pb->cuda_source, "copy of llama3_tiny") != NULL, "the path is in the source");
    tune_kernel_id(&A, k, id_a);
    tune_kernel_id(&B, k, id_b);
    CHECK(strcmp(id_a, id_b) == 0, "k%d: %s from one path, %s from another", k, id_a, id_b);
    for (int j = 0; j < pc->nkernels; j++)
      if (pc->kernels[j].kind == KK_GEMM) {
        tune_kernel_id(&C, j, id_c);
        CHECK(strcmp(id_a, id_c) != 0, "llama3_tiny's k%d and phi3_tiny's k%d: one identity", k, j);
      }
  }
  plan_destroy(pa), plan_destroy(pb), plan_destroy(pc);
  unlink(b);
}

int main(int argc, char **argv) {
  char dir[] = "/tmp/ffnc-tune-sim-XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  setenv("FFNC_CACHE_DIR", dir, 1); /* before the library first reads it */
  unsetenv("FFNC_NO_CACHE");
  unsetenv("FFNC_NO_TUNE");
  const char *root = getenv("FFNC_SOURCE_DIR");
  check_identity(root ? root : ".", dir);
  for (int i = 1; i < argc; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root ? root : ".", argv[i]);
    check_model(path, dir);
  }
  CHECK(argc < 2 || all_cluster_launches > 0, "no clustered GEMM was launched");
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0, "rm");
  return check_result("tune_sim_test");
}
