/* gen_corpus.c: writes the seed corpus of the safetensors fuzzer into the directory given
 * (tests/fuzz/corpus_safetensors): a few valid files from the writer and a few broken ones,
 * each near one rule, so the fuzzer starts next to every check. Small on purpose. */
#include "safetensors/st_test.h"

static const char *out_dir;

static void save(const char *name, const void *buf, size_t len) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", out_dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
    perror(path);
    exit(1);
  }
}

static void save_writer(const char *name, StWriter *w) {
  void *buf;
  size_t len;
  char err[512];
  if (st_writer_to_memory(w, &buf, &len, err, sizeof err) != 0) {
    fprintf(stderr, "%s: %s\n", name, err);
    exit(1);
  }
  save(name, buf, len);
  free(buf);
  st_writer_destroy(w);
}

static void add(StWriter *w, const char *name, DType dt, int rank, const int64_t *shape) {
  static unsigned char bytes[256];
  size_t numel = 1;
  for (int i = 0; i < rank; i++)
    numel *= (size_t)shape[i];
  char err[512];
  if (st_writer_add(w, name, dt, rank, shape, bytes, dtype_bytes(dt, numel), err, sizeof err) !=
      0) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
}

static void valid_files(void) {
  int64_t s2[] = {2, 3}, s1[] = {4}, s0[] = {0}, s6[] = {1, 2, 1, 2, 1, 1};
  StWriter *w = st_writer_create();
  add(w, "layers.0.mlp.up.weight", DT_BF16, 2, s2);
  add(w, "layers.0.mlp.down.weight", DT_BF16, 2, s2);
  if (st_writer_meta(w, "format", "pt") != 0)
    exit(1);
  save_writer("valid-mlp", w);

  w = st_writer_create();
  for (int t = DT_NONE + 1; t < DT_COUNT; t++)
    if (dtype_st_name((DType)t))
      add(w, dtype_st_name((DType)t), (DType)t, 1, s1);
  save_writer("valid-all-dtypes", w);

  w = st_writer_create();
  add(w, "empty", DT_F32, 1, s0);
  add(w, "empty.same.offset", DT_I8, 1, s0);
  add(w, "scalar", DT_F64, 0, NULL);
  add(w, "rank6", DT_U8, 6, s6);
  add(w, "empty.end", DT_F16, 1, s0);
  save_writer("valid-edges", w);

  save_writer("valid-empty", st_writer_create());
}

/* Broken files: header text and data length. */
static void broken_files(void) {
  static const struct {
    const char *name, *header;
    size_t data_len;
  } files[] = {
      {"bad-size", "{\"a\":{\"dtype\":\"BF16\",\"shape\":[10,10],\"data_offsets\":[0,100]}}", 100},
      {"bad-hole",
       "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
       "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}",
       6},
      {"bad-overflow",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0},
      {"bad-real", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4.0],\"data_offsets\":[0,4]}}", 4},
      {"bad-dup", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"a\":{}}", 1},
      {"bad-meta", "{\"__metadata__\":{\"k\":1}}", 0},
      {"bad-trailing", "{}", 4},
      {"bad-json", "{\"a\":", 0},
  };
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    size_t len;
    unsigned char *buf =
        st_craft(files[i].header, strlen(files[i].header), files[i].data_len, &len);
    save(files[i].name, buf, len);
    free(buf);
  }
  unsigned char big_len[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
  save("bad-header-len", big_len, sizeof big_len);
  save("bad-short", big_len, 5);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];
  valid_files();
  broken_files();
  return 0;
}
