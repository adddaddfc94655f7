/* plan_util.h: a file of the source tree (a path relative to FFNC_SOURCE_DIR) read, or a model
 * compiled into its launch plan for sm_90 at -O3, for the tests that look at sources and plans.
 * Exits on error. */
#ifndef FFNC_TESTS_PLAN_UTIL_H
#define FFNC_TESTS_PLAN_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "codegen/driver.h"

/* rel relative to the source tree (FFNC_SOURCE_DIR, else .; absolute paths, such as generated
 * models, as they are), in malloc'd memory. */
static inline char *source_path(const char *rel) {
  const char *root = getenv("FFNC_SOURCE_DIR");
  char *p = malloc(4096);
  if (!p) {
    fprintf(stderr, "out of host memory\n");
    exit(1);
  }
  if (rel[0] == '/')
    snprintf(p, 4096, "%s", rel);
  else
    snprintf(p, 4096, "%s/%s", root ? root : ".", rel);
  return p;
}

/* The text of a file of the source tree (source_path), its length in *len when len is not NULL.
 * Exits on error. */
static inline char *source_text(const char *rel, size_t *len) {
  char *path = source_path(rel), *text, err[512];
  size_t n;
  if (read_file(path, &text, &n, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
  free(path);
  if (len)
    *len = n;
  return text;
}

/* A model of the source tree (FFNC_SOURCE_DIR/rel) compiled with options o: its plan, and its
 * optimized graph in *graph when graph is not NULL. Exits on any error. */
static inline Plan *compile_plan_opts(const char *rel, const DriverOptions *o, Graph **graph) {
  size_t len;
  char *text = source_text(rel, &len), *path = source_path(rel);
  Diags d;
  diags_init(&d);
  Plan *p = NULL;
  if (driver_compile(text, len, path, o, &d, &p, graph) != 0) {
    fprintf(stderr, "%s", d.text);
    exit(1);
  }
  diags_free(&d);
  free(text);
  free(path);
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
