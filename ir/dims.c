/* dims.c: see dims.h. */
#include "dims.h"

#include "size_limits.h"

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
