/* units.c: a plan's CUDA source cut into the programs NVRTC compiles one by one.
 *
 * Compiled whole, the source of examples/llama3_8b.ffn takes one thread 3.4 s, nearly all of it
 * in NVVM and ptxas on the GEMM entry points (0.2-0.55 s each on sm_90; the front end is 15 ms
 * per program). Compiled apart, they run in parallel (nvrtc.c), and each is a cache entry of its
 * own, so a model that shares a kernel with another finds it there. The units:
 *
 *   the runtime's kernels   runtime.cuh after the element-type codes: text that is the same
 *                           for every program, so one cache entry per arch serves every model;
 *   a GEMM entry point      the prelude (less runtime.cuh), the kernel's heading and epilogue
 *                           functor, and that one entry point;
 *   rowwise kernels         up to ROWWISE_PER_UNIT consecutive ones, each with all its entry
 *                           points (one per form: each is small, and a program costs NVRTC
 *                           about 20 ms however little it holds).
 *
 * The cut follows the layout emit_cuda.c gives the source: the prelude up to the first line
 * "// kernel ...", each kernel from that heading to the next, its entry points at the lines
 * that start `extern "C" __global__`, and no other text after the first one. The whole source
 * stays what `--emit cuda|ptx|cubin` shows.
 */
#include "rt.h"

#include <stdlib.h>
#include <string.h>

#include "../codegen/codegen.h"

enum { ROWWISE_PER_UNIT = 8 };

static const char KERNEL_HEADING[] = "\n// kernel ";
static const char ENTRY[] = "\nextern \"C\" __global__";
static const char RUNTIME_INCLUDE[] = "#include \"runtime.cuh\"\n";

/* Rough compile time, to start the longest first (measured on sm_90: a wgmma GEMM 0.2-0.55 s,
 * the runtime's kernels 0.36 s, an mma.sync or other GEMM 0.2-0.4 s, a rowwise kernel 0.03 s; the
 * wgmma weight gradient, grad_sm90.cuh, counted as a wgmma GEMM). */
static int entry_cost(const char *entry, size_t len) {
  char *text = strndup(entry, len);
  int cost = !text                                                                   ? 1
             : strstr(text, "ffn::gemm_sm90<") || strstr(text, "ffn::matmul_at_sm90<") ? 8
             : strstr(text, "ffn::gemm_")                                               ? 4
                                                                                         : 1;
  free(text);
  return cost;
}
enum { RUNTIME_COST = 6 };

static size_t identifier_length(const char *p) {
  size_t n = 0;
  while (p[n] == '_' || (p[n] >= '0' && p[n] <= '9') || ((p[n] | 32) >= 'a' && (p[n] | 32) <= 'z'))
    n++;
  return n;
}

/* The name of the __global__ function of the entry point at text (just after ENTRY): the
 * identifier before the parameter list, past `void` and the attributes __launch_bounds__(...)
 * and __cluster_dims__(...) (any `__name__(...)`; generated names start with a letter). */
static void entry_name(const char *text, char *name, size_t len) {
  const char *p = strstr(text, "void");
  p = p ? p + 4 : text;
  for (;;) {
    while (*p == ' ')
      p++;
    const char *close = strchr(p, ')');
    if (strncmp(p, "__", 2) != 0 || p[identifier_length(p)] != '(' || !close)
      break;
    p = close + 1;
  }
  size_t n = identifier_length(p);
  snprintf(name, len, "%.*s", (int)(n + 1 < len ? n : len - 1), p);
}

typedef struct {
  CompileUnit *u;
  int n, cap;
  bool oom;
} Units;

/* Appends a unit of parts[0..nparts) (text, length pairs) joined. */
static void add_unit(Units *us, const char *name, int cost, const char *const *parts, const size_t *lens, int nparts) {
  if (us->oom)
    return;
  if (us->n == us->cap) {
    int cap = us->cap ? us->cap * 2 : 16;
    CompileUnit *u = realloc(us->u, sizeof *u * (size_t)cap);
    if (!u) {
      us->oom = true;
      return;
    }
    us->u = u, us->cap = cap;
  }
  size_t total = 1;
  for (int i = 0; i < nparts; i++)
    total += lens[i];
  char *src = malloc(total), *nm = strdup(name);
  if (!src || !nm) {
    free(src);
    free(nm);
    us->oom = true;
    return;
  }
  size_t at = 0;
  for (int i = 0; i < nparts; i++) {
    memcpy(src + at, parts[i], lens[i]);
    at += lens[i];
  }
  src[at] = 0;
  us->u[us->n] = (CompileUnit){nm, src, cost, us->n};
  us->n++;
}

/* The element-type codes of the prelude (its "#define " lines), for the runtime's unit: the
 * heading comment names the model, and nothing else there concerns runtime.cuh. */
static char *prelude_defines(const char *prelude, size_t len) {
  char *out = malloc(len + 1);
  size_t n = 0;
  for (const char *p = prelude; out && p < prelude + len;) {
    const char *e = memchr(p, '\n', (size_t)(prelude + len - p));
    size_t l = e ? (size_t)(e - p) + 1 : (size_t)(prelude + len - p);
    if (strncmp(p, "#define ", 8) == 0) {
      memcpy(out + n, p, l);
      n += l;
    }
    p += l;
  }
  if (out)
    out[n] = 0;
  return out;
}

/* The prelude less its runtime.cuh line, for the generated kernels. */
static char *prelude_for_kernels(const char *prelude, size_t len) {
  char *out = strndup(prelude, len);
  char *inc = out ? strstr(out, RUNTIME_INCLUDE) : NULL;
  if (inc)
    memmove(inc, inc + strlen(RUNTIME_INCLUDE), strlen(inc + strlen(RUNTIME_INCLUDE)) + 1);
  return out;
}

/* Rowwise kernels waiting to be one unit: parts[0] is the prelude, then each kernel's text. */
typedef struct {
  const char *parts[1 + ROWWISE_PER_UNIT];
  size_t lens[1 + ROWWISE_PER_UNIT];
  int n;
  char name[256]; /* "k1,k4,k6" */
} Batch;

static void flush_batch(Units *us, Batch *b) {
  if (b->n)
    add_unit(us, b->name, b->n, b->parts, b->lens, 1 + b->n);
  b->n = 0;
  b->name[0] = 0;
}

static int by_cost(const void *a, const void *b) {
  const CompileUnit *x = a, *y = b;
  return x->cost != y->cost ? y->cost - x->cost : x->order - y->order; /* stable */
}

/* The entry point after the one at p, or end */
static const char *next_entry(const char *p, const char *end) {
  const char *q = strstr(p + 1, ENTRY);
  return q && q < end ? q : end;
}

/* Whether every entry point of [e, end) is light (a rowwise kernel: one per form) */
static bool all_light(const char *e, const char *end) {
  for (const char *p = e; p < end; p = next_entry(p, end))
    if (entry_cost(p, (size_t)(next_entry(p, end) - p)) != 1)
      return false;
  return true;
}

/* A rowwise kernel [k, end), entry points from e, whole into the batch, its entry points' names
 * into the batch's; the batch becomes a unit when full. */
static void batch_kernel(Units *us, Batch *batch, const char *k, const char *e, const char *end) {
  batch->parts[1 + batch->n] = k, batch->lens[1 + batch->n] = (size_t)(end - k);
  for (const char *p = e; p < end; p = next_entry(p, end)) {
    char name[128];
    entry_name(p + strlen(ENTRY), name, sizeof name);
    size_t bl = strlen(batch->name);
    snprintf(batch->name + bl, sizeof batch->name - bl, "%s%s", bl ? "," : "", name);
  }
  if (++batch->n == ROWWISE_PER_UNIT)
    flush_batch(us, batch);
}

/* Each entry point of a GEMM kernel [k, end) a unit of its own: the prelude, the kernel's shared
 * part [k, e) and the entry point. */
static void split_kernel(Units *us, const char *prelude, const char *k, const char *e, const char *end) {
  for (const char *p = e; p < end && !us->oom; p = next_entry(p, end)) {
    const char *q = next_entry(p, end);
    char name[128];
    entry_name(p + strlen(ENTRY), name, sizeof name);
    const char *parts[] = {prelude, k, p};
    size_t lens[] = {strlen(prelude), (size_t)(e - k), (size_t)(q - p)};
    add_unit(us, name, entry_cost(p, (size_t)(q - p)), parts, lens, 3);
  }
}

int compile_units(const char *source, CompileUnit **out) {
  Units us = {0};
  const char *first = strstr(source, KERNEL_HEADING);
  size_t plen = first ? (size_t)(first - source) + 1 : strlen(source); /* with the newline */
  char *defines = prelude_defines(source, plen), *prelude = prelude_for_kernels(source, plen);
  if (!defines || !prelude)
    us.oom = true;
  else {
    const char *parts[] = {"// ffnc: the runtime's kernels (runtime/units.c)\n", defines, RUNTIME_INCLUDE};
    size_t lens[] = {strlen(parts[0]), strlen(defines), strlen(RUNTIME_INCLUDE)};
    add_unit(&us, "runtime", RUNTIME_COST, parts, lens, 3);
  }
  Batch batch = {.parts = {prelude}, .lens = {prelude ? strlen(prelude) : 0}};
  for (const char *k = first; k && !us.oom;) {
    const char *next = strstr(k + 1, KERNEL_HEADING);
    const char *end = next ? next : k + strlen(k);
    const char *e = next_entry(k, end); /* the shared part (heading, functor) ends at the first entry point */
    if (e < end && all_light(e, end))
      batch_kernel(&us, &batch, k, e, end);
    else
      split_kernel(&us, prelude, k, e, end);
    k = next;
  }
  flush_batch(&us, &batch);
  free(defines);
  free(prelude);
  if (us.oom) {
    compile_units_free(us.u, us.n);
    *out = NULL;
    return -1;
  }
  qsort(us.u, (size_t)us.n, sizeof *us.u, by_cost);
  *out = us.u;
  return us.n;
}

void compile_units_free(CompileUnit *u, int n) {
  for (int i = 0; u && i < n; i++) {
    free(u[i].name);
    free(u[i].source);
  }
  free(u);
}
