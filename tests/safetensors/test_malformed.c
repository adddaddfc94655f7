/* test_malformed.c: one case per rule the reader enforces. Each malformed file is crafted
 * here (header bytes and data length); opening it must fail with a one-line message that
 * names the file, the tensor (when the rule is about one) and the rule. A second table
 * holds edge cases that are valid and must open. */
#include "safetensors/st_test.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define LABEL "bad.safetensors"

/* One header entry: "NAME":{"dtype":"DT","shape":SHAPE,"data_offsets":OFFS} */
#define T(name, dt, shape, offs)                                                                   \
  "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" offs "}"

typedef struct {
  const char *what;
  const char *header;
  size_t data_len;
  const char *tensor; /* the tensor the message must name, or NULL */
  const char *rule;   /* a key substring of the rule */
} Bad;

static const Bad bad_headers[] = {
    /* the header as a whole */
    {"header not JSON", "{\"a\": nope}", 0, "a", "is not valid JSON"},
    {"empty header", "", 0, NULL, "is not valid JSON"},
    {"header not UTF-8", "{\"a\xff\":{}}", 0, NULL, "is not valid JSON"},
    {"NUL in header", "{\"a\":{}}\0", 0, NULL, "is not valid JSON"},
    {"header an array", "[1, 2]", 0, NULL, "header is an array, not a JSON object"},
    {"header a number", "42", 0, NULL, "header is an integer, not a JSON object"},
    {"header a string", "\"x\"", 0, NULL, "header is a string, not a JSON object"},
    {"header with leading space", " {}", 0, NULL, "must start with '{'"},
    {"duplicate tensor", "{" T("a", "U8", "[1]", "[0,1]") "," T("a", "U8", "[1]", "[1,2]") "}", 2,
     "a", "duplicate key"},
    {"duplicate field",
     "{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],"
     "\"data_offsets\":[0,1]}}",
     1, "a", "duplicate key"},
    /* layout of the data buffer */
    {"truncated data", "{" T("a", "F32", "[4]", "[0,16]") "}", 8, "a",
     "run past the end of the data buffer"},
    {"trailing bytes", "{" T("a", "F32", "[4]", "[0,16]") "}", 20, NULL, "4 trailing bytes"},
    {"data without tensors", "{}", 3, NULL, "3 trailing bytes"},
    {"hole", "{" T("a", "F32", "[2]", "[0,8]") "," T("b", "F32", "[2]", "[12,20]") "}", 20, "b",
     "hole of 4 bytes after tensor 'a'"},
    {"overlap", "{" T("a", "F32", "[2]", "[0,8]") "," T("b", "F32", "[2]", "[4,12]") "}", 12, "b",
     "overlap tensor 'a'"},
    {"empty tensor inside another",
     "{" T("a", "F32", "[2]", "[0,8]") "," T("z", "F32", "[0]", "[4,4]") "}", 8, "z",
     "overlap tensor 'a'"},
    {"same range twice", "{" T("a", "F32", "[2]", "[0,8]") "," T("b", "F32", "[2]", "[0,8]") "}",
     16, "b", "overlap tensor 'a'"},
    {"not from 0", "{" T("a", "F32", "[2]", "[4,12]") "}", 12, "a", "do not begin at 0"},
    {"begin > end", "{" T("a", "F32", "[2]", "[8,0]") "}", 8, "a", "begin after they end"},
    /* size */
    {"size mismatch", "{" T("layers.0.w", "BF16", "[10, 10]", "[0, 100]") "}", 100, "layers.0.w",
     "data_offsets [0, 100] hold 100 bytes but shape [10, 10] of BF16 needs 200"},
    {"size mismatch, scalar", "{" T("s", "F64", "[]", "[0,4]") "}", 4, "s",
     "hold 4 bytes but shape [] of F64 needs 8"},
    {"element count overflow", "{" T("a", "U8", "[4294967296,4294967296]", "[0,0]") "}", 0, "a",
     "number of elements of shape [4294967296, 4294967296] overflows"},
    {"element count overflow past a 0", "{" T("a", "U8", "[4294967296,4294967296,0]", "[0,0]") "}",
     0, "a", "overflows"},
    {"byte size overflow", "{" T("a", "F32", "[4611686018427387904]", "[0,0]") "}", 0, "a",
     "byte size of shape [4611686018427387904] of F32 overflows"},
    /* dtype */
    {"unknown dtype", "{" T("a", "F4", "[1]", "[0,1]") "}", 1, "a", "unknown dtype 'F4'"},
    {"lower-case dtype", "{" T("a", "f32", "[1]", "[0,4]") "}", 4, "a", "unknown dtype 'f32'"},
    {"empty dtype", "{" T("a", "", "[1]", "[0,4]") "}", 4, "a", "unknown dtype ''"},
    {"dtype not a string", "{\"a\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "a",
     "dtype is an integer, not a string"},
    /* shape */
    {"negative dim", "{" T("a", "U8", "[-1]", "[0,0]") "}", 0, "a", "shape[0] is negative (-1)"},
    {"string dim", "{" T("a", "U8", "[2,\"3\"]", "[0,6]") "}", 6, "a",
     "shape[1] is a string, not an integer"},
    {"real dim", "{" T("a", "U8", "[4.0]", "[0,4]") "}", 4, "a",
     "shape[0] is a real number (4), not an integer"},
    {"exponent dim", "{" T("a", "U8", "[4e0]", "[0,4]") "}", 4, "a", "not an integer"},
    {"null dim", "{" T("a", "U8", "[null]", "[0,4]") "}", 4, "a",
     "shape[0] is null, not an integer"},
    {"huge dim", "{" T("a", "U8", "[99999999999999999999]", "[0,4]") "}", 4, "a",
     "too big integer"},
    {"huge negative dim", "{" T("a", "U8", "[-99999999999999999999]", "[0,4]") "}", 4, "a",
     "too big negative integer"},
    {"rank too large", "{" T("a", "U8", "[1,1,1,1,1,1,1]", "[0,1]") "}", 1, "a",
     "shape has rank 7; at most 6"},
    {"shape not an array", "{" T("a", "U8", "{}", "[0,1]") "}", 1, "a",
     "shape is an object, not an array"},
    {"shape a number", "{" T("a", "U8", "4", "[0,4]") "}", 4, "a",
     "shape is an integer, not an array"},
    /* data_offsets */
    {"negative offset", "{" T("a", "U8", "[0]", "[-4,0]") "}", 0, "a",
     "data_offsets[0] is negative"},
    {"real offset", "{" T("a", "U8", "[8]", "[0,8.0]") "}", 8, "a",
     "data_offsets[1] is a real number (8), not an integer"},
    {"huge offset", "{" T("a", "U8", "[8]", "[0,18446744073709551616]") "}", 8, "a",
     "too big integer"},
    {"three offsets", "{" T("a", "U8", "[8]", "[0,8,8]") "}", 8, "a",
     "data_offsets has 3 entries, not 2"},
    {"one offset", "{" T("a", "U8", "[8]", "[8]") "}", 8, "a", "data_offsets has 1 entries, not 2"},
    {"offsets a string", "{" T("a", "U8", "[8]", "\"0,8\"") "}", 8, "a",
     "data_offsets is a string, not an array"},
    {"offset a bool", "{" T("a", "U8", "[8]", "[false,8]") "}", 8, "a",
     "data_offsets[0] is a boolean, not an integer"},
    /* fields of an entry */
    {"missing dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "a",
     "missing field 'dtype'"},
    {"missing shape", "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, "a",
     "missing field 'shape'"},
    {"missing offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "a",
     "missing field 'data_offsets'"},
    {"extra field", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"foo\":1}}", 1,
     "a", "unknown field 'foo'"},
    {"entry an array", "{\"a\":[1]}", 0, "a", "entry is an array, not an object"},
    {"entry null", "{\"a\":null}", 0, "a", "entry is null, not an object"},
    {"entry a string", "{\"a\":\"U8\"}", 0, "a", "entry is a string, not an object"},
    {"empty name", "{" T("", "U8", "[1]", "[0,1]") "}", 1, NULL, "a tensor has an empty name"},
    {"NUL in a name", "{" T("a\\u0000b", "U8", "[1]", "[0,1]") "}", 1, NULL, "is not valid JSON"},
    /* names with control characters still give a one-line message */
    {"newline in a name", "{" T("a\\nb", "U8", "[2]", "[0,1]") "}", 1, "a\\x0ab", "needs 2"},
    /* metadata */
    {"metadata value a number", "{\"__metadata__\":{\"k\":1}}", 0, NULL,
     "__metadata__ value of 'k' is an integer, not a string"},
    {"metadata value an object", "{\"__metadata__\":{\"k\":{}}}", 0, NULL,
     "__metadata__ value of 'k' is an object, not a string"},
    {"metadata value null", "{\"__metadata__\":{\"k\":null}}", 0, NULL, "is null, not a string"},
    {"metadata an array", "{\"__metadata__\":[\"k\"]}", 0, NULL,
     "__metadata__ is an array, not an object"},
    {"metadata a string", "{\"__metadata__\":\"k\"}", 0, NULL,
     "__metadata__ is a string, not an object"},
    {"duplicate metadata key", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, NULL,
     "duplicate key"},
    {"duplicate metadata", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, NULL, "duplicate key"},
};

/* Opens buf and checks the failure and its message. */
static void expect_failure(const char *what, const void *buf, size_t len, const char *tensor,
                           const char *rule) {
  char err[1024] = "";
  StFile *f = st_open_memory(buf, len, LABEL, err, sizeof err);
  CHECK(!f, "%s: opened a malformed file", what);
  st_close(f);
  CHECK(strncmp(err, LABEL ": ", strlen(LABEL) + 2) == 0,
        "%s: message does not start with the file: %s", what, err);
  if (tensor) {
    char quoted[256];
    snprintf(quoted, sizeof quoted, "tensor '%s': ", tensor);
    CHECK(strstr(err, quoted), "%s: message does not name %s: %s", what, quoted, err);
  }
  CHECK(strstr(err, rule), "%s: message lacks \"%s\": %s", what, rule, err);
  CHECK(!strchr(err, '\n'), "%s: message is not one line: %s", what, err);
}

static void test_bad_headers(void) {
  for (size_t i = 0; i < sizeof bad_headers / sizeof bad_headers[0]; i++) {
    const Bad *b = &bad_headers[i];
    /* The NUL case needs its trailing NUL inside the header. */
    size_t header_len = strlen(b->header) + (strcmp(b->what, "NUL in header") == 0);
    size_t len;
    unsigned char *buf = st_craft(b->header, header_len, b->data_len, &len);
    expect_failure(b->what, buf, len, b->tensor, b->rule);
    free(buf);
  }
}

/* The 8-byte header length and the file size. */
static void test_bad_lengths(void) {
  unsigned char buf[64] = {0};
  expect_failure("empty file", buf, 0, NULL, "file is empty");
  expect_failure("NULL buffer", NULL, 0, NULL, "file is empty");
  expect_failure("5-byte file", buf, 5, NULL,
                 "file is 5 bytes, too short for the 8-byte header length");
  expect_failure("7-byte file", buf, 7, NULL, "too short");

  uint64_t lengths[] = {ST_MAX_HEADER + 1ull, 1ull << 32, UINT64_MAX};
  for (int i = 0; i < 3; i++) {
    for (int k = 0; k < 8; k++)
      buf[k] = (unsigned char)(lengths[i] >> (8 * k));
    expect_failure("header length over 100 MB", buf, sizeof buf, NULL,
                   "exceeds the limit of 100000000 bytes");
  }
  uint64_t past[] = {57, ST_MAX_HEADER};
  for (int i = 0; i < 2; i++) {
    for (int k = 0; k < 8; k++)
      buf[k] = (unsigned char)(past[i] >> (8 * k));
    expect_failure("header length past EOF", buf, sizeof buf, NULL,
                   "runs past the end of the file (64 bytes)");
  }
}

/* st_open itself: its label is the path; failures to open say why. */
static void test_open_errors(void) {
  char err[1024] = "";
  StFile *f = st_open("does-not-exist.safetensors", err, sizeof err);
  CHECK(!f && strstr(err, "does-not-exist.safetensors: cannot open: No such file or directory"),
        "missing file: %s", err);
  st_close(f);
  f = st_open(".", err, sizeof err);
  CHECK(!f && strstr(err, ".: cannot open: Is a directory"), "directory: %s", err);
  st_close(f);

  char path[] = "st-malformed-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp: %s", strerror(errno));
  if (fd < 0)
    return;
  close(fd);
  char expect[128];
  snprintf(expect, sizeof expect, "%s: file is empty", path);
  f = st_open(path, err, sizeof err);
  CHECK(!f && strstr(err, expect), "empty file on disk: %s", err);
  st_close(f);
  unlink(path);
}

typedef struct {
  const char *what;
  const char *header;
  size_t data_len;
  int count;         /* tensors */
  const char *first; /* name of st_get(0), or NULL */
} Good;

/* One tensor of each safetensors dtype, one element each. */
// clang-format off
#define EVERY_DTYPE "{"                                                                        \
  T("a", "F64", "[1]", "[0,8]") "," T("b", "F32", "[1]", "[8,12]") ","                         \
  T("c", "F16", "[1]", "[12,14]") "," T("d", "BF16", "[1]", "[14,16]") ","                     \
  T("e", "F8_E4M3", "[1]", "[16,17]") "," T("f", "F8_E5M2", "[1]", "[17,18]") ","             \
  T("g", "I64", "[1]", "[18,26]") "," T("h", "I32", "[1]", "[26,30]") ","                      \
  T("i", "I16", "[1]", "[30,32]") "," T("j", "I8", "[1]", "[32,33]") ","                       \
  T("k", "U64", "[1]", "[33,41]") "," T("l", "U32", "[1]", "[41,45]") ","                      \
  T("m", "U16", "[1]", "[45,47]") "," T("n", "U8", "[1]", "[47,48]") ","                       \
  T("o", "BOOL", "[1]", "[48,49]") "}"
// clang-format on

static const Good good_headers[] = {
    {"no tensors", "{}", 0, 0, NULL},
    {"metadata only", "{\"__metadata__\":{\"format\":\"pt\"}}", 0, 0, NULL},
    {"empty metadata", "{\"__metadata__\":{}}", 0, 0, NULL},
    {"padding spaces", "{" T("a", "U8", "[3]", "[0,3]") "}     ", 3, 1, "a"},
    {"padding newline and tab", "{" T("a", "U8", "[3]", "[0,3]") "} \n\t\r", 3, 1, "a"},
    {"whitespace inside",
     "{ \"a\" : { \"dtype\" : \"U8\" , \"shape\" : [ 3 ] , \"data_offsets\" : [ 0 , 3 ] } }", 3, 1,
     "a"},
    {"scalar", "{" T("s", "F32", "[]", "[0,4]") "}", 4, 1, "s"},
    {"zero-size only", "{" T("z", "F32", "[0, 4]", "[0,0]") "}", 0, 1, "z"},
    {"zero-size at the end",
     "{" T("a", "F32", "[2]", "[0,8]") "," T("z", "F32", "[4,0]", "[8,8]") "}", 8, 2, "a"},
    {"zero-size at the start",
     "{" T("a", "F32", "[2]", "[0,8]") "," T("z", "BOOL", "[0]", "[0,0]") "}", 8, 2, "z"},
    {"two zero-size at one offset",
     "{" T("y", "I8", "[0]", "[4,4]") "," T("a", "I32", "[1]", "[0,4]") "," T(
         "z", "I8", "[0]", "[4,4]") "," T("b", "I32", "[1]", "[4,8]") "}",
     8, 4, "a"},
    {"header order differs from data order",
     "{" T("b", "U16", "[2]", "[4,8]") "," T("a", "U16", "[2]", "[0,4]") "}", 8, 2, "a"},
    {"rank 6", "{" T("a", "U8", "[1,2,1,2,1,2]", "[0,8]") "}", 8, 1, "a"},
    {"unicode name", "{" T("w\xc3\xa9ight.\xe2\x9c\x93", "U8", "[1]", "[0,1]") "}", 1, 1,
     "w\xc3\xa9ight.\xe2\x9c\x93"},
    {"escaped name", "{" T("a\\\"b\\\\c\\u00e9", "U8", "[1]", "[0,1]") "}", 1, 1,
     "a\"b\\c\xc3\xa9"},
    {"-0 is 0", "{" T("a", "U8", "[-0]", "[0,-0]") "}", 0, 1, "a"},
    {"every dtype", EVERY_DTYPE, 49, 15, "a"},
};

static void test_good_headers(void) {
  for (size_t i = 0; i < sizeof good_headers / sizeof good_headers[0]; i++) {
    const Good *g = &good_headers[i];
    size_t len;
    unsigned char *buf = st_craft(g->header, strlen(g->header), g->data_len, &len);
    char err[1024] = "";
    StFile *f = st_open_memory(buf, len, "good.safetensors", err, sizeof err);
    CHECK(f, "%s: a valid file did not open: %s", g->what, err);
    if (f) {
      CHECK(st_count(f) == g->count, "%s: %d tensors, expected %d", g->what, st_count(f), g->count);
      if (g->first)
        CHECK(st_get(f, 0) && strcmp(st_get(f, 0)->name, g->first) == 0,
              "%s: first tensor is '%s', not '%s'", g->what,
              st_get(f, 0) ? st_get(f, 0)->name : "(none)", g->first);
      /* st_get is in data order and every tensor points at its own bytes. */
      const unsigned char *data = buf + len - g->data_len, *at = data;
      for (int k = 0; k < st_count(f); k++) {
        const StTensor *t = st_get(f, k);
        CHECK(t->data == at, "%s: tensor '%s' is not where the previous one ended", g->what,
              t->name);
        at += t->nbytes;
        CHECK(st_find(f, t->name) == t, "%s: st_find('%s') is not st_get(%d)", g->what, t->name, k);
      }
      CHECK(at == data + g->data_len, "%s: tensors do not cover the data buffer", g->what);
      CHECK(!st_find(f, "missing"), "%s: st_find found a tensor that is not there", g->what);
      CHECK(!st_get(f, st_count(f)) && !st_get(f, -1), "%s: st_get out of range is not NULL",
            g->what);
      CHECK(strcmp(st_label(f), "good.safetensors") == 0, "%s: label '%s'", g->what, st_label(f));
    }
    st_close(f);
    free(buf);
  }
}

int main(void) {
  test_bad_headers();
  test_bad_lengths();
  test_open_errors();
  test_good_headers();
  return st_test_result("safetensors_malformed");
}
