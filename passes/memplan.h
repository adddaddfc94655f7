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
/* The same for a call that also places the outputs i with outputs[i] in the workspace, over the
 * steps that touch them (all steps if none does), and, with input_of, may write over its inputs:
 * a scratch tensor that an elementwise kernel writes over an input it reads last (PlanTensor.alias
 * naming an input) takes the input's bytes, input_of[i] = that input (its offset 0, no
 * workspace); input_of[i] = -1 for every other tensor. outputs and input_of NULL: memplan_assign. */
size_t memplan_assign_call(const Plan *p, const int64_t *dims, const bool *outputs, size_t *offsets, int *input_of);

#endif
