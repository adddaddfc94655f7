/* plan_util.h: a model file of the source tree (a path relative to FFNC_SOURCE_DIR) compiled
 * into its launch plan for sm_90 at -O3, for the tests that look at plans. Exits on error. */
#ifndef FFNC_TESTS_PLAN_UTIL_H
#define FFNC_TESTS_PLAN_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "codegen/driver.h"

static inline Plan *compile_plan(const char *rel) {
  char path[4096], *text, err[512];
  size_t len;
  snprintf(path, sizeof path, "%s/%s", getenv("FFNC_SOURCE_DIR") ? getenv("FFNC_SOURCE_DIR") : ".", rel);
  if (read_file(path, &text, &len, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
  Diags d;
  diags_init(&d);
  DriverOptions o = {.sm = 90, .opt_level = 3};
  Plan *p = NULL;
  if (driver_compile(text, len, path, &o, &d, &p, NULL) != 0) {
    fprintf(stderr, "%s", d.text);
    exit(1);
  }
  diags_free(&d);
  free(text);
  return p;
}

#endif
