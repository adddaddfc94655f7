/* memplan.h: the workspace layout (passes/memplan.c). */
#ifndef FFNC_MEMPLAN_H
#define FFNC_MEMPLAN_H

#include "../codegen/plan.h"

/* Compile time: first and last step of each tensor; marks weights and derived tensors that
 * the run needs (the others are freed after the load-time steps). */
void memplan_lifetimes(Plan *p);
/* Run time: byte offsets of the scratch tensors for these dims (offsets[ntensors], entries
 * of other tensors set to 0); returns the bytes needed. */
size_t memplan_assign(const Plan *p, const int64_t *dims, size_t *offsets); /* SIZE_MAX: out of memory */

#endif
