/* tp_model_test.c: tensor-parallel models on one GPU (label gpu; the runs of two ranks are
 * gpu_multi's). Every rank's share of a program, bound to the whole weights and prepared,
 * holds about 1/N of the whole program's weight bytes on its device after prepare, and binds
 * only about 1/N where its weights are sliced as stored (runtime/tp_weights.c); a share is refused a run without a communicator, and
 * a communicator of the wrong size (one rank on this GPU, where NCCL is found); a program
 * that is not tensor parallel is refused one. */
#include "check.h"
#include "gpu_util.h"
#include "runtime/rt.h"

/* A model of p on device 0 with every weight bound (small values: only the sizes matter);
 * *bound: its weight bytes before prepare. */
static ffn_model *prepared(const ffn_program *p, double *bound) {
  ffn_model *m;
  CHECK(ffn_model_create(p, 0, &m) == FFN_OK, "%s", ffn_last_error());
  const Plan *plan = p->plan;
  for (int t = 0; t < plan->ntensors; t++) {
    const PlanTensor *pt = &plan->tensors[t];
    if (pt->kind != PT_WEIGHT)
      continue;
    int64_t shape[FFN_MAX_RANK];
    for (int d = 0; d < pt->rank; d++)
      shape[d] = pt->dims[d].size;
    size_t bytes = dtype_bytes(pt->dtype, (size_t)plan_numel(plan, t, NULL));
    void *h = calloc(1, bytes + 16);
    memset(h, 0x3c, bytes); /* about 1 in f16/bf16 */
    DLTensor w = {h, {kDLCPU, 0}, pt->rank, dl_of(pt->dtype), shape, NULL, 0};
    CHECK(ffn_model_bind_weight(m, pt->name, &w) == FFN_OK, "%s", ffn_last_error());
    free(h);
  }
  *bound = (double)model_weight_bytes(m);
  CHECK(ffn_model_prepare(m) == FFN_OK, "%s", ffn_last_error());
  return m;
}

/* windows: the ranks bind only their slices (runtime/tp_weights.c; not where a load-time step
 * also reads a weight whole, like the layernorm fold of a fused GPT run) */
static void shares(const char *rel, int ranks, bool windows) {
  char *path = source_path(rel);
  ffn_program *whole = compile_tp(path, 1, 0);
  double whole_bound;
  ffn_model *mw = prepared(whole, &whole_bound);
  double full = (double)model_weight_bytes(mw);
  for (int r = 0; r < ranks; r++) {
    ffn_program *p = compile_tp(path, ranks, r);
    double bound;
    ffn_model *m = prepared(p, &bound);
    double part = (double)model_weight_bytes(m) / full;
    printf("%s --tp %d rank %d: %.0f of %.0f weight bytes (%.3f); bound %.0f of %.0f (%.3f)\n", rel, ranks, r,
           part * full, full, part, bound, whole_bound, bound / whole_bound);
    if (windows)
      CHECK(bound / whole_bound > 0.95 / ranks && bound / whole_bound < 1.1 / ranks,
            "%s rank %d of %d bound %.3f of the weights", rel, r, ranks, bound / whole_bound);
    /* norm gains and biases the ranks all keep are a few bytes per row */
    CHECK(part > 0.95 / ranks && part < 1.1 / ranks, "%s rank %d of %d holds %.3f of the weights", rel, r, ranks,
          part);
    if (r == 0) { /* a share runs only with its communicator */
      int64_t shape[2] = {3, 256};
      uint16_t x[3 * 256] = {0}, y[3 * 256];
      DLTensor in = {x, {kDLCPU, 0}, 2, dl_of(DT_BF16), shape, NULL, 0};
      DLTensor out = {y, {kDLCPU, 0}, 2, dl_of(DT_BF16), shape, NULL, 0};
      CHECK(ffn_model_run_host(m, &in, 1, &out, 1) == FFN_ERR_INVALID_ARGUMENT &&
                strstr(ffn_last_error(), "give the model that rank's NCCL communicator with ffn_model_set_communicator"),
            "%s", ffn_last_error());
      char why[1024];
      const NcclApi *nccl = nccl_api(why, sizeof why);
      if (!nccl) {
        CHECK(ffn_model_set_communicator(m, (void *)1) == FFN_ERR_UNSUPPORTED && strstr(ffn_last_error(), "no NCCL"),
              "%s", ffn_last_error());
        printf("no NCCL here (%s): the communicator checks are gpu_multi's\n", why);
      } else {
        NcclComm one;
        int device = 0;
        CHECK(nccl->CommInitAll(&one, 1, &device) == NCCL_SUCCESS, "ncclCommInitAll over device 0");
        CHECK(ffn_model_set_communicator(m, one) == FFN_ERR_INVALID_ARGUMENT &&
                  strstr(ffn_last_error(), "the communicator is rank 0 of 1, the program is rank 0's share over"),
              "%s", ffn_last_error());
        nccl->CommDestroy(one);
      }
    }
    ffn_model_destroy(m);
    ffn_program_destroy(p);
  }
  CHECK(ffn_model_set_communicator(mw, NULL) == FFN_ERR_INVALID_ARGUMENT &&
            strstr(ffn_last_error(), "not tensor parallel"), "%s", ffn_last_error());
  ffn_model_destroy(mw);
  ffn_program_destroy(whole);
  free(path);
}

int main(void) {
  require_gpu();
  shares("examples/llama3_tiny.ffn", 2, true);
  shares("examples/llama3_tiny.ffn", 4, true);
  shares("examples/gpt2_tiny.ffn", 2, true);
  shares("tests/gpu/models/fused_llama.ffn", 2, true);
  shares("tests/gpu/models/fused_gpt.ffn", 2, false);
  return check_result("tp_model_test");
}
