/* st_test.h: helpers shared by the safetensors tests (one header, included once per test
 * program). A failed CHECK prints where and why and the test goes on; main returns
 * st_test_result(). */
#ifndef FFNC_ST_TEST_H
#define FFNC_ST_TEST_H

#include "runtime/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static inline int st_test_result(const char *name) { return check_result(name); }

/* A file image: 8-byte little-endian length of `header`, the header bytes as given (no
 * padding), then data_len bytes of data. malloc'd. */
static inline unsigned char *st_craft(const char *header, size_t header_len, size_t data_len,
                                      size_t *len) {
  *len = 8 + header_len + data_len;
  unsigned char *buf = malloc(*len ? *len : 1);
  if (!buf) {
    perror("malloc");
    exit(2);
  }
  for (int i = 0; i < 8; i++)
    buf[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
  memcpy(buf + 8, header, header_len);
  for (size_t i = 0; i < data_len; i++)
    buf[8 + header_len + i] = (unsigned char)(i * 7 + 1);
  return buf;
}

/* Deterministic bytes for tensor contents. */
static inline uint32_t st_rand(uint32_t *state) {
  uint32_t x = *state;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *state = x;
}

#endif
