/* dims.h: binding a program's dynamic dims (T...) from the shapes of the tensors a call
 * passes. One rule for the reference interpreter (ir/interp.c) and the runtime (exec.c,
 * api.c): static dims must match; a dynamic dim takes the first size it is given and every
 * later use must agree. */
#ifndef FFNC_IR_DIMS_H
#define FFNC_IR_DIMS_H

#include "ir.h"

typedef enum {
  DIMS_OK,
  DIMS_RANK,     /* the ranks differ */
  DIMS_SIZE,     /* a static dim (or a negative size) differs; *axis says which */
  DIMS_CONFLICT, /* a dynamic dim is bound to another size already; *axis says which */
  DIMS_UNBOUND,  /* bind is false and a dynamic dim has no size yet */
  DIMS_LIMIT,    /* a size is above FFN_MAX_DIM (size_limits.h); *axis says which */
} DimsResult;

/* Matches the actual shape (rank, size) against the declared dims. Rank and static sizes are
 * checked first (with the limit on
 * every size), before bound[] changes. Then each dynamic dim d: if bound[d.sym] < 0 and
 * bind, it is set to the actual size; otherwise the two must be equal. */
DimsResult dims_bind(const Dim *decl, int decl_rank, int rank, const int64_t *size, int64_t *bound, bool bind,
                     int *axis);

/* One line for a failed dims_bind (r, axis as it returned), naming the axis, the dim's name
 * if it is dynamic (dim_names, by symbol), both sizes, then both whole shapes, e.g.
 *   "dim 1: expected 128, got 256 (declared [T, 128], got [64, 256])"
 *   "dim T (axis 0): 9 here but 7 in an earlier tensor (declared [T, 128], got [9, 128])"
 *   "expected rank 2 [T, 128], got rank 1 [8]"
 * The caller prefixes what the tensor is ("input 'x': "). */
void dims_mismatch_str(DimsResult r, int axis, const Dim *decl, int decl_rank, const char *const *dim_names,
                       int rank, const int64_t *size, const int64_t *bound, char *buf, size_t len);

#endif
