/* tp_util.h: what the tensor-parallel GPU tests share (after check.h, gpu_util.h and
 * runtime/rt.h): the weights every rank and the whole program are given. */
#ifndef FFNC_TP_UTIL_H
#define FFNC_TP_UTIL_H

/* Random bf16 weights of a sensible scale for each weight of the plan `whole`, bound to m and
 * prepared: the same for every model (one generator, seeded once, over the weights in plan order),
 * so that each rank's share and the whole program agree. */
static void tp_bind_weights(ffn_model *m, const ffn_program *whole) {
  const Plan *p = whole->plan;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int t = 0; t < p->ntensors; t++) {
    const PlanTensor *pt = &p->tensors[t];
    if (pt->kind != PT_WEIGHT)
      continue;
    int64_t shape[FFN_MAX_RANK];
    size_t n = 1;
    for (int d = 0; d < pt->rank; d++)
      n *= (size_t)(shape[d] = pt->dims[d].size);
    uint16_t *h = malloc(2 * n);
    CHECK(h != NULL, "out of host memory");
    double scale = pt->rank == 2 ? 1.0 / sqrt((double)pt->dims[1].size) : 0.0;
    for (size_t i = 0; i < n; i++) {
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      double u = (double)(state >> 11) / 9007199254740992.0 * 2 - 1;
      h[i] = f32_to_bf16_bits((float)(pt->rank == 2 ? u * scale * 1.7 : 1.0 + 0.1 * u));
    }
    DLTensor w = {h, {kDLCPU, 0}, pt->rank, dl_of(DT_BF16), shape, NULL, 0};
    CHECK(ffn_model_bind_weight(m, pt->name, &w) == FFN_OK, "%s", ffn_last_error());
    free(h);
  }
  CHECK(ffn_model_prepare(m) == FFN_OK, "%s", ffn_last_error());
}

#endif
