/* api.c: the public C API (include/ffn.h): options, programs, models, errors. */
#include "rt.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../codegen/driver.h"
#include "../ir/dims.h"
#include "dlpack_dtype.h"
#include "safetensors.h"

/* ---- errors ---- */

static __thread char last_error[16384];

ffn_status rt_error(ffn_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return s;
}

const char *ffn_last_error(void) { return last_error; }

const char *ffn_status_string(ffn_status s) {
  switch (s) {
  case FFN_OK: return "ok";
  case FFN_ERR_INVALID_ARGUMENT: return "invalid argument";
  case FFN_ERR_SOURCE: return "errors in the model source";
  case FFN_ERR_TENSOR: return "missing or mismatched tensor";
  case FFN_ERR_IO: return "file could not be read or written";
  case FFN_ERR_UNSUPPORTED: return "not supported for this target";
  case FFN_ERR_NO_COMPILER: return "NVRTC not available";
  case FFN_ERR_COMPILE: return "generated code failed to compile";
  case FFN_ERR_NO_DEVICE: return "no CUDA device";
  case FFN_ERR_CUDA: return "CUDA driver error";
  case FFN_ERR_OUT_OF_MEMORY: return "out of memory";
  }
  return "unknown status";
}

#define ARG(cond, what)                                                       \
  do {                                                                        \
    if (!(cond))                                                              \
      return rt_error(FFN_ERR_INVALID_ARGUMENT, "%s: %s", __func__, what);     \
  } while (0)

/* ---- options ---- */

struct ffn_options {
  char arch[16];
  int opt_level;
  PrecOverride prec[PREC_COUNT];
  int nprec;
  FuseRequest fuse[16];
  int nfuse;
  int tp, tp_rank;
  bool grad; /* the backward graph */
  ffn_grad_policy policy;
  ffn_progress_fn progress;
  void *progress_user;
};

ffn_status ffn_options_create(ffn_options **out) {
  ARG(out, "out is NULL");
  *out = calloc(1, sizeof **out);
  if (!*out)
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  (*out)->opt_level = 3;
  return FFN_OK;
}

void ffn_options_destroy(ffn_options *o) { free(o); }

ffn_status ffn_options_set_arch(ffn_options *o, const char *arch) {
  ARG(o && arch, "NULL argument");
  int sm;
  char err[256];
  if (parse_arch(arch, &sm, err, sizeof err) != 0)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "%s", err);
  snprintf(o->arch, sizeof o->arch, "sm_%d", sm);
  return FFN_OK;
}

ffn_status ffn_options_set_precision(ffn_options *o, const char *key, const char *value) {
  ARG(o && key && value, "NULL argument");
  char text[128], err[256];
  snprintf(text, sizeof text, "%s=%s", key, value);
  PrecOverride p;
  if (parse_precision_override(text, &p, err, sizeof err) != 0)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "precision %s: %s", text, err);
  for (int i = 0; i < o->nprec; i++)
    if (o->prec[i].cls == p.cls) {
      o->prec[i] = p;
      return FFN_OK;
    }
  o->prec[o->nprec++] = p;
  return FFN_OK;
}

ffn_status ffn_options_add_ffn_fusion(ffn_options *o, int first, int last) {
  ARG(o, "NULL argument");
  ARG(first >= 0 && last >= first + 2, "FFN Fusion needs at least two sublayers: first >= 0, last >= first + 2");
  ARG(o->nfuse < 16, "too many FFN Fusion requests");
  o->fuse[o->nfuse++] = (FuseRequest){first, last, {0}};
  return FFN_OK;
}

ffn_status ffn_options_set_tensor_parallel(ffn_options *o, int ranks, int rank) {
  ARG(o, "NULL argument");
  ARG(ranks >= 1 && ranks <= 4096, "ranks must be 1..4096");
  ARG(rank >= 0 && rank < ranks, "rank must be 0..ranks-1");
  o->tp = ranks;
  o->tp_rank = rank;
  return FFN_OK;
}

ffn_status ffn_options_set_grad(ffn_options *o, int on) {
  ARG(o, "NULL argument");
  o->grad = on != 0;
  return FFN_OK;
}

ffn_status ffn_options_set_grad_policy(ffn_options *o, ffn_grad_policy policy) {
  ARG(o, "NULL argument");
  ARG(policy == FFN_GRAD_RECOMPUTE || policy == FFN_GRAD_KEEP,
      "policy must be FFN_GRAD_RECOMPUTE (0) or FFN_GRAD_KEEP (1)");
  o->policy = policy;
  return FFN_OK;
}

ffn_status ffn_options_set_opt_level(ffn_options *o, int level) {
  ARG(o && level >= 0 && level <= 3, "level must be 0..3");
  o->opt_level = level;
  return FFN_OK;
}

ffn_status ffn_options_set_progress(ffn_options *o, ffn_progress_fn fn, void *user) {
  ARG(o, "NULL argument");
  o->progress = fn;
  o->progress_user = user;
  return FFN_OK;
}

/* ---- programs ---- */

ffn_status ffn_program_compile(const char *source, size_t len, const char *filename, const ffn_options *opt,
                               ffn_program **out) {
  ARG(source && out, "NULL argument");
  *out = NULL;
  DriverOptions o = {.opt_level = opt ? opt->opt_level : 3};
  if (opt && opt->arch[0])
    parse_arch(opt->arch, &o.sm, NULL, 0);
  else
    o.sm = cu_default_arch();
  if (o.sm < 80)
    return rt_error(FFN_ERR_UNSUPPORTED, "device 0 is sm_%d; ffnc generates code for sm_80 and newer", o.sm);
  if (opt) {
    o.prec = opt->prec, o.nprec = opt->nprec;
    o.fuse = opt->fuse, o.nfuse = opt->nfuse;
    o.tp = opt->tp, o.tp_rank = opt->tp_rank;
    o.grad = opt->grad;
    o.keep = opt->policy == FFN_GRAD_KEEP;
  }
  Diags d;
  diags_init(&d);
  Plan *plan = NULL;
  int rc = driver_compile(source, len, filename ? filename : "<string>", &o, &d, &plan, NULL);
  if (rc != 0) {
    ffn_status s = rt_error(FFN_ERR_SOURCE, "%s", d.text ? d.text : "compilation failed");
    diags_free(&d);
    return s;
  }
  diags_free(&d);
  return program_from_plan(plan, opt, out);
}

ffn_status program_from_plan(Plan *plan, const ffn_options *opt, ffn_program **out) {
  ffn_program *p = calloc(1, sizeof *p);
  if (!p) {
    plan_destroy(plan);
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  p->plan = plan;
  CompileUnit *units = NULL;
  int n = compile_units(plan->cuda_source, &units);
  p->images = n > 0 ? calloc((size_t)n, sizeof *p->images) : NULL;
  ffn_status s = p->images ? FFN_OK : rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  if (s == FFN_OK) {
    p->nimages = n;
    s = nvrtc_compile_units(units, n, plan->arch, opt ? opt->progress : NULL, opt ? opt->progress_user : NULL,
                            p->images);
  }
  compile_units_free(units, n);
  if (s != FFN_OK) {
    ffn_program_destroy(p);
    return s;
  }
  *out = p;
  return FFN_OK;
}

ffn_status ffn_program_compile_file(const char *path, const ffn_options *opt, ffn_program **out) {
  ARG(path && out, "NULL argument");
  char *text, err[512];
  size_t len;
  if (read_file(path, &text, &len, err, sizeof err) != 0)
    return rt_error(FFN_ERR_IO, "%s", err);
  ffn_status s = ffn_program_compile(text, len, path, opt, out);
  free(text);
  return s;
}

void ffn_program_destroy(ffn_program *p) {
  if (!p)
    return;
  plan_destroy(p->plan);
  for (int i = 0; i < p->nimages; i++)
    free(p->images[i].image);
  free(p->images);
  free(p);
}

/* The AOT file: a safetensors file whose metadata holds the plan (ffnc.plan, JSON), the kind of
 * the images (ffnc.image: cubin or ptx) and their number (ffnc.images), with one U8 tensor per
 * image, "image.0" onwards: a CUDA module each. Format 1 had one image, "image". */
#define AOT_FORMAT "ffnc-aot-2"
#define AOT_FORMAT_PREFIX "ffnc-aot-"
enum { AOT_MAX_IMAGES = 65536 };

ffn_status ffn_program_save(const ffn_program *p, const char *path) {
  ARG(p && path, "NULL argument");
  char err[512] = "", count[32];
  char *json = plan_to_json(p->plan);
  StWriter *w = json ? st_writer_create() : NULL;
  if (!w) {
    free(json);
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
  }
  snprintf(count, sizeof count, "%d", p->nimages);
  bool ptx = p->nimages > 0 && p->images[0].ptx;
  int rc = st_writer_meta(w, "ffnc.format", AOT_FORMAT) | st_writer_meta(w, "ffnc.version", FFNC_VERSION) |
           st_writer_meta(w, "ffnc.arch", p->plan->arch) | st_writer_meta(w, "ffnc.image", ptx ? "ptx" : "cubin") |
           st_writer_meta(w, "ffnc.images", count) | st_writer_meta(w, "ffnc.plan", json);
  if (rc != 0)
    snprintf(err, sizeof err, "%s: cannot store the plan", path);
  for (int i = 0; i < p->nimages && rc == 0; i++) {
    char name[32];
    int64_t size = (int64_t)p->images[i].size;
    snprintf(name, sizeof name, "image.%d", i);
    rc = st_writer_add(w, name, DT_U8, 1, &size, p->images[i].image, p->images[i].size, err, sizeof err);
  }
  if (rc == 0)
    rc = st_writer_save(w, path, err, sizeof err);
  st_writer_destroy(w);
  free(json);
  return rc == 0 ? FFN_OK : rt_error(FFN_ERR_IO, "%s", err);
}

/* The images of AOT file f (of this format) into p. */
static ffn_status load_images(const StFile *f, const char *path, ffn_program *p) {
  const char *kind = st_meta_get(f, "ffnc.image"), *count = st_meta_get(f, "ffnc.images");
  char *end = NULL;
  long n = count ? strtol(count, &end, 10) : 0;
  if (!kind || (strcmp(kind, "cubin") != 0 && strcmp(kind, "ptx") != 0) || !count || *end || n < 1 ||
      n > AOT_MAX_IMAGES)
    return rt_error(FFN_ERR_IO, "%s: incomplete AOT file (needs ffnc.image = cubin or ptx and ffnc.images = 1..%d)",
                    path, AOT_MAX_IMAGES);
  if (!(p->images = calloc((size_t)n, sizeof *p->images)))
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
  p->nimages = (int)n;
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "image.%d", i);
    const StTensor *img = st_find(f, name);
    if (!img || img->dtype != DT_U8 || img->rank != 1 || img->nbytes == 0)
      return rt_error(FFN_ERR_IO, "%s: incomplete AOT file (needs a non-empty U8 tensor '%s')", path, name);
    Image *im = &p->images[i];
    if (!(im->image = malloc(img->nbytes + 1)))
      return rt_error(FFN_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
    im->size = img->nbytes;
    im->ptx = strcmp(kind, "ptx") == 0;
    memcpy(im->image, img->data, img->nbytes);
    ((char *)im->image)[img->nbytes] = 0; /* PTX is then a C string */
  }
  return FFN_OK;
}

ffn_status ffn_program_load(const char *path, ffn_program **out) {
  ARG(path && out, "NULL argument");
  *out = NULL;
  char err[512];
  StFile *f = st_open(path, err, sizeof err);
  if (!f)
    return rt_error(FFN_ERR_IO, "%s", err);
  /* ffnc.version is informative: whether the file fits this ffnc is the format and the plan's
   * ABI hash */
  const char *fmt = st_meta_get(f, "ffnc.format"), *json = st_meta_get(f, "ffnc.plan");
  ffn_status s = FFN_OK;
  if (fmt && strncmp(fmt, AOT_FORMAT_PREFIX, strlen(AOT_FORMAT_PREFIX)) == 0 && strcmp(fmt, AOT_FORMAT) != 0)
    s = rt_error(FFN_ERR_IO, "%s: built by an incompatible ffnc (AOT format %.32s, this ffnc reads %s): rebuild it with "
                 "`ffnc build`", path, fmt, AOT_FORMAT);
  else if (!fmt || strcmp(fmt, AOT_FORMAT) != 0)
    s = rt_error(FFN_ERR_IO, "%s: not an ffnc AOT file (no ffnc.format = %s)", path, AOT_FORMAT);
  else if (!json)
    s = rt_error(FFN_ERR_IO, "%s: incomplete AOT file (needs ffnc.plan)", path);
  Plan *plan = NULL;
  if (s == FFN_OK && !(plan = plan_from_json(json, err, sizeof err)))
    s = rt_error(FFN_ERR_IO, "%s: %s", path, err);
  ffn_program *p = NULL;
  if (s == FFN_OK && !(p = calloc(1, sizeof *p))) {
    s = rt_error(FFN_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
    plan_destroy(plan);
  } else if (s == FFN_OK) {
    p->plan = plan;
    s = load_images(f, path, p);
    if (s == FFN_OK)
      *out = p;
    else
      ffn_program_destroy(p);
  }
  st_close(f);
  return s;
}

const char *ffn_program_arch(const ffn_program *p) { return p ? p->plan->arch : NULL; }
int ffn_program_num_kernels(const ffn_program *p) { return p ? p->plan->nkernels : 0; }
int ffn_program_num_inputs(const ffn_program *p) { return p ? p->plan->ninputs : 0; }
int ffn_program_num_outputs(const ffn_program *p) { return p ? p->plan->noutputs : 0; }
int ffn_program_num_load_steps(const ffn_program *p) { return p ? p->plan->nprep : 0; }

static const char *find_name(const Plan *p, PlanTensorKind kind, int index) {
  for (int t = 0; t < p->ntensors; t++)
    if (p->tensors[t].kind == kind && p->tensors[t].index == index)
      return p->tensors[t].name;
  return NULL;
}

const char *ffn_program_input_name(const ffn_program *p, int i) { return p ? find_name(p->plan, PT_INPUT, i) : NULL; }
const char *ffn_program_output_name(const ffn_program *p, int i) { return p ? find_name(p->plan, PT_OUTPUT, i) : NULL; }

static ffn_status tensor_info(const ffn_program *p, PlanTensorKind kind, int i, ffn_tensor_info *out) {
  ARG(p && out, "NULL argument");
  const Plan *plan = p->plan;
  for (int t = 0; t < plan->ntensors; t++) {
    const PlanTensor *pt = &plan->tensors[t];
    if (pt->kind != kind || pt->index != i)
      continue;
    *out = (ffn_tensor_info){.name = pt->name, .ndim = pt->rank};
    if (!dtype_to_dl(pt->dtype, &out->dtype))
      return rt_error(FFN_ERR_UNSUPPORTED, "%s '%s' is %s, which a DLPack tensor cannot hold",
                      kind == PT_INPUT ? "input" : "output", pt->name, dtype_name(pt->dtype));
    for (int d = 0; d < pt->rank && d < 8; d++) {
      out->shape[d] = pt->dims[d].sym >= 0 ? -1 : pt->dims[d].size;
      out->dim_names[d] = pt->dims[d].sym >= 0 ? plan->dim_names[pt->dims[d].sym] : NULL;
    }
    return FFN_OK;
  }
  return rt_error(FFN_ERR_INVALID_ARGUMENT, "the program has no %s %d", kind == PT_INPUT ? "input" : "output", i);
}

ffn_status ffn_program_input_info(const ffn_program *p, int i, ffn_tensor_info *out) {
  return tensor_info(p, PT_INPUT, i, out);
}

ffn_status ffn_program_output_info(const ffn_program *p, int i, ffn_tensor_info *out) {
  return tensor_info(p, PT_OUTPUT, i, out);
}

int ffn_program_num_weights(const ffn_program *p) {
  int n = 0;
  for (int t = 0; p && t < p->plan->ntensors; t++)
    n += p->plan->tensors[t].kind == PT_WEIGHT;
  return n;
}

const char *ffn_program_weight_name(const ffn_program *p, int i) {
  for (int t = 0; p && t < p->plan->ntensors; t++)
    if (p->plan->tensors[t].kind == PT_WEIGHT && i-- == 0)
      return p->plan->tensors[t].name;
  return NULL;
}

/* ---- models ---- */

int ffn_device_count(char *why, size_t why_len) {
  const CuApi *cu = cu_api(why, why_len);
  int n = 0;
  if (cu && cu->cuDeviceGetCount(&n) != CUDA_SUCCESS)
    n = 0;
  return n;
}

/* A hint only: asking the driver for a function a module lacks is an API error that
 * sanitizers report, so find_function asks the modules that hold the name first. */
bool image_names(const Image *im, const char *name) {
  size_t n = strlen(name);
  const char *p = im->image, *end = p + im->size;
  for (; p + n <= end && (p = memchr(p, name[0], (size_t)(end - p))) != NULL && p + n <= end; p++) {
    if (memcmp(p, name, n) != 0)
      continue;
    char before = p == (const char *)im->image ? '\0' : p[-1], after = p + n < end ? p[n] : '\0';
    if ((before == '\0' || before == '.' || before == ' ') && (after == '\0' || after == '('))
      return true;
  }
  return false;
}

/* Function name of the program: it is in one of the modules (a compile unit each); those
 * whose image names it first, then (a hint that missed) the others. */
ffn_status find_function(ffn_model *m, const char *name, CUfunction *f) {
  CUresult r = CUDA_ERROR_NOT_FOUND;
  for (int pass = 0; pass < 2 && r == CUDA_ERROR_NOT_FOUND; pass++)
    for (int i = 0; i < m->nmodules; i++)
      if (image_names(&m->prog->images[i], name) == (pass == 0) &&
          (r = m->cu->cuModuleGetFunction(f, m->modules[i], name)) != CUDA_ERROR_NOT_FOUND)
        break;
  if (r != CUDA_SUCCESS)
    return rt_error(FFN_ERR_IO, "the compiled program has no kernel %s (cuModuleGetFunction: %d)", name, (int)r);
  return FFN_OK;
}

/* Peak DRAM bandwidth in GB/s (double data rate), for the tile rule (exec_heuristic); 0 where the
 * driver does not say (the rule then keeps its default) */
static int dram_gbs(const CuApi *cu, CUdevice dev) {
  int khz = 0, bits = 0;
  if (cu->cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev) != CUDA_SUCCESS ||
      cu->cuDeviceGetAttribute(&bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev) != CUDA_SUCCESS)
    return 0;
  return (int)(2.0 * khz * 1e3 * (bits / 8) / 1e9);
}

static ffn_status load_module(ffn_model *m) {
  const CuApi *cu = m->cu;
  const ffn_program *prog = m->prog;
  const Plan *p = prog->plan;
  int major, minor;
  CU_CHECK(cu, cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, m->dev));
  CU_CHECK(cu, cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, m->dev));
  CU_CHECK(cu, cu->cuDeviceGetAttribute(&m->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, m->dev));
  m->dram_gbs = dram_gbs(cu, m->dev);
  int target = atoi(p->arch + 3);
  const char *pdl = getenv("FFNC_PDL");
  m->pdl = target >= FFN_PDL_MIN_ARCH && major * 10 + minor >= FFN_PDL_MIN_ARCH && !(pdl && strcmp(pdl, "0") == 0);
  /* a cubin runs on its own major version at an equal or higher minor */
  for (int i = 0; i < prog->nimages; i++)
    if (!prog->images[i].ptx && (target / 10 != major || target % 10 > minor))
      return rt_error(FFN_ERR_UNSUPPORTED,
                      "the program was compiled for %s but the device is sm_%d%d: compile for sm_%d%d", p->arch, major,
                      minor, major, minor);
  if (!(m->modules = calloc((size_t)prog->nimages + 1, sizeof *m->modules)))
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  for (; m->nmodules < prog->nimages; m->nmodules++)
    CU_CHECK(cu, cu->cuModuleLoadDataEx(&m->modules[m->nmodules], prog->images[m->nmodules].image, 0, NULL, NULL));
  int nf = 0;
  m->func_base = calloc((size_t)p->nkernels + 1, sizeof(int));
  if (!m->func_base)
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  for (int k = 0; k < p->nkernels; k++) {
    m->func_base[k] = nf;
    nf += p->kernels[k].nvariants;
  }
  m->funcs = calloc((size_t)nf + 1, sizeof(CUfunction));
  if (!m->funcs)
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  ffn_status s;
  for (int k = 0; k < p->nkernels; k++)
    for (int v = 0; v < p->kernels[k].nvariants; v++) {
      const KernelVariant *kv = &p->kernels[k].variants[v];
      CUfunction *f = &m->funcs[m->func_base[k] + v];
      if ((s = find_function(m, kv->func, f)) != FFN_OK)
        return s;
      if (kv->smem > 48 * 1024)
        CU_CHECK(cu, cu->cuFuncSetAttribute(*f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kv->smem));
    }
  struct {
    CUfunction *f;
    const char *name;
  } prep[] = {{&m->prep_fill, "ffn_prep_fill"},           {&m->prep_ewise, "ffn_prep_ewise"},
              {&m->prep_transpose, "ffn_prep_transpose"}, {&m->prep_interleave, "ffn_prep_interleave"},
              {&m->prep_rowsum, "ffn_prep_rowsum"},       {&m->prep_matmul, "ffn_prep_matmul"},
              {&m->prep_wq_scale, "ffn_prep_wq_scale"}, {&m->prep_wq_pack, "ffn_prep_wq_pack"},
              {&m->prep_f8_scale, "ffn_prep_f8_scale"}, {&m->prep_f8_pack, "ffn_prep_f8_pack"},
              {&m->prep_f8_dequant, "ffn_prep_f8_dequant"},
              {&m->row_stats, "ffn_row_stats"},         {&m->wq_dequant, "ffn_wq_dequant"}};
  for (size_t i = 0; i < sizeof prep / sizeof prep[0]; i++)
    if ((s = find_function(m, prep[i].name, prep[i].f)) != FFN_OK)
      return s;
  return FFN_OK;
}

/* The tuning knobs of the environment, read once a model. */
static void read_knobs(ffn_model *m) {
  /* FFNC_GEMM_VARIANT=CONFIG (a name in kernels/gemm_host.h) forces that tile configuration
   * wherever a GEMM has it */
  const char *force = getenv("FFNC_GEMM_VARIANT");
  snprintf(m->gemm_variant, sizeof m->gemm_variant, "%s", force ? force : "");
  /* FFNC_GEMM_SPLITS=N (1..32) forces that split-K wherever a GEMM can split */
  const char *splits = getenv("FFNC_GEMM_SPLITS");
  m->gemm_splits = splits ? atoi(splits) : 0;
  if (m->gemm_splits < 0 || m->gemm_splits > 32)
    m->gemm_splits = 0;
  /* A/B of the row-block pipeline (rt.h): FFNC_TP_OVERLAP=0 turns it off, FFNC_TP_BLOCKS=N
   * (1..TP_MAX_BLOCKS) forces N blocks on every call that can be cut, tensor parallel or not */
  const char *overlap = getenv("FFNC_TP_OVERLAP"), *blocks = getenv("FFNC_TP_BLOCKS");
  m->tp_blocks = blocks ? atoi(blocks) : 0;
  if (m->tp_blocks < 0 || m->tp_blocks > TP_MAX_BLOCKS)
    m->tp_blocks = 0;
  if (overlap && strcmp(overlap, "0") == 0)
    m->tp_blocks = -1;
  /* FFNC_WGRAD=mma runs the weight gradients of sm_90 plans on mma.sync (grad.cuh: matmul_at_tc)
   * instead of wgmma (grad_sm90.cuh), for comparison; any other value: the default */
  const char *wgrad = getenv("FFNC_WGRAD");
  m->wgrad_mma = wgrad && strcmp(wgrad, "mma") == 0;
  /* FFNC_WQ_DEQUANT=0: weight-only quantized products keep their own kernels at every row count
   * (no bf16 copy of a product's weights in the workspace; plan.h: KernelVariant.dq) */
  const char *dq = getenv("FFNC_WQ_DEQUANT");
  m->no_dq = dq && strcmp(dq, "0") == 0;
  const char *mx = getenv("FFNC_WQ_MIX"); /* the dq variants where a mixed-input one would run */
  m->no_mx = (mx && strcmp(mx, "0") == 0) || m->no_dq;
}

/* A tensor-parallel rank's plan narrowed to its slices (the same tensors and kernels: only
 * weight shapes and slices differ), and what the plan's shape tells the runtime. */
static ffn_status narrow_plan(ffn_model *m, const ffn_program *prog) {
  Plan *narrow = NULL;
  ffn_status s = tp_narrow_plan(prog->plan, &narrow, &m->window);
  if (s != FFN_OK)
    return s;
  if (narrow) {
    if (!(m->narrowed = calloc(1, sizeof *m->narrowed))) {
      plan_destroy(narrow);
      return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    *m->narrowed = (ffn_program){narrow, prog->images, prog->nimages};
    m->prog = m->narrowed;
  }
  m->row_dim = tp_row_dim(m->prog->plan);
  for (int i = 0; i < m->prog->plan->nsteps; i++)
    m->reduces |= m->prog->plan->steps[i].kind == STEP_ALLREDUCE;
  return FFN_OK;
}

/* The device's primary context, and in it the kernels, the `ffnc tune` choices and the pool. */
static ffn_status open_device(ffn_model *m) {
  const CuApi *cu = m->cu;
  CUresult r = cu->cuDeviceGet(&m->dev, m->device);
  if (r != CUDA_SUCCESS)
    return cu_fail(cu, r, "cu->cuDeviceGet()");
  if ((r = cu->cuDevicePrimaryCtxRetain(&m->ctx, m->dev)) != CUDA_SUCCESS) {
    m->ctx = NULL;
    return cu_fail(cu, r, "cu->cuDevicePrimaryCtxRetain()");
  }
  if ((r = cu->cuCtxPushCurrent(m->ctx)) != CUDA_SUCCESS)
    return cu_fail(cu, r, "cu->cuCtxPushCurrent()");
  ffn_status s = load_module(m);
  if (s == FFN_OK)
    s = tune_load_model(m);
  if (s == FFN_OK && !(m->pool = pool_create(cu, m->ctx)))
    s = FFN_ERR_OUT_OF_MEMORY; /* pool_create said why */
  CUcontext c;
  if ((r = cu->cuCtxPopCurrent(&c)) != CUDA_SUCCESS && s == FFN_OK)
    s = cu_fail(cu, r, "cu->cuCtxPopCurrent()");
  return s;
}

ffn_status ffn_model_create(const ffn_program *prog, int device, ffn_model **out) {
  ARG(prog && out, "NULL argument");
  *out = NULL;
  char why[512];
  const CuApi *cu = cu_api(why, sizeof why);
  if (!cu)
    return rt_error(FFN_ERR_NO_DEVICE, "%s", why);
  int count = 0;
  CU_CHECK(cu, cu->cuDeviceGetCount(&count));
  if (device < 0 || device >= count)
    return rt_error(FFN_ERR_NO_DEVICE, "no CUDA device %d (the driver sees %d)", device, count);
  ffn_model *m = calloc(1, sizeof *m);
  if (!m)
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  m->prog = prog;
  m->cu = cu;
  m->device = device;
  pthread_mutex_init(&m->lock, NULL);
  size_t n = (size_t)prog->plan->ntensors + 1;
  m->tensor = calloc(n, sizeof(CUdeviceptr));
  m->owned = calloc(n, sizeof(bool));
  m->consumed = calloc(n, sizeof(bool));
  m->prequant = calloc(n, sizeof(PrequantWeight));
  read_knobs(m);
  ffn_status s = !m->tensor || !m->owned || !m->consumed || !m->prequant
                     ? rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory")
                     : narrow_plan(m, prog);
  if (s == FFN_OK)
    s = open_device(m);
  if (s != FFN_OK) {
    ffn_model_destroy(m);
    return s;
  }
  *out = m;
  return FFN_OK;
}

void ffn_model_destroy(ffn_model *m) {
  if (!m)
    return;
  const CuApi *cu = m->cu;
  if (m->owns_comm) /* after our runs: it waits for their collectives */
    nccl_api(NULL, 0)->CommDestroy(m->comm);
  pool_release(m->pool); /* while the context is ours: the last reference frees its memory */
  if (m->ctx && cu->cuCtxPushCurrent(m->ctx) == CUDA_SUCCESS) {
    for (int t = 0; t < m->prog->plan->ntensors; t++)
      if (m->owned[t] && m->tensor[t])
        cu->cuMemFree(m->tensor[t]);
    for (int i = 0; i < m->nmodules; i++)
      cu->cuModuleUnload(m->modules[i]);
    CUcontext c;
    cu->cuCtxPopCurrent(&c);
    cu->cuDevicePrimaryCtxRelease(m->dev);
  }
  pthread_mutex_destroy(&m->lock);
  free(m->tensor);
  free(m->owned);
  free(m->consumed);
  for (int t = 0; m->prequant && t < m->prog->plan->ntensors; t++)
    prequant_free(&m->prequant[t]);
  free(m->prequant);
  if (m->narrowed) /* its images are the caller's program's */
    plan_destroy(m->narrowed->plan);
  free(m->narrowed);
  free(m->window);
  free(m->tuned);
  free(m->funcs);
  free(m->func_base);
  free(m->modules);
  free(m);
}

ffn_status ffn_model_set_communicator(ffn_model *m, void *nccl_comm) {
  ARG(m, "NULL argument");
  const Plan *p = m->prog->plan;
  if (p->tp <= 1)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_set_communicator: the program is not tensor parallel "
                    "(compile rank R's share with ffn_options_set_tensor_parallel(o, N, R))");
  char why[1024];
  const NcclApi *nccl = nccl_api(why, sizeof why);
  if (!nccl)
    return rt_error(FFN_ERR_UNSUPPORTED, "%s", why);
  NcclComm comm = nccl_comm;
  if (comm) { /* the communicator must be the one this share was compiled for */
    int ranks, rank, device;
    NCCL_CHECK(nccl, nccl->CommCount(comm, &ranks));
    NCCL_CHECK(nccl, nccl->CommUserRank(comm, &rank));
    NCCL_CHECK(nccl, nccl->CommCuDevice(comm, &device));
    if (ranks != p->tp || rank != p->tp_rank)
      return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_set_communicator: the communicator is rank %d of %d, the "
                      "program is rank %d's share over %d ranks", rank, ranks, p->tp_rank, p->tp);
    if (device != m->device)
      return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_set_communicator: the communicator is on CUDA device %d, "
                      "the model on device %d", device, m->device);
  }
  if (m->owns_comm && m->comm != comm)
    NCCL_CHECK(nccl, nccl->CommDestroy(m->comm));
  m->comm = comm;
  m->owns_comm = false;
  return FFN_OK;
}

ffn_status ffn_model_share_workspace(ffn_model *m, ffn_model *with) {
  ARG(m && with, "NULL argument");
  ARG(m != with, "a model cannot share its workspace with itself");
  if (m->ctx != with->ctx) /* a workspace is memory of one context */
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_share_workspace: the models are on different CUDA devices "
                    "(the first on device %d, the second on device %d)", m->device, with->device);
  if (m->pool == with->pool)
    return FFN_OK;
  pool_retain(with->pool);
  pool_release(m->pool); /* waits for m's calls in flight when it frees their workspaces */
  m->pool = with->pool;
  return FFN_OK;
}

size_t model_weight_bytes(const ffn_model *m) {
  const Plan *p = m->prog->plan;
  size_t bytes = 0;
  for (int t = 0; t < p->ntensors; t++)
    if (m->owned[t] && m->tensor[t] && (p->tensors[t].kind == PT_WEIGHT || p->tensors[t].kind == PT_DERIVED))
      bytes += dtype_bytes(p->tensors[t].dtype, (size_t)plan_numel(p, t, NULL));
  return bytes;
}

static int weight_index(const Plan *p, const char *name) {
  for (int t = 0; t < p->ntensors; t++)
    if (p->tensors[t].kind == PT_WEIGHT && strcmp(p->tensors[t].name, name) == 0)
      return t;
  return -1;
}

static void shape_text(const PlanTensor *t, char *buf, size_t len) {
  size_t k = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < t->rank && k < len; d++)
    k += (size_t)snprintf(buf + k, len - k, d ? ", %lld" : "%lld", (long long)t->dims[d].size);
  if (k < len)
    snprintf(buf + k, len - k, "] %s", dtype_name(t->dtype));
}

/* Upload host bytes into a fresh allocation for tensor t (replacing a previous binding). */
static ffn_status upload(ffn_model *m, int t, const void *data, size_t bytes) {
  const CuApi *cu = m->cu;
  if (m->owned[t] && m->tensor[t])
    CU_CHECK(cu, cu->cuMemFree(m->tensor[t]));
  m->tensor[t] = 0;
  m->owned[t] = false;
  m->consumed[t] = false;
  if (!bytes)
    return FFN_OK;
  CU_CHECK(cu, cu->cuMemAlloc(&m->tensor[t], bytes));
  m->owned[t] = true;
  CU_CHECK(cu, cu->cuMemcpyHtoD(m->tensor[t], data, bytes));
  return FFN_OK;
}

/* Weight t as the caller binds it: the whole tensor, also where the model holds a window. */
static PlanTensor whole_weight(const ffn_model *m, int t) {
  PlanTensor pt = m->prog->plan->tensors[t];
  if (m->window && m->window[t].on) {
    pt.dims[0] = dim_static(m->window[t].rows);
    pt.dims[1] = dim_static(m->window[t].cols);
  }
  return pt;
}

/* Uploads weight t from the whole tensor in host memory: its window where it has one. */
static ffn_status upload_weight(ffn_model *m, int t, const void *whole, size_t whole_bytes) {
  const WeightWindow *w = m->window && m->window[t].on ? &m->window[t] : NULL;
  if (!w)
    return upload(m, t, whole, whole_bytes);
  size_t esize = dtype_bytes(m->prog->plan->tensors[t].dtype, 1);
  size_t bytes = (size_t)w->len * (size_t)(w->axis ? w->rows : w->cols) * esize;
  if (w->axis == 0) /* rows: one run of the whole tensor */
    return upload(m, t, (const char *)whole + (size_t)w->off * (size_t)w->cols * esize, bytes);
  void *part = malloc(bytes ? bytes : 1);
  if (!part)
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  window_gather(w, whole, esize, part);
  ffn_status s = upload(m, t, part, bytes);
  free(part);
  return s;
}

/* Weight t's window copied out of the whole tensor in device memory (into our allocation). */
static ffn_status copy_device_window(ffn_model *m, int t, CUdeviceptr whole) {
  const WeightWindow *w = &m->window[t];
  const CuApi *cu = m->cu;
  size_t esize = dtype_bytes(m->prog->plan->tensors[t].dtype, 1);
  size_t out_cols = (size_t)(w->axis ? w->len : w->cols), out_rows = (size_t)(w->axis ? w->rows : w->len);
  if (m->owned[t] && m->tensor[t])
    CU_CHECK(cu, cu->cuMemFree(m->tensor[t]));
  m->tensor[t] = 0;
  m->owned[t] = false;
  m->consumed[t] = false;
  if (!out_cols || !out_rows)
    return FFN_OK;
  CU_CHECK(cu, cu->cuMemAlloc(&m->tensor[t], out_rows * out_cols * esize));
  m->owned[t] = true;
  CUDA_MEMCPY2D c = {0};
  c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = whole;
  c.srcXInBytes = w->axis ? (size_t)w->off * esize : 0;
  c.srcY = w->axis ? 0 : (size_t)w->off;
  c.srcPitch = (size_t)w->cols * esize;
  c.dstDevice = m->tensor[t];
  c.dstPitch = out_cols * esize;
  c.WidthInBytes = out_cols * esize;
  c.Height = out_rows;
  /* on the default stream, as the load-time steps that read it (ffn_model_prepare waits) */
  CU_CHECK(cu, cu->cuMemcpy2DAsync(&c, NULL));
  return FFN_OK;
}

static int lookup_st(void *ctx, const char *name, RawTensor *out) {
  const StTensor *t = st_find((StFile *)ctx, name);
  if (!t)
    return -1;
  *out = (RawTensor){.dtype = t->dtype, .rank = t->rank, .data = t->data, .nbytes = t->nbytes};
  memcpy(out->shape, t->shape, sizeof out->shape);
  return 0;
}

/* A pre-quantized weight: codes and scale read and checked as the reference reads them (one
 * rule, ir/prequant.c); the codes uploaded as the tensor, the scales kept on the host. */
static ffn_status bind_prequant(ffn_model *m, int t, StFile *f, const char *path) {
  const PlanTensor *pt = &m->prog->plan->tensors[t];
  Node w = {.op = OP_WEIGHT, .dtype = DT_F32, .name = pt->name, .stored = pt->stored, .scale = pt->scale};
  w.shape.rank = pt->rank;
  for (int d = 0; d < pt->rank; d++)
    w.shape.d[d] = pt->dims[d];
  RawTensor codes, scale;
  bool have_codes = lookup_st(f, pt->name, &codes) == 0, have_scale = lookup_st(f, pt->scale, &scale) == 0;
  PrequantWeight pw;
  char err[1024];
  if (prequant_read(NULL, &w, have_codes ? &codes : NULL, have_scale ? &scale : NULL, &pw, err, sizeof err) != 0)
    return rt_error(FFN_ERR_TENSOR, "%s: %s", path, err);
  ffn_status s = upload(m, t, codes.data, codes.nbytes);
  pw.codes = NULL; /* the mapping closes; the bytes are at m->tensor[t] */
  prequant_free(&m->prequant[t]);
  m->prequant[t] = pw;
  return s;
}

ffn_status ffn_model_bind_weights_file(ffn_model *m, const char *path) {
  ARG(m && path, "NULL argument");
  char err[512];
  StFile *f = st_open(path, err, sizeof err);
  if (!f)
    return rt_error(FFN_ERR_IO, "%s", err);
  const Plan *p = m->prog->plan;
  ffn_status s = FFN_OK;
  CUresult r = m->cu->cuCtxPushCurrent(m->ctx);
  if (r != CUDA_SUCCESS) {
    st_close(f);
    return cu_fail(m->cu, r, "cu->cuCtxPushCurrent()");
  }
  for (int t = 0; t < p->ntensors && s == FFN_OK; t++) {
    const PlanTensor *pt = &p->tensors[t];
    if (pt->kind != PT_WEIGHT)
      continue;
    if (pt->stored != DT_NONE) {
      s = bind_prequant(m, t, f, path);
      continue;
    }
    const StTensor *st = st_find(f, pt->name);
    if (!st) {
      s = rt_error(FFN_ERR_TENSOR, "%s: missing weight '%s'", path, pt->name);
      break;
    }
    PlanTensor whole = whole_weight(m, t);
    bool same = st->dtype == whole.dtype && st->rank == whole.rank;
    for (int d = 0; same && d < whole.rank; d++)
      same = st->shape[d] == whole.dims[d].size;
    if (!same) {
      char want[128], got[128];
      PlanTensor have = {.dtype = st->dtype, .rank = st->rank};
      for (int d = 0; d < st->rank; d++)
        have.dims[d] = dim_static(st->shape[d]);
      shape_text(&whole, want, sizeof want);
      shape_text(&have, got, sizeof got);
      s = rt_error(FFN_ERR_TENSOR, "%s: weight '%s': expected %s, the file has %s", path, pt->name, want, got);
      break;
    }
    s = upload_weight(m, t, st->data, st->nbytes);
  }
  CUcontext c;
  m->cu->cuCtxPopCurrent(&c);
  st_close(f);
  if (s == FFN_OK)
    m->prepared = false;
  return s;
}

ffn_status ffn_model_bind_weight(ffn_model *m, const char *name, const DLTensor *d) {
  ARG(m && name && d && d->data, "NULL argument");
  const Plan *p = m->prog->plan;
  int t = weight_index(p, name);
  if (t < 0)
    return rt_error(FFN_ERR_TENSOR, "the program reads no weight named '%s'", name);
  PlanTensor whole = whole_weight(m, t);
  const PlanTensor *pt = &whole;
  if (pt->stored != DT_NONE)
    return rt_error(FFN_ERR_UNSUPPORTED, "weight '%s' is pre-quantized (%s codes, scale '%s'): bind it from its "
                    "checkpoint with ffn_model_bind_weights_file; binding codes and scales as DLTensors: not yet",
                    name, dtype_name(pt->stored), pt->scale);
  bool ok = d->ndim == pt->rank && dtype_from_dl(d->dtype, pt->dtype) == pt->dtype;
  int64_t numel = 1;
  for (int i = 0; ok && i < pt->rank; i++) {
    ok = d->shape[i] == pt->dims[i].size;
    numel *= d->shape[i];
  }
  char want[128];
  shape_text(pt, want, sizeof want);
  if (!ok)
    return rt_error(FFN_ERR_TENSOR, "weight '%s': expected %s", name, want);
  if (d->strides) {
    int64_t expect = 1;
    for (int i = pt->rank - 1; i >= 0; i--) {
      if (d->shape[i] > 1 && d->strides[i] != expect)
        return rt_error(FFN_ERR_TENSOR, "weight '%s': must be contiguous row-major", name);
      expect *= d->shape[i];
    }
  }
  const char *data = (const char *)d->data + d->byte_offset;
  size_t bytes = dtype_bytes(pt->dtype, (size_t)numel);
  CUresult r = m->cu->cuCtxPushCurrent(m->ctx);
  if (r != CUDA_SUCCESS)
    return cu_fail(m->cu, r, "cu->cuCtxPushCurrent()");
  ffn_status s = FFN_OK;
  if (d->device.device_type == kDLCPU || d->device.device_type == kDLCUDAHost) {
    s = upload_weight(m, t, data, bytes);
  } else if (d->device.device_type == kDLCUDA) {
    if ((uintptr_t)data % 16)
      s = rt_error(FFN_ERR_INVALID_ARGUMENT, "weight '%s': device data must be 16-byte aligned", name);
    else if (m->window && m->window[t].on)
      s = copy_device_window(m, t, (CUdeviceptr)data);
    else {
      if (m->owned[t] && m->tensor[t])
        m->cu->cuMemFree(m->tensor[t]);
      m->tensor[t] = (CUdeviceptr)data;
      m->owned[t] = false;
      m->consumed[t] = false;
    }
  } else {
    s = rt_error(FFN_ERR_INVALID_ARGUMENT, "weight '%s': device type %d is not supported (kDLCPU or kDLCUDA)", name,
                 (int)d->device.device_type);
  }
  CUcontext c;
  m->cu->cuCtxPopCurrent(&c);
  m->prepared = false;
  return s;
}

ffn_status ffn_model_prepare(ffn_model *m) {
  ARG(m, "NULL argument");
  const Plan *p = m->prog->plan;
  for (int t = 0; t < p->ntensors; t++)
    if (p->tensors[t].kind == PT_WEIGHT && !m->tensor[t] && plan_numel(p, t, NULL) > 0)
      return rt_error(FFN_ERR_TENSOR,
                      m->consumed[t] ? "weight '%s' was released by the previous ffn_model_prepare (only load-time "
                                       "steps read it): bind it again before preparing again"
                                     : "weight '%s' is not bound",
                      p->tensors[t].name);
  CUresult r = m->cu->cuCtxPushCurrent(m->ctx);
  if (r != CUDA_SUCCESS)
    return cu_fail(m->cu, r, "cu->cuCtxPushCurrent()");
  ffn_status s = FFN_OK;
  for (int t = 0; t < p->ntensors && s == FFN_OK; t++) /* derived tensors of an earlier prepare */
    if (p->tensors[t].kind == PT_DERIVED && m->owned[t] && m->tensor[t]) {
      if ((r = m->cu->cuMemFree(m->tensor[t])) != CUDA_SUCCESS)
        s = cu_fail(m->cu, r, "cu->cuMemFree()");
      m->tensor[t] = 0;
      m->owned[t] = false;
    }
  if (s == FFN_OK)
    s = exec_prepare(m);
  CUcontext c;
  m->cu->cuCtxPopCurrent(&c);
  m->prepared = s == FFN_OK;
  return s;
}

ffn_status ffn_model_run(ffn_model *m, struct CUstream_st *stream, const DLTensor *inputs, int ninputs,
                         const DLTensor *outputs, int noutputs) {
  ARG(m && (inputs || ninputs == 0) && outputs, "NULL argument");
  return exec_run(m, (CUstream)stream, inputs, ninputs, outputs, noutputs);
}

static ffn_status bind_dims(const Plan *p, const DLTensor *inputs, int ninputs, int64_t *dims) {
  for (int i = 0; i < p->ndims; i++)
    dims[i] = -1;
  for (int t = 0; t < p->ntensors; t++) {
    const PlanTensor *pt = &p->tensors[t];
    if (pt->kind != PT_INPUT)
      continue;
    int axis;
    DimsResult r = pt->index < ninputs ? dims_bind(pt->dims, pt->rank, inputs[pt->index].ndim, inputs[pt->index].shape,
                                                   dims, true, &axis)
                                       : DIMS_RANK;
    if (r != DIMS_OK) {
      char why[600];
      if (pt->index < ninputs)
        dims_mismatch_str(r, axis, pt->dims, pt->rank, p->dim_names, inputs[pt->index].ndim, inputs[pt->index].shape,
                          dims, why, sizeof why);
      else
        snprintf(why, sizeof why, "not given (%d inputs passed)", ninputs);
      return rt_error(FFN_ERR_TENSOR, "input '%s': %s", pt->name, why);
    }
  }
  for (int i = 0; i < p->ndims; i++)
    if (dims[i] < 0)
      return rt_error(FFN_ERR_TENSOR, "dim %s is not bound by any input", p->dim_names[i]);
  return FFN_OK;
}

ffn_status ffn_model_output_shape(const ffn_model *m, int i, const DLTensor *inputs, int ninputs, int64_t *shape,
                                  int *ndim) {
  ARG(m && shape && ndim, "NULL argument");
  const Plan *p = m->prog->plan;
  ARG(i >= 0 && i < p->noutputs, "output index out of range");
  int64_t dims[64];
  ffn_status s = bind_dims(p, inputs, ninputs, dims);
  if (s != FFN_OK)
    return s;
  for (int t = 0; t < p->ntensors; t++) {
    const PlanTensor *pt = &p->tensors[t];
    if (pt->kind == PT_OUTPUT && pt->index == i) {
      *ndim = pt->rank;
      for (int d = 0; d < pt->rank; d++)
        shape[d] = pt->dims[d].sym >= 0 ? dims[pt->dims[d].sym] : pt->dims[d].size;
      return FFN_OK;
    }
  }
  return rt_error(FFN_ERR_INVALID_ARGUMENT, "output %d is not in the plan", i);
}

static size_t dl_bytes(const DLTensor *t) {
  size_t n = 1;
  for (int d = 0; d < t->ndim; d++)
    n *= (size_t)t->shape[d];
  return n * (size_t)((t->dtype.bits * t->dtype.lanes + 7) / 8);
}

ffn_status ffn_model_run_host(ffn_model *m, const DLTensor *inputs, int ninputs, const DLTensor *outputs, int noutputs) {
  ARG(m && (inputs || !ninputs) && outputs && ninputs >= 0 && noutputs >= 0 && ninputs < 256 && noutputs < 256,
      "bad arguments");
  const CuApi *cu = m->cu;
  CU_CHECK(cu, cu->cuCtxPushCurrent(m->ctx));
  DLTensor *din = calloc((size_t)ninputs + 1, sizeof(DLTensor)), *dout = calloc((size_t)noutputs + 1, sizeof(DLTensor));
  CUstream stream = NULL;
  ffn_status s = din && dout ? FFN_OK : rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  CUresult r = s == FFN_OK ? cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) : CUDA_SUCCESS;
  if (r != CUDA_SUCCESS)
    s = cu_fail(cu, r, "cu->cuStreamCreate()");
  for (int pass = 0; pass < 2 && s == FFN_OK; pass++) {
    int n = pass ? noutputs : ninputs;
    const DLTensor *h = pass ? outputs : inputs;
    DLTensor *d = pass ? dout : din;
    for (int i = 0; i < n && s == FFN_OK; i++) {
      d[i] = h[i];
      d[i].device = (DLDevice){kDLCUDA, 0};
      d[i].byte_offset = 0;
      d[i].strides = NULL;
      CUdeviceptr p = 0;
      size_t bytes = dl_bytes(&h[i]);
      if ((r = cu->cuMemAlloc(&p, bytes ? bytes : 16)) != CUDA_SUCCESS)
        s = cu_fail(cu, r, "cu->cuMemAlloc()");
      d[i].data = (void *)p;
      if (s == FFN_OK && !pass && bytes &&
          (r = cu->cuMemcpyHtoDAsync(p, (const char *)h[i].data + h[i].byte_offset, bytes, stream)) != CUDA_SUCCESS)
        s = cu_fail(cu, r, "cu->cuMemcpyHtoDAsync()");
      if (s == FFN_OK && pass && bytes && (r = cu->cuMemsetD8Async(p, 0xff, bytes, stream)) != CUDA_SUCCESS)
        s = cu_fail(cu, r, "cu->cuMemsetD8Async()"); /* poison: unwritten outputs show as NaN */
    }
  }
  if (s == FFN_OK)
    s = exec_run(m, stream, din, ninputs, dout, noutputs);
  for (int i = 0; i < noutputs && s == FFN_OK; i++) {
    size_t bytes = dl_bytes(&outputs[i]);
    if (bytes && (r = cu->cuMemcpyDtoHAsync((char *)outputs[i].data + outputs[i].byte_offset, (CUdeviceptr)dout[i].data,
                                            bytes, stream)) != CUDA_SUCCESS)
      s = cu_fail(cu, r, "cu->cuMemcpyDtoHAsync()");
  }
  if (stream) {
    r = cu->cuStreamSynchronize(stream);
    if (r != CUDA_SUCCESS && s == FFN_OK)
      s = cu_fail(cu, r, "cu->cuStreamSynchronize()");
    cu->cuStreamDestroy(stream);
  }
  for (int i = 0; din && i < ninputs; i++)
    if (din[i].data)
      cu->cuMemFree((CUdeviceptr)din[i].data);
  for (int i = 0; dout && i < noutputs; i++)
    if (dout[i].data)
      cu->cuMemFree((CUdeviceptr)dout[i].data);
  free(din);
  free(dout);
  CUcontext c;
  cu->cuCtxPopCurrent(&c);
  return s;
}

/* ---- versions ---- */

const char *ffn_version(void) { return FFNC_VERSION; }

#ifndef FFNC_GIT_COMMIT /* set by CMakeLists.txt on this file */
#define FFNC_GIT_COMMIT "unknown"
#endif
const char *ffn_build_info(void) { return FFNC_VERSION " (git " FFNC_GIT_COMMIT ")"; }

void ffn_runtime_versions(char *nvrtc, size_t nvrtc_len, char *driver, size_t driver_len) {
  nvrtc_version(nvrtc, nvrtc_len);
  char why[512];
  const CuApi *cu = cu_api(why, sizeof why);
  if (cu)
    snprintf(driver, driver_len, "%d.%d", cu->version / 1000, cu->version % 1000 / 10);
  else
    snprintf(driver, driver_len, "unavailable (%s)", why);
}
