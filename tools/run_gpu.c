/* run_gpu.c: `ffnc run --device gpu`: compile (JIT), load, bind, run once, write outputs. */
#include "cli.h"
#include "runtime/dlpack_dtype.h"
#include "runtime/rt.h"

#include <stdlib.h>
#include <string.h>


static DLDataType dl_type(DType t) {
  DLDataType d = {kDLOpaqueHandle, 0, 0}; /* no DLPack type: the run refuses the tensor by name */
  dtype_to_dl(t, &d);
  return d;
}

static int fail(ffn_status s) {
  const char *e = ffn_last_error();
  if (s == FFN_ERR_SOURCE)
    fputs(e, stderr);
  else
    cli_error("%s", e);
  return cli_status_exit(s);
}

int run_gpu(const CompileArgs *ca, StFile *wf, StFile *inf, const char *weights_path, const char *out_path) {
  char why[512];
  if (ffn_device_count(why, sizeof why) == 0) { /* say so before spending time compiling */
    cli_error("%s", why);
    return EXIT_DEVICE;
  }
  ffn_options *o;
  ffn_program *prog = NULL;
  ffn_model *m = NULL;
  ffn_status s = cli_options(ca, &o);
  if (s != FFN_OK)
    return fail(s);
  s = ffn_program_compile_file(ca->file, o, &prog);
  ffn_options_destroy(o);
  if (s != FFN_OK)
    return fail(s);
  const Plan *p = prog->plan;
  int rc = 0;
  DLTensor *in = calloc((size_t)p->ninputs + 1, sizeof *in), *out = calloc((size_t)p->noutputs + 1, sizeof *out);
  int64_t(*shapes)[FFN_MAX_RANK] = calloc((size_t)p->noutputs + 1, sizeof *shapes);
  DType *odt = calloc((size_t)p->noutputs + 1, sizeof *odt);
  /* inputs by name, checked against the declarations */
  for (int t = 0; t < p->ntensors && rc == 0; t++) {
    const PlanTensor *pt = &p->tensors[t];
    if (pt->kind == PT_OUTPUT)
      odt[pt->index] = pt->dtype;
    if (pt->kind != PT_INPUT)
      continue;
    const StTensor *st = st_find(inf, pt->name);
    if (!st) {
      cli_error("%s: missing input '%s'", st_label(inf), pt->name);
      rc = EXIT_USER;
    } else if (st->dtype != pt->dtype) {
      cli_error("%s: input '%s' is %s, the model declares %s", st_label(inf), pt->name, dtype_name(st->dtype),
                dtype_name(pt->dtype));
      rc = EXIT_USER;
    } else {
      in[pt->index] = (DLTensor){(void *)st->data, {kDLCPU, 0}, st->rank, dl_type(st->dtype), (int64_t *)st->shape, NULL, 0};
    }
  }
  if (rc == 0 && (s = ffn_model_create(prog, 0, &m)) != FFN_OK)
    rc = fail(s);
  if (rc == 0 && wf && (s = ffn_model_bind_weights_file(m, weights_path)) != FFN_OK)
    rc = fail(s);
  if (rc == 0 && (s = ffn_model_prepare(m)) != FFN_OK)
    rc = fail(s);
  void **bufs = calloc((size_t)p->noutputs + 1, sizeof(void *));
  for (int i = 0; i < p->noutputs && rc == 0; i++) {
    int nd;
    if ((s = ffn_model_output_shape(m, i, in, p->ninputs, shapes[i], &nd)) != FFN_OK) {
      rc = fail(s);
      break;
    }
    size_t numel = 1;
    for (int d = 0; d < nd; d++)
      numel *= (size_t)shapes[i][d];
    bufs[i] = malloc(dtype_bytes(odt[i], numel) + 16);
    out[i] = (DLTensor){bufs[i], {kDLCPU, 0}, nd, dl_type(odt[i]), shapes[i], NULL, 0};
  }
  if (rc == 0 && (s = ffn_model_run_host(m, in, p->ninputs, out, p->noutputs)) != FFN_OK)
    rc = fail(s);
  if (rc == 0) {
    char err[512];
    StWriter *w = st_writer_create();
    for (int i = 0; i < p->noutputs && rc == 0; i++) {
      size_t numel = 1;
      for (int d = 0; d < out[i].ndim; d++)
        numel *= (size_t)shapes[i][d];
      if (st_writer_add(w, ffn_program_output_name(prog, i), odt[i], out[i].ndim, shapes[i], bufs[i],
                        dtype_bytes(odt[i], numel), err, sizeof err) != 0) {
        cli_error("%s", err);
        rc = EXIT_USER;
      }
    }
    if (rc == 0 && st_writer_save(w, out_path, err, sizeof err) != 0) {
      cli_error("%s", err);
      rc = EXIT_USER;
    }
    st_writer_destroy(w);
  }
  for (int i = 0; i < p->noutputs; i++)
    free(bufs[i]);
  free(bufs);
  free(in);
  free(out);
  free(shapes);
  free(odt);
  ffn_model_destroy(m);
  ffn_program_destroy(prog);
  return rc;
}
