/* arena.c: bump allocation for everything that lives as long as one compilation. */
#include "ir.h"

#include <stdarg.h>

#include <stdlib.h>
#include <string.h>

typedef struct Chunk Chunk;
struct Chunk {
  Chunk *next;
  size_t used, size;
  _Alignas(16) unsigned char data[];
};

struct Arena {
  Chunk *head;
};

static void out_of_memory(size_t n) {
  fprintf(stderr, "ffnc: out of host memory (%zu bytes)\n", n);
  abort();
}

void *ffn_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p)
    out_of_memory(n);
  return p;
}

void *ffn_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p)
    out_of_memory(n * size);
  return p;
}

void *ffn_xrealloc(void *p, size_t n) {
  p = realloc(p, n ? n : 1);
  if (!p)
    out_of_memory(n);
  return p;
}

char *ffn_xstrdup(const char *s) {
  char *p = strdup(s);
  if (!p)
    out_of_memory(strlen(s) + 1);
  return p;
}

Arena *arena_create(void) {
  Arena *a = ffn_xmalloc(sizeof *a);
  a->head = NULL;
  return a;
}

void arena_destroy(Arena *a) {
  if (!a)
    return;
  for (Chunk *c = a->head, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  free(a);
}

void *arena_alloc(Arena *a, size_t size) {
  size = (size + 15) & ~(size_t)15;
  Chunk *c = a->head;
  if (!c || c->size - c->used < size) {
    size_t cap = size > 60000 ? size : 60000;
    c = ffn_xmalloc(sizeof(Chunk) + cap);
    c->size = cap;
    c->used = 0;
    c->next = a->head;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += size;
  memset(p, 0, size);
  return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
  char *p = arena_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_printf(Arena *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = arena_alloc(a, (size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

void ptrvec_push(Arena *a, PtrVec *v, void *item) {
  if (v->len == v->cap) {
    int cap = v->cap ? v->cap * 2 : 16;
    void **items = arena_alloc(a, sizeof(void *) * (size_t)cap);
    if (v->len)
      memcpy(items, v->items, sizeof(void *) * (size_t)v->len);
    v->items = items;
    v->cap = cap;
  }
  v->items[v->len++] = item;
}

int ffn_errf(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (errlen)
    vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

const char *ffn_shape_text(int rank, const int64_t *shape, char *buf, size_t len) {
  size_t o = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (o < len)
    snprintf(buf + o, len - o, "]");
  return buf;
}
