/* dims.c: see dims.h. */
#include "dims.h"

#include "size_limits.h"

#include <stdio.h>

DimsResult dims_bind(const Dim *decl, int decl_rank, int rank, const int64_t *size, int64_t *bound, bool bind,
                     int *axis) {
  *axis = -1;
  if (rank != decl_rank)
    return DIMS_RANK;
  for (int i = 0; i < rank; i++) {
    *axis = i;
    if (size[i] < 0 || (decl[i].sym < 0 && size[i] != decl[i].size))
      return DIMS_SIZE;
    if (size[i] > FFN_MAX_DIM)
      return DIMS_LIMIT;
  }
  for (int i = 0; i < rank; i++) {
    int64_t *b = decl[i].sym >= 0 ? &bound[decl[i].sym] : NULL;
    if (!b)
      continue;
    *axis = i;
    if (*b < 0 && !bind)
      return DIMS_UNBOUND;
    if (*b < 0)
      *b = size[i];
    else if (*b != size[i])
      return DIMS_CONFLICT;
  }
  *axis = -1;
  return DIMS_OK;
}

/* "[T, 128]": dynamic dims by name, static ones as numbers. */
static const char *decl_str(const Dim *decl, int rank, const char *const *dim_names, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i < rank && used < len; i++) {
    const char *sep = i ? ", " : "[";
    if (decl[i].sym >= 0)
      used += (size_t)snprintf(buf + used, len - used, "%s%s", sep, dim_names[decl[i].sym]);
    else
      used += (size_t)snprintf(buf + used, len - used, "%s%lld", sep, (long long)decl[i].size);
  }
  if (used < len)
    snprintf(buf + used, len - used, "%s]", rank ? "" : "[");
  return buf;
}

/* "[64, 256]". */
static const char *size_str(const int64_t *size, int rank, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i < rank && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "[", (long long)size[i]);
  if (used < len)
    snprintf(buf + used, len - used, "%s]", rank ? "" : "[");
  return buf;
}

void dims_mismatch_str(DimsResult r, int axis, const Dim *decl, int decl_rank, const char *const *dim_names,
                       int rank, const int64_t *size, const int64_t *bound, char *buf, size_t len) {
  char want[256], got[256], dim[96];
  decl_str(decl, decl_rank, dim_names, want, sizeof want);
  size_str(size, rank, got, sizeof got);
  if (r == DIMS_OK || r == DIMS_RANK || axis < 0 || axis >= rank) {
    snprintf(buf, len, "expected rank %d %s, got rank %d %s", decl_rank, want, rank, got);
    return;
  }
  int sym = decl[axis].sym;
  if (sym >= 0)
    snprintf(dim, sizeof dim, "dim %s (axis %d)", dim_names[sym], axis);
  else
    snprintf(dim, sizeof dim, "dim %d", axis);
  long long n = (long long)size[axis];
  if (n < 0)
    snprintf(buf, len, "%s: negative size %lld (got %s)", dim, n, got);
  else if (r == DIMS_SIZE)
    snprintf(buf, len, "%s: expected %lld, got %lld (declared %s, got %s)", dim, (long long)decl[axis].size, n, want,
             got);
  else if (r == DIMS_LIMIT)
    snprintf(buf, len, "%s: %lld is above the limit of %lld (kernels index with 32-bit int)", dim, n,
             (long long)FFN_MAX_DIM);
  else if (r == DIMS_CONFLICT)
    snprintf(buf, len, "%s: %lld here but %lld in an earlier tensor (declared %s, got %s)", dim, n,
             (long long)bound[sym], want, got);
  else
    snprintf(buf, len, "%s: not bound by any input (declared %s)", dim, want);
}
