/* test_roundtrip.c: what the writer writes, the reader reads back unchanged (names, dtypes,
 * shapes, bytes, metadata), in memory and through files; the bytes are those the reference
 * implementation writes; the writer refuses what it cannot write. */
#include "safetensors/st_test.h"

#include <unistd.h>

typedef struct {
  char name[64];
  DType dtype;
  int rank;
  int64_t shape[FFN_MAX_RANK];
  unsigned char *data;
  size_t nbytes;
} Want;

static void want_fill(Want *w, const char *name, DType dt, int rank, const int64_t *shape,
                      uint32_t *seed) {
  snprintf(w->name, sizeof w->name, "%s", name);
  w->dtype = dt;
  w->rank = rank;
  size_t numel = 1;
  for (int i = 0; i < rank; i++) {
    w->shape[i] = shape[i];
    numel *= (size_t)shape[i];
  }
  w->nbytes = dtype_bytes(dt, numel);
  w->data = w->nbytes ? malloc(w->nbytes) : NULL;
  for (size_t i = 0; i < w->nbytes; i++)
    w->data[i] = (unsigned char)st_rand(seed);
}

/* f holds exactly `want`, in that (data) order. */
static void compare(const char *what, const StFile *f, const Want *want, int n) {
  CHECK(st_count(f) == n, "%s: %d tensors, expected %d", what, st_count(f), n);
  for (int i = 0; i < n && i < st_count(f); i++) {
    const StTensor *t = st_get(f, i);
    const Want *w = &want[i];
    CHECK(strcmp(t->name, w->name) == 0, "%s: tensor %d is '%s', expected '%s'", what, i, t->name,
          w->name);
    CHECK(t->dtype == w->dtype, "%s: '%s' has dtype %s, expected %s", what, w->name,
          dtype_name(t->dtype), dtype_name(w->dtype));
    CHECK(t->rank == w->rank && memcmp(t->shape, w->shape, sizeof(int64_t) * (size_t)w->rank) == 0,
          "%s: '%s' has another shape", what, w->name);
    CHECK(t->nbytes == w->nbytes && (!w->nbytes || memcmp(t->data, w->data, w->nbytes) == 0),
          "%s: '%s' has other bytes", what, w->name);
    CHECK(st_find(f, w->name) == t, "%s: st_find('%s') is not st_get(%d)", what, w->name, i);
  }
}

static StWriter *writer_of(const Want *want, int n) {
  StWriter *wr = st_writer_create();
  char err[512];
  for (int i = 0; i < n; i++) {
    const Want *w = &want[i];
    int rc = st_writer_add(wr, w->name, w->dtype, w->rank, w->shape, w->data, w->nbytes, err,
                           sizeof err);
    CHECK(rc == 0, "st_writer_add('%s'): %s", w->name, err);
  }
  return wr;
}

/* Every dtype with a safetensors name, scalars, zero-size tensors and metadata; through
 * memory and through a file. */
static void test_all_dtypes(void) {
  Want want[64];
  int n = 0;
  uint32_t seed = 12345;
  int64_t shape[FFN_MAX_RANK] = {3, 1, 2, 1, 2, 1};
  for (int t = DT_NONE + 1; t < DT_COUNT; t++) {
    if (!dtype_st_name((DType)t))
      continue;
    char name[64];
    snprintf(name, sizeof name, "model.%s.weight", dtype_st_name((DType)t));
    int rank = 1 + t % FFN_MAX_RANK;
    want_fill(&want[n++], name, (DType)t, rank, shape, &seed);
    snprintf(name, sizeof name, "scalar.%s", dtype_st_name((DType)t));
    want_fill(&want[n++], name, (DType)t, 0, shape, &seed);
  }
  int64_t empty1[] = {0}, empty2[] = {4, 0, 3};
  want_fill(&want[n++], "empty.1", DT_F32, 1, empty1, &seed);
  want_fill(&want[n++], "empty.2", DT_F8E4M3, 3, empty2, &seed);
  int64_t last[] = {5, 7};
  want_fill(&want[n++], "last", DT_F8E5M2, 2, last, &seed);
  want_fill(&want[n++], "empty.at.end", DT_BF16, 1, empty1, &seed);

  StWriter *wr = writer_of(want, n);
  const char *meta[][2] = {{"format", "pt"},
                           {"unicode", "h\xc3\xa9llo \xe2\x9c\x93"},
                           {"empty", ""},
                           {"quote\"and\\slash/", "line1\nline2"}};
  for (int i = 0; i < 4; i++)
    CHECK(st_writer_meta(wr, meta[i][0], meta[i][1]) == 0, "st_writer_meta('%s')", meta[i][0]);
  CHECK(st_writer_meta(wr, "bad", "\xff") == -1, "metadata that is not UTF-8 was accepted");

  char err[512] = "";
  void *buf = NULL;
  size_t len = 0;
  CHECK(st_writer_to_memory(wr, &buf, &len, err, sizeof err) == 0, "to_memory: %s", err);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0 && len >= 8; i--)
    header_len = header_len << 8 | ((unsigned char *)buf)[i];
  CHECK(header_len % 8 == 0, "header length %llu is not a multiple of 8",
        (unsigned long long)header_len);

  StFile *f = st_open_memory(buf, len, "mem", err, sizeof err);
  CHECK(f, "reading back from memory: %s", err);
  if (f) {
    compare("memory", f, want, n);
    CHECK(st_meta_count(f) == 4, "%d metadata entries, expected 4", st_meta_count(f));
    for (int i = 0; i < 4; i++) {
      const char *v = st_meta_get(f, meta[i][0]);
      CHECK(v && strcmp(v, meta[i][1]) == 0, "metadata '%s' is '%s'", meta[i][0],
            v ? v : "(missing)");
      CHECK(st_meta_key(f, i) && strcmp(st_meta_key(f, i), meta[i][0]) == 0, "metadata key %d", i);
    }
    CHECK(!st_meta_get(f, "absent") && !st_meta_key(f, 4), "absent metadata found");
    /* The data buffer starts 8-aligned, so tensor data is as aligned as the mapping allows. */
    CHECK(((const unsigned char *)st_get(f, 0)->data - (const unsigned char *)buf) % 8 == 0,
          "data buffer is not 8-aligned");
  }
  st_close(f);

  char path[] = "st-roundtrip-XXXXXX.safetensors";
  int fd = mkstemps(path, 12);
  CHECK(fd >= 0, "mkstemps failed");
  close(fd);
  CHECK(st_writer_save(wr, path, err, sizeof err) == 0, "save: %s", err);
  f = st_open(path, err, sizeof err);
  CHECK(f, "reading back from %s: %s", path, err);
  if (f) {
    compare("file", f, want, n);
    CHECK(strcmp(st_label(f), path) == 0, "label is '%s', not the path", st_label(f));
    CHECK(st_meta_count(f) == 4, "file: %d metadata entries", st_meta_count(f));
  }
  st_close(f);
  /* The file holds the very bytes st_writer_to_memory produced. */
  FILE *in = fopen(path, "rb");
  unsigned char *disk = malloc(len + 1);
  size_t got = in ? fread(disk, 1, len + 1, in) : 0;
  CHECK(got == len && memcmp(disk, buf, len) == 0,
        "file and memory images differ (%zu vs %zu bytes)", got, len);
  if (in)
    fclose(in);
  free(disk);
  unlink(path);

  free(buf);
  st_writer_destroy(wr);
  for (int i = 0; i < n; i++)
    free(want[i].data);
}

/* Thousands of tensors: all found by name, in order. */
static void test_many(void) {
  enum { N = 5000 };
  Want *want = calloc(N, sizeof *want);
  uint32_t seed = 99;
  static const DType types[] = {DT_F32, DT_BF16, DT_F16, DT_U8, DT_F8E4M3, DT_I64};
  for (int i = 0; i < N; i++) {
    char name[64];
    snprintf(name, sizeof name, "model.layers.%d.mlp.%s", i / 3,
             (const char *[]){"up", "gate", "down"}[i % 3]);
    int64_t shape[2] = {i % 5, 1 + i % 3};
    want_fill(&want[i], name, types[i % 6], 2, shape, &seed);
  }
  StWriter *wr = writer_of(want, N);
  char err[512] = "";
  void *buf = NULL;
  size_t len = 0;
  CHECK(st_writer_to_memory(wr, &buf, &len, err, sizeof err) == 0, "to_memory: %s", err);
  StFile *f = st_open_memory(buf, len, "many", err, sizeof err);
  CHECK(f, "many: %s", err);
  if (f) {
    compare("many", f, want, N);
    CHECK(!st_find(f, "model.layers.0.mlp") && !st_find(f, ""),
          "many: found a name that is not there");
  }
  st_close(f);
  free(buf);
  st_writer_destroy(wr);
  for (int i = 0; i < N; i++)
    free(want[i].data);
  free(want);
}

/* The exact bytes the reference (huggingface safetensors) writes for one f32 tensor with
 * metadata: compact JSON, metadata first, fields in this order, space padding to 8. */
static void test_reference_bytes(void) {
  float one = 1.0f;
  int64_t shape[] = {1};
  StWriter *wr = st_writer_create();
  char err[512] = "";
  CHECK(st_writer_add(wr, "a", DT_F32, 1, shape, &one, 4, err, sizeof err) == 0, "add: %s", err);
  CHECK(st_writer_meta(wr, "format", "pt") == 0, "meta");
  void *buf = NULL;
  size_t len = 0;
  CHECK(st_writer_to_memory(wr, &buf, &len, err, sizeof err) == 0, "to_memory: %s", err);
  const char *json = "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                     "\"data_offsets\":[0,4]}}";
  size_t n = strlen(json), padded = (n + 7) / 8 * 8;
  unsigned char expect[256] = {(unsigned char)padded};
  memcpy(expect + 8, json, n);
  memset(expect + 8 + n, ' ', padded - n);
  memcpy(expect + 8 + padded, &one, 4); /* the tests run on little-endian hosts */
  CHECK(len == 8 + padded + 4 && memcmp(buf, expect, len) == 0,
        "bytes differ from the reference layout: %.*s", (int)(len > 8 ? len - 8 : 0),
        (char *)buf + 8);
  free(buf);
  st_writer_destroy(wr);

  /* No tensors, no metadata: "{}" and six spaces. */
  wr = st_writer_create();
  CHECK(st_writer_to_memory(wr, &buf, &len, err, sizeof err) == 0, "empty to_memory: %s", err);
  CHECK(len == 16 && memcmp((char *)buf + 8, "{}      ", 8) == 0, "empty writer wrote %zu bytes",
        len);
  StFile *f = st_open_memory(buf, len, "empty", err, sizeof err);
  CHECK(f && st_count(f) == 0 && st_meta_count(f) == 0, "empty file: %s", err);
  st_close(f);
  free(buf);
  st_writer_destroy(wr);
}

static void expect_add_error(StWriter *wr, const char *what, const char *name, DType dt, int rank,
                             const int64_t *shape, const void *data, size_t nbytes,
                             const char *rule) {
  char err[512] = "";
  int rc = st_writer_add(wr, name, dt, rank, shape, data, nbytes, err, sizeof err);
  CHECK(rc == -1, "%s: st_writer_add accepted it", what);
  CHECK(strstr(err, rule), "%s: message lacks \"%s\": %s", what, rule, err);
  if (name && *name) {
    char quoted[128];
    snprintf(quoted, sizeof quoted, "tensor '%s'", name);
    CHECK(strstr(err, quoted), "%s: message does not name the tensor: %s", what, err);
  }
}

static void test_writer_errors(void) {
  StWriter *wr = st_writer_create();
  unsigned char bytes[64] = {0};
  int64_t shape[8] = {2, 2, 1, 1, 1, 1, 1, 1};
  char err[512] = "";
  CHECK(st_writer_add(wr, "w", DT_F32, 2, shape, bytes, 16, err, sizeof err) == 0, "add w: %s",
        err);
  expect_add_error(wr, "duplicate", "w", DT_F32, 2, shape, bytes, 16, "duplicate tensor name");
  expect_add_error(wr, "rank 7", "r7", DT_U8, 7, shape, bytes, 4, "rank 7 is not supported");
  expect_add_error(wr, "negative rank", "rn", DT_U8, -1, shape, bytes, 1,
                   "rank -1 is not supported");
  expect_add_error(wr, "too few bytes", "small", DT_BF16, 2, shape, bytes, 4,
                   "4 bytes given but shape [2, 2] of BF16 needs 8");
  expect_add_error(wr, "too many bytes", "big", DT_U8, 2, shape, bytes, 5, "needs 4");
  expect_add_error(wr, "i4", "q", DT_I4, 2, shape, bytes, 2, "dtype i4 has no safetensors name");
  expect_add_error(wr, "no dtype", "q", DT_NONE, 2, shape, bytes, 0, "has no safetensors name");
  expect_add_error(wr, "reserved name", "__metadata__", DT_U8, 2, shape, bytes, 4, "reserved");
  expect_add_error(wr, "empty name", "", DT_U8, 2, shape, bytes, 4, "non-empty name");
  expect_add_error(wr, "NULL name", NULL, DT_U8, 2, shape, bytes, 4, "non-empty name");
  expect_add_error(wr, "bad UTF-8 name", "a\xff", DT_U8, 2, shape, bytes, 4, "not valid UTF-8");
  expect_add_error(wr, "NULL data", "nodata", DT_U8, 2, shape, NULL, 4, "no data");
  int64_t neg[] = {-2, -2};
  expect_add_error(wr, "negative dim", "neg", DT_U8, 2, neg, bytes, 4, "negative");
  int64_t huge[] = {INT64_MAX, INT64_MAX};
  expect_add_error(wr, "size overflow", "huge", DT_U8, 2, huge, bytes, 4, "overflow");
  int64_t zero[] = {0};
  CHECK(st_writer_add(wr, "zero", DT_F32, 1, zero, NULL, 0, err, sizeof err) == 0,
        "empty with NULL data: %s", err);
  /* The failed adds left nothing behind. */
  void *buf = NULL;
  size_t len = 0;
  CHECK(st_writer_to_memory(wr, &buf, &len, err, sizeof err) == 0, "to_memory: %s", err);
  StFile *f = st_open_memory(buf, len, "after-errors", err, sizeof err);
  CHECK(f && st_count(f) == 2, "after failed adds: %s", f ? "wrong count" : err);
  st_close(f);
  free(buf);
  st_writer_destroy(wr);
}

int main(void) {
  test_all_dtypes();
  test_many();
  test_reference_bytes();
  test_writer_errors();
  return st_test_result("safetensors_roundtrip");
}
