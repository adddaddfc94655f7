/* plan_util.h: a model file of the source tree (a path relative to FFNC_SOURCE_DIR) compiled
 * into its launch plan for sm_90 at -O3, for the tests that look at plans. Exits on error. */
#ifndef FFNC_TESTS_PLAN_UTIL_H
#define FFNC_TESTS_PLAN_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "codegen/driver.h"

/* A model of the source tree (FFNC_SOURCE_DIR/rel) compiled with options o: its plan, and its
 * optimized graph in *graph when graph is not NULL. Exits on any error. */
static inline Plan *compile_plan_opts(const char *rel, const DriverOptions *o, Graph **graph) {
  char path[4096], *text, err[512];
  size_t len;
  snprintf(path, sizeof path, "%s/%s", getenv("FFNC_SOURCE_DIR") ? getenv("FFNC_SOURCE_DIR") : ".", rel);
  if (read_file(path, &text, &len, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
  Diags d;
  diags_init(&d);
  Plan *p = NULL;
  if (driver_compile(text, len, path, o, &d, &p, graph) != 0) {
    fprintf(stderr, "%s", d.text);
    exit(1);
  }
  diags_free(&d);
  free(text);
  return p;
}

/* For sm_<sm> at -O<opt_level>. */
static inline Plan *compile_plan_ex(const char *rel, int sm, int opt_level, Graph **graph) {
  DriverOptions o = {.sm = sm, .opt_level = opt_level};
  return compile_plan_opts(rel, &o, graph);
}

/* The same for sm_90 at -O3, the plan only. */
static inline Plan *compile_plan(const char *rel) { return compile_plan_ex(rel, 90, 3, NULL); }

#endif
