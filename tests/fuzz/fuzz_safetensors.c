/* fuzz_safetensors.c: libFuzzer target for the safetensors reader (and writer).
 *
 * Any input must either open, or fail with a one-line message that names the label. An
 * input that opens must describe tensors whose bytes all lie inside the input (touched
 * here, so ASan sees any read out of bounds), which st_find finds by name, and which the
 * writer can write back into a file that opens again with the same tensors. */
#include "runtime/safetensors.h"

#include <stdlib.h>
#include <string.h>

static void check_roundtrip(const StFile *f) {
  StWriter *w = st_writer_create();
  char err[512];
  for (int i = 0; i < st_count(f); i++) {
    const StTensor *t = st_get(f, i);
    if (st_writer_add(w, t->name, t->dtype, t->rank, t->shape, t->data, t->nbytes, err,
                      sizeof err) != 0)
      abort(); /* the reader accepted a tensor the writer refuses */
  }
  for (int i = 0; i < st_meta_count(f); i++)
    if (st_writer_meta(w, st_meta_key(f, i), st_meta_get(f, st_meta_key(f, i))) != 0)
      abort();
  void *buf;
  size_t len;
  if (st_writer_to_memory(w, &buf, &len, err, sizeof err) != 0)
    abort();
  StFile *again = st_open_memory(buf, len, "again", err, sizeof err);
  if (!again || st_count(again) != st_count(f) || st_meta_count(again) != st_meta_count(f))
    abort();
  for (int i = 0; i < st_count(f); i++) {
    const StTensor *a = st_get(f, i), *b = st_get(again, i);
    if (strcmp(a->name, b->name) || a->dtype != b->dtype || a->nbytes != b->nbytes ||
        (a->nbytes && memcmp(a->data, b->data, a->nbytes)))
      abort();
  }
  st_close(again);
  free(buf);
  st_writer_destroy(w);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  char err[1024];
  StFile *f = st_open_memory(data, size, "fuzz", err, sizeof err);
  if (!f) {
    if (strncmp(err, "fuzz: ", 6) != 0 || strchr(err, '\n'))
      abort();
    return 0;
  }
  volatile unsigned char sink = 0;
  for (int i = 0; i < st_count(f); i++) {
    const StTensor *t = st_get(f, i);
    const unsigned char *bytes = t->data;
    for (size_t k = 0; k < t->nbytes; k++)
      sink ^= bytes[k];
    if (st_find(f, t->name) != t || t->rank < 0 || t->rank > FFN_MAX_RANK)
      abort();
  }
  for (int i = 0; i < st_meta_count(f); i++)
    if (!st_meta_get(f, st_meta_key(f, i)))
      abort();
  (void)sink;
  check_roundtrip(f);
  st_close(f);
  return 0;
}
