/* analyze.h: the two parts of `ffnc analyze` (tools/cmd_analyze.c drives them). */
#ifndef FFNC_ANALYZE_H
#define FFNC_ANALYZE_H

#include "cli.h"

/* The program and its data, as the command line gave them. */
typedef struct {
  const char *file;
  const char *text;
  size_t len;
  StFile *wf;        /* the weights */
  const char *wpath; /* their path (the GPU binds from the file) */
  StFile *inf;       /* the calibration inputs, by the program's input names */
} AnalyzeInput;

typedef struct {
  char name[128]; /* the output */
  double rel_l2, max_abs, cosine;
} PrecisionError;

/* analyze_precision.c: each output of the program as compiled against the same program in f32
 * without quantization; how says what ran where. err holds up to 64 outputs. 0 or an exit
 * status (the message printed). */
int analyze_precision(const AnalyzeInput *in, bool gpu, PrecisionError *err, int *nerr, char *how, size_t howlen);

#endif
