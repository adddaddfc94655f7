/* grad.h: ffn_model_run_grad's checks (grad.c), apart so that tests can run them on a plan
 * without a GPU. */
#ifndef FFNC_RT_GRAD_H
#define FFNC_RT_GRAD_H

#include "rt.h"

/* Where gradient i goes. */
typedef struct {
  int tensor;    /* the plan's output tensor grad.NAME (f32) */
  int64_t numel; /* its elements in this call */
  bool wanted;   /* the caller passed a data pointer */
  bool bf16;     /* the caller's tensor is bf16 (else f32) */
  bool staged;   /* computed into f32 staging space, then stored or added by ffn_grad_store */
  int direct;    /* else the step whose kernel writes the caller's tensor itself with its variant
                    `variant` (grad_plan_direct); -1: written in place as the plan's f32 output */
  int variant;
  int first, last; /* staged: the first and last run step touching the output; it is stored after
                      step `last` (nsteps: after every step) */
} GradTarget;

/* The call's arguments against backward graph p: the counts, flags, the dims the inputs bind
 * (into dims), and every wanted gradient's device, dtype (f32 or bf16), shape, layout and
 * alignment; fills targets[0..ngrads). Sets the last error (naming the gradient) on failure. */
ffn_status grad_check_call(const Plan *p, const DLTensor *inputs, int ninputs, const DLTensor *grads, int ngrads,
                           unsigned flags, GradTarget *targets, int64_t *dims);

/* The staged gradients: each lives from the first step that touches its output to the last,
 * after which it is stored; fills their first and last, and marks their outputs in in_workspace
 * (per plan tensor), which exec_begin_ex places in the workspace like scratch tensors over those
 * steps (a weight gradient lives only around its matmul_at). */
void grad_staging_plan(const Plan *p, GradTarget *targets, int n, bool *in_workspace);

/* Which of the gradients that grad_check_call staged (wanted, bf16 or accumulated) the plan can
 * write straight into the caller's tensor: those written by one step alone, a weight gradient
 * whose kernel has the direct form for the tensor's type and the call's mode (KernelVariant.out,
 * .accumulate: the sm_90 wgmma kernel), that no other step reads or writes (a gradient summed
 * from several products, e.g. tied weights, stays staged). Sets their direct and variant and
 * clears staged; returns how many. The caller checks first that the call launches the wgmma
 * forms (not FFNC_WGRAD=mma) and that FFNC_GRAD_DIRECT is not 0. */
int grad_plan_direct(const Plan *p, GradTarget *targets, int n, unsigned flags);

#endif
