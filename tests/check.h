/* check.h: the one check harness of the C tests. A failed CHECK prints where, the condition
 * and why, and the test goes on (so one run shows every failure; past CHECK_PRINT_LIMIT they
 * are only counted, for the exhaustive loops); main returns check_result(name): 0 if every
 * check passed, 1 otherwise. */
#ifndef FFNC_TESTS_CHECK_H
#define FFNC_TESTS_CHECK_H

#include <stdio.h>

static int check_failures;

enum { CHECK_PRINT_LIMIT = 50 };

#define CHECK(cond, ...)                                                         \
  do {                                                                           \
    if (!(cond) && check_failures++ < CHECK_PRINT_LIMIT) {                       \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);   \
      fprintf(stderr, __VA_ARGS__);                                              \
      fputc('\n', stderr);                                                       \
    }                                                                            \
  } while (0)

static inline int check_result(const char *name) {
  if (check_failures) {
    fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
    return 1;
  }
  printf("%s: all checks passed\n", name);
  return 0;
}

#endif
