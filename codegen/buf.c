/* buf.c: a growable text buffer for generated source. */
#include "codegen.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static void reserve(Buf *b, size_t extra) {
  if (b->len + extra + 1 <= b->cap)
    return;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1)
    cap *= 2;
  char *s = ffn_xrealloc(b->s, cap);
  b->s = s;
  b->cap = cap;
}

void buf_printf(Buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  reserve(b, (size_t)n);
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void buf_puts(Buf *b, const char *s) {
  size_t n = strlen(s);
  reserve(b, n);
  memcpy(b->s + b->len, s, n + 1);
  b->len += n;
}

void buf_free(Buf *b) {
  free(b->s);
  *b = (Buf){0};
}
