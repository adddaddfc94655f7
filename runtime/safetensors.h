/* safetensors.h: reading and writing safetensors files.
 *
 * Format: 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the data buffer.
 * The JSON maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
 * relative to the data buffer) plus an optional "__metadata__" map of strings to strings.
 *
 * The reader maps the file and validates it as the reference implementation does, and a
 * little more: header length at most 100 MB and inside the file; the header is a JSON
 * object (parsed by jansson); no duplicate keys; every entry has exactly the known fields
 * with the right JSON types; dtype known; shape of non-negative integers; integers parsed
 * exactly (no floats, no overflow); byte size = product(shape) x element size, with checked
 * arithmetic; offsets in order, contiguous from 0 and non-overlapping; the data buffer
 * exactly covered (no trailing bytes). Every failure names the file, the tensor (if any)
 * and the rule that was broken.
 */
#ifndef FFNC_SAFETENSORS_H
#define FFNC_SAFETENSORS_H

#include "../ir/ir.h"

#define ST_MAX_HEADER (100u * 1000u * 1000u)

typedef struct {
  const char *name;
  DType dtype;
  int rank;
  int64_t shape[FFN_MAX_RANK];
  const void *data; /* into the mapping; valid until st_close */
  size_t nbytes;
} StTensor;

typedef struct StFile StFile;

/* Open and validate. On failure returns NULL and writes "FILE: [tensor 'NAME': ]rule" into
 * err. `label` is the name used in messages (the path for st_open). */
StFile *st_open(const char *path, char *err, size_t errlen);
StFile *st_open_memory(const void *buf, size_t len, const char *label, char *err, size_t errlen);
void st_close(StFile *f);

int st_count(const StFile *f);
const StTensor *st_get(const StFile *f, int i);           /* in data-offset order */
const StTensor *st_find(const StFile *f, const char *name); /* NULL if absent */
int st_meta_count(const StFile *f);
const char *st_meta_key(const StFile *f, int i);
const char *st_meta_get(const StFile *f, const char *key); /* NULL if absent */
const char *st_label(const StFile *f);

/* Writer: collects tensors (data copied or referenced), then writes the file atomically
 * (to a temporary file in the same directory, then rename), so a failed or interrupted
 * write never leaves a partial file at `path`. */
typedef struct StWriter StWriter;

StWriter *st_writer_create(void);
void st_writer_destroy(StWriter *w);
/* data must stay valid until st_writer_save (it is not copied). Returns -1 (with err) on a
 * duplicate name, bad rank or size mismatch. */
int st_writer_add(StWriter *w, const char *name, DType dtype, int rank, const int64_t *shape,
                  const void *data, size_t nbytes, char *err, size_t errlen);
int st_writer_meta(StWriter *w, const char *key, const char *value);
int st_writer_save(StWriter *w, const char *path, char *err, size_t errlen);
/* Serialize into a malloc'd buffer (for tests and fuzzing). */
int st_writer_to_memory(StWriter *w, void **buf, size_t *len, char *err, size_t errlen);

#endif
