/* checked.h: integer arithmetic that reports overflow instead of wrapping.
 *
 * Every size derived from user input (dims from a .ffn file, shapes from a safetensors
 * header or a DLTensor, --dim on the command line) goes through these before it sizes an
 * allocation or a loop. Each returns true when the exact result does not fit (like C23
 * ckd_mul), leaving *r unspecified. */
#ifndef FFNC_IR_CHECKED_H
#define FFNC_IR_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool ckd_mul_i64(int64_t *r, int64_t a, int64_t b) { return __builtin_mul_overflow(a, b, r); }
static inline bool ckd_add_i64(int64_t *r, int64_t a, int64_t b) { return __builtin_add_overflow(a, b, r); }
static inline bool ckd_mul_size(size_t *r, size_t a, size_t b) { return __builtin_mul_overflow(a, b, r); }
static inline bool ckd_add_size(size_t *r, size_t a, size_t b) { return __builtin_add_overflow(a, b, r); }

#endif
