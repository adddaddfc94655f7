/* fnv.h: FNV-1a, 64 bits: the one hash of ffnc's keys, checksums and name hashes (kernel cache
 * entries and their checksums, tuning files, tuning keys, random initialisation by tensor name,
 * diagnostics' and the checker's name tables). Not for anything adversarial. */
#ifndef FFN_IR_FNV_H
#define FFN_IR_FNV_H

#include <stddef.h>
#include <stdint.h>

#define FFN_FNV_OFFSET 1469598103934665603ull /* the standard offset basis */
#define FFN_FNV_OFFSET2 0x84222325cbf29ce4ull /* a second basis: 128-bit keys from two hashes */

/* h advanced over n bytes of data (start from FFN_FNV_OFFSET) */
static inline uint64_t ffn_fnv(const void *data, size_t n, uint64_t h) {
  const unsigned char *s = data;
  for (size_t i = 0; i < n; i++)
    h = (h ^ s[i]) * 1099511628211ull;
  return h;
}

/* h advanced over the bytes of a NUL-terminated string */
static inline uint64_t ffn_fnv_str(const char *s, uint64_t h) {
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

#endif
