/* cmd_compare.c: `ffnc compare A.safetensors B.safetensors [--tol X]`: the same tensors, and
 * values within a relative (norm-wise) tolerance. For checking a GPU run against the CPU
 * reference from the shell. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *shape_text(const StTensor *t, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < t->rank && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
  if (used < len)
    snprintf(buf + used, len - used, "]");
  return buf;
}

/* Why y (in B) cannot be compared with x: missing, another dtype, or another shape (the first
 * differing dim, both sizes, both shapes). 0 if it can. */
static int mismatch(const StTensor *x, const StTensor *y, const char *bpath) {
  char sx[200], sy[200];
  int d = 0;
  if (!y)
    return printf("FAIL %s: missing in %s\n", x->name, bpath), 1;
  if (y->dtype != x->dtype)
    return printf("FAIL %s: %s here, %s in %s\n", x->name, dtype_name(x->dtype), dtype_name(y->dtype), bpath), 1;
  while (d < x->rank && d < y->rank && x->shape[d] == y->shape[d])
    d++;
  if (x->rank == y->rank && d == x->rank)
    return 0;
  if (x->rank != y->rank)
    printf("FAIL %s: rank %d %s here, rank %d %s in %s\n", x->name, x->rank, shape_text(x, sx, sizeof sx), y->rank,
           shape_text(y, sy, sizeof sy), bpath);
  else
    printf("FAIL %s: dim %d is %lld here, %lld in %s (%s vs %s)\n", x->name, d, (long long)x->shape[d],
           (long long)y->shape[d], bpath, shape_text(x, sx, sizeof sx), shape_text(y, sy, sizeof sy));
  return 1;
}

static const char usage[] =
    "usage: ffnc compare A.safetensors B.safetensors [--tol X]\n"
    "Every tensor of A is in B with the same dtype and shape, and ||a - b|| / ||b|| <= X (default 1e-2).\n";

int cmd_compare(int argc, char **argv) {
  static const CliOpt opts[] = {CLI_OPT("--tol", "X", 'T'), {0}};
  const char *paths[2] = {NULL, NULL}, *v;
  double tol = 1e-2;
  int n = 0;
  CliParser p;
  cli_parser_init(&p, "compare", opts, argc, argv);
  for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
    if (id == CLI_HELP)
      return fputs(usage, stdout), 0;
    if (id == CLI_BAD || (id == 'T' && cli_double("compare", "--tol", v, 0, INFINITY, &tol) != 0))
      return EXIT_USAGE;
    if (id == CLI_ARG && n == 2)
      return cli_error("compare: unexpected argument '%s' (two files)", v), EXIT_USAGE;
    if (id == CLI_ARG)
      paths[n++] = v;
  }
  if (n != 2) {
    cli_error("compare: usage: ffnc compare A.safetensors B.safetensors [--tol X]");
    return EXIT_USAGE;
  }
  char err[512];
  StFile *a = st_open(paths[0], err, sizeof err), *b = a ? st_open(paths[1], err, sizeof err) : NULL;
  if (!a || !b) {
    cli_error("%s", err);
    st_close(a);
    return EXIT_USER;
  }
  int rc = 0;
  for (int i = 0; i < st_count(a); i++) {
    const StTensor *x = st_get(a, i), *y = st_find(b, x->name);
    if (mismatch(x, y, paths[1])) {
      rc = EXIT_USER;
      continue;
    }
    size_t count = 1;
    for (int d = 0; d < x->rank; d++)
      count *= (size_t)x->shape[d];
    double num = 0, den = 0, maxabs = 0;
    for (size_t j = 0; j < count; j++) {
      double p = dtype_load(x->dtype, x->data, j), q = dtype_load(y->dtype, y->data, j);
      num += (p - q) * (p - q);
      den += q * q;
      if (fabs(p - q) > maxabs || p != p || q != q)
        maxabs = p != p || q != q ? NAN : fabs(p - q);
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    bool ok = rel <= tol;
    printf("%s %s: rel_l2 %.3g, max_abs %.3g (%zu elements, tol %.1e)\n", ok ? "ok  " : "FAIL", x->name, rel, maxabs,
           count, tol);
    if (!ok)
      rc = EXIT_USER;
  }
  st_close(a);
  st_close(b);
  return rc;
}
