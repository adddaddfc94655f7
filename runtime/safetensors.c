/* safetensors.c: the safetensors reader (mmap + jansson, strict validation) and the
 * atomic writer. The rules are listed in safetensors.h; every check below that rejects a
 * file says which rule in its message. */
#include "safetensors.h"
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- messages --------------------------------------------------------- */

/* Where a message goes and the file it names. */
typedef struct {
  const char *label;
  char *err;
  size_t errlen;
} Diag;

/* s[0..n) made fit for a one-line message: control and DEL bytes as \xNN, cut after `max`
 * bytes so that a long name cannot push the rule out of the caller's buffer. */
static const char *printable(const char *s, size_t n, size_t max, char *buf, size_t len) {
  size_t o = 0;
  for (size_t i = 0; i < n && o + 8 < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (i == max) {
      memcpy(buf + o, "...", 3);
      o += 3;
      break;
    }
    if (c < 0x20 || c == 0x7f)
      o += (size_t)snprintf(buf + o, len - o, "\\x%02x", c);
    else
      buf[o++] = (char)c;
  }
  buf[o] = 0;
  return buf;
}

static const char *printable_str(const char *s, char *buf, size_t len) {
  return printable(s, strlen(s), 120, buf, len);
}

/* Writes "LABEL: [tensor 'NAME': ]RULE" and returns false, so checks read
 * `return fail(...)`. */
static bool fail(const Diag *d, const char *tensor, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool fail(const Diag *d, const char *tensor, const char *fmt, ...) {
  if (!d->err || d->errlen == 0)
    return false;
  char label[1100], name[1000], rule[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rule, sizeof rule, fmt, ap);
  va_end(ap);
  printable(d->label, strlen(d->label), 1000, label, sizeof label);
  if (tensor)
    snprintf(d->err, d->errlen, "%s: tensor '%s': %s", label,
             printable_str(tensor, name, sizeof name), rule);
  else
    snprintf(d->err, d->errlen, "%s: %s", label, rule);
  /* jansson's error text quotes raw input; keep the message on one line whatever it holds. */
  for (char *p = d->err; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      *p = '?';
  return false;
}

static const char *json_kind(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a real number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  case JSON_NULL: return "null";
  }
  return "an unknown JSON value";
}


/* ---- the file --------------------------------------------------------- */

typedef struct {
  StTensor t;
  uint64_t begin, end; /* data_offsets */
  int order;           /* position in the header, so that sorting is deterministic */
} Entry;

struct StFile {
  Arena *arena;
  const char *label;
  void *map; /* st_open's mapping (NULL for st_open_memory) */
  size_t map_len;
  Entry *entries; /* sorted by data offset */
  int count;
  const StTensor **by_name; /* the tensors sorted by name, for st_find */
  const char **meta_keys, **meta_values;
  int nmeta;
};

static int by_name(const void *pa, const void *pb) {
  const StTensor *const *a = pa, *const *b = pb;
  return strcmp((*a)->name, (*b)->name);
}

/* A sorted array rather than a hash table: a file could hold names crafted to collide, and
 * sorting has no such worst case. */
static void build_index(StFile *f) {
  f->by_name = arena_alloc(f->arena, (size_t)f->count * sizeof *f->by_name);
  for (int i = 0; i < f->count; i++)
    f->by_name[i] = &f->entries[i].t;
  qsort(f->by_name, (size_t)f->count, sizeof *f->by_name, by_name);
}

/* ---- header ----------------------------------------------------------- */

static bool read_header_len(const Diag *d, const unsigned char *buf, size_t len, uint64_t *n) {
  if (len == 0)
    return fail(d, NULL, "file is empty; a safetensors file starts with an 8-byte header length");
  if (len < 8)
    return fail(d, NULL, "file is %zu bytes, too short for the 8-byte header length", len);
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | buf[i];
  if (v > ST_MAX_HEADER)
    return fail(d, NULL, "header length %llu exceeds the limit of %u bytes", (unsigned long long)v,
                ST_MAX_HEADER);
  if (v > len - 8)
    return fail(d, NULL, "header length %llu runs past the end of the file (%zu bytes)",
                (unsigned long long)v, len);
  *n = v;
  return true;
}

/* The top-level key whose value holds byte `pos` of the header: jansson reports only a
 * position, and a message should name the tensor. A light scan of strings, escapes and
 * nesting is enough, since jansson found the text valid up to about there. */
static bool key_at(const char *text, size_t pos, const char **key, size_t *keylen) {
  int depth = 0;
  bool want_key = false, found = false;
  for (size_t i = 0; i < pos; i++) {
    char c = text[i];
    if (c == '"') {
      size_t start = ++i;
      while (i < pos && text[i] != '"')
        i += text[i] == '\\' ? 2 : 1;
      if (depth == 1 && want_key) {
        *key = text + start;
        *keylen = (i < pos ? i : pos) - start;
        found = true;
        want_key = false;
      }
    } else if (c == '{' || c == '[') {
      depth++;
      want_key = depth == 1 && c == '{';
    } else if (c == '}' || c == ']') {
      depth--;
    } else if (c == ',' && depth == 1) {
      want_key = true;
    }
  }
  return found && depth >= 1; /* past the top-level object, no entry is to blame */
}

/* jansson's message, naming the tensor whose entry it stopped in. */
static bool json_error(const Diag *d, const char *text, size_t n, const json_error_t *jerr) {
  size_t pos = jerr->position < 0 ? 0 : (size_t)jerr->position;
  if (pos > n)
    pos = n;
  const char *key = NULL;
  size_t keylen = 0;
  char name[200];
  const char *what = json_error_code(jerr) == json_error_duplicate_key ? "has a duplicate key"
                                                                       : "is not valid JSON";
  if (key_at(text, pos, &key, &keylen)) {
    printable(key, keylen, 120, name, sizeof name);
    if (strcmp(name, "__metadata__") != 0)
      return fail(d, NULL, "tensor '%s': header %s: %s (byte %zu)", name, what, jerr->text, pos);
  }
  return fail(d, NULL, "header %s: %s (byte %zu)", what, jerr->text, pos);
}

static json_t *parse_header(const Diag *d, const char *text, size_t n) {
  json_error_t jerr;
  json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
  if (!root) {
    json_error(d, text, n, &jerr);
    return NULL;
  }
  if (!json_is_object(root)) {
    fail(d, NULL, "header is %s, not a JSON object", json_kind(root));
    json_decref(root);
    return NULL;
  }
  /* jansson skips leading whitespace; the reference reader does not. Trailing spaces are
   * the padding writers add, and both allow them. */
  if (text[0] != '{') {
    fail(d, NULL, "header must start with '{' (found leading whitespace)");
    json_decref(root);
    return NULL;
  }
  return root;
}

/* ---- entries ---------------------------------------------------------- */

/* A JSON integer >= 0. jansson already refuses integers beyond int64 while parsing. */
static bool read_count(const Diag *d, const char *tensor, const char *what, const json_t *v,
                       int64_t *out) {
  if (json_is_real(v))
    return fail(d, tensor, "%s is a real number (%g), not an integer", what, json_real_value(v));
  if (!json_is_integer(v))
    return fail(d, tensor, "%s is %s, not an integer", what, json_kind(v));
  json_int_t x = json_integer_value(v);
  if (x < 0)
    return fail(d, tensor, "%s is negative (%lld)", what, (long long)x);
  *out = x;
  return true;
}

static bool read_dtype(const Diag *d, const char *name, const json_t *v, DType *out) {
  char buf[200];
  if (!json_is_string(v))
    return fail(d, name, "dtype is %s, not a string", json_kind(v));
  *out = dtype_from_st_name(json_string_value(v));
  if (*out == DT_NONE)
    return fail(d, name, "unknown dtype '%s'",
                printable_str(json_string_value(v), buf, sizeof buf));
  return true;
}

static bool read_shape(const Diag *d, const char *name, const json_t *v, StTensor *t) {
  if (!json_is_array(v))
    return fail(d, name, "shape is %s, not an array", json_kind(v));
  if (json_array_size(v) > FFN_MAX_RANK)
    return fail(d, name, "shape has rank %zu; at most %d is supported", json_array_size(v),
                FFN_MAX_RANK);
  t->rank = (int)json_array_size(v);
  for (int i = 0; i < t->rank; i++) {
    char what[32];
    snprintf(what, sizeof what, "shape[%d]", i);
    if (!read_count(d, name, what, json_array_get(v, (size_t)i), &t->shape[i]))
      return false;
  }
  return true;
}

static bool read_offsets(const Diag *d, const char *name, const json_t *v, Entry *e) {
  if (!json_is_array(v))
    return fail(d, name, "data_offsets is %s, not an array", json_kind(v));
  if (json_array_size(v) != 2)
    return fail(d, name, "data_offsets has %zu entries, not 2", json_array_size(v));
  int64_t begin, end;
  if (!read_count(d, name, "data_offsets[0]", json_array_get(v, 0), &begin) ||
      !read_count(d, name, "data_offsets[1]", json_array_get(v, 1), &end))
    return false;
  if (begin > end)
    return fail(d, name, "data_offsets [%lld, %lld] begin after they end", (long long)begin,
                (long long)end);
  e->begin = (uint64_t)begin;
  e->end = (uint64_t)end;
  return true;
}

/* The byte size that dtype and shape need must be what data_offsets hold. */
static bool check_size(const Diag *d, const char *name, const Entry *e) {
  const StTensor *t = &e->t;
  char shape[200];
  ffn_shape_text(t->rank, t->shape, shape, sizeof shape);
  uint64_t numel = 1, nbytes;
  for (int i = 0; i < t->rank; i++)
    if (__builtin_mul_overflow(numel, (uint64_t)t->shape[i], &numel))
      return fail(d, name, "number of elements of shape %s overflows 64 bits", shape);
  /* Every safetensors dtype is a whole number of bytes (only i4 is not, and it has no
   * safetensors name). */
  if (__builtin_mul_overflow(numel, (uint64_t)dtype_bits(t->dtype) / 8, &nbytes))
    return fail(d, name, "byte size of shape %s of %s overflows 64 bits", shape,
                dtype_st_name(t->dtype));
  if (nbytes != e->end - e->begin)
    return fail(d, name, "data_offsets [%llu, %llu] hold %llu bytes but shape %s of %s needs %llu",
                (unsigned long long)e->begin, (unsigned long long)e->end,
                (unsigned long long)(e->end - e->begin), shape, dtype_st_name(t->dtype),
                (unsigned long long)nbytes);
  return true;
}

static bool read_tensor(StFile *f, const Diag *d, const char *name, const json_t *v, Entry *e) {
  if (!*name)
    return fail(d, NULL, "a tensor has an empty name");
  if (!json_is_object(v))
    return fail(d, name, "entry is %s, not an object", json_kind(v));
  static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
  const char *key;
  json_t *field;
  char buf[200];
  json_object_foreach((json_t *)v, key, field) {
    if (strcmp(key, fields[0]) && strcmp(key, fields[1]) && strcmp(key, fields[2]))
      return fail(d, name, "unknown field '%s' (allowed: dtype, shape, data_offsets)",
                  printable_str(key, buf, sizeof buf));
  }
  for (int i = 0; i < 3; i++)
    if (!json_object_get(v, fields[i]))
      return fail(d, name, "missing field '%s'", fields[i]);
  e->t.name = arena_strdup(f->arena, name);
  return read_dtype(d, name, json_object_get(v, "dtype"), &e->t.dtype) &&
         read_shape(d, name, json_object_get(v, "shape"), &e->t) &&
         read_offsets(d, name, json_object_get(v, "data_offsets"), e) && check_size(d, name, e);
}

static bool read_metadata(StFile *f, const Diag *d, const json_t *meta) {
  if (!json_is_object(meta))
    return fail(d, NULL, "__metadata__ is %s, not an object", json_kind(meta));
  size_t n = json_object_size(meta);
  f->meta_keys = arena_alloc(f->arena, n * sizeof *f->meta_keys);
  f->meta_values = arena_alloc(f->arena, n * sizeof *f->meta_values);
  const char *key;
  json_t *v;
  char buf[200];
  json_object_foreach((json_t *)meta, key, v) {
    if (!json_is_string(v))
      return fail(d, NULL, "__metadata__ value of '%s' is %s, not a string",
                  printable_str(key, buf, sizeof buf), json_kind(v));
    f->meta_keys[f->nmeta] = arena_strdup(f->arena, key);
    f->meta_values[f->nmeta++] = arena_strdup(f->arena, json_string_value(v));
  }
  return true;
}

static bool read_entries(StFile *f, const Diag *d, const json_t *root) {
  size_t n = json_object_size(root);
  f->entries = arena_alloc(f->arena, n * sizeof *f->entries);
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)root, key, v) {
    if (strcmp(key, "__metadata__") == 0) {
      if (!read_metadata(f, d, v))
        return false;
      continue;
    }
    Entry *e = &f->entries[f->count];
    e->order = f->count++;
    if (!read_tensor(f, d, key, v, e))
      return false;
  }
  return true;
}

/* ---- layout ----------------------------------------------------------- */

static int by_offset(const void *pa, const void *pb) {
  const Entry *a = pa, *b = pb;
  if (a->begin != b->begin)
    return a->begin < b->begin ? -1 : 1;
  if (a->end != b->end)
    return a->end < b->end ? -1 : 1;
  return a->order - b->order;
}

/* Sorted by offset, the tensors must tile the data buffer: from 0, no holes, no overlaps,
 * nothing after the last. */
static bool check_layout(StFile *f, const Diag *d, const unsigned char *data, size_t data_len) {
  qsort(f->entries, (size_t)f->count, sizeof *f->entries, by_offset);
  uint64_t at = 0;
  char other[200];
  for (int i = 0; i < f->count; i++) {
    Entry *e = &f->entries[i];
    unsigned long long b = e->begin, end = e->end;
    const Entry *prev = i ? &f->entries[i - 1] : NULL;
    if (prev)
      printable_str(prev->t.name, other, sizeof other);
    if (!prev && b != 0)
      return fail(d, e->t.name,
                  "data_offsets [%llu, %llu] do not begin at 0 (tensors must fill "
                  "the data buffer from its start)",
                  b, end);
    if (b < at)
      return fail(d, e->t.name, "data_offsets [%llu, %llu] overlap tensor '%s' [%llu, %llu]", b,
                  end, other, (unsigned long long)prev->begin, (unsigned long long)prev->end);
    if (b > at)
      return fail(d, e->t.name,
                  "data_offsets [%llu, %llu] leave a hole of %llu bytes after "
                  "tensor '%s' (which ends at %llu)",
                  b, end, b - at, other, (unsigned long long)at);
    if (end > data_len)
      return fail(d, e->t.name,
                  "data_offsets [%llu, %llu] run past the end of the data buffer "
                  "(%zu bytes; truncated file?)",
                  b, end, data_len);
    e->t.data = data + e->begin;
    e->t.nbytes = (size_t)(e->end - e->begin);
    at = e->end;
  }
  if (at != data_len)
    return fail(d, NULL,
                "%llu trailing bytes after the last tensor (the data buffer holds %zu "
                "bytes, the tensors %llu)",
                (unsigned long long)(data_len - at), data_len, (unsigned long long)at);
  return true;
}

/* ---- reader API ------------------------------------------------------- */

StFile *st_open_memory(const void *buf, size_t len, const char *label, char *err, size_t errlen) {
  Diag d = {label ? label : "<memory>", err, errlen};
  const unsigned char *bytes = buf;
  uint64_t header_len = 0;
  if (!read_header_len(&d, bytes, len, &header_len))
    return NULL;
  json_t *root = parse_header(&d, (const char *)bytes + 8, (size_t)header_len);
  if (!root)
    return NULL;
  Arena *arena = arena_create();
  StFile *f = arena_alloc(arena, sizeof *f);
  f->arena = arena;
  f->label = arena_strdup(arena, d.label);
  size_t data_start = 8 + (size_t)header_len;
  bool ok = read_entries(f, &d, root) && check_layout(f, &d, bytes + data_start, len - data_start);
  json_decref(root);
  if (!ok) {
    st_close(f);
    return NULL;
  }
  build_index(f);
  return f;
}

StFile *st_open(const char *path, char *err, size_t errlen) {
  Diag d = {path, err, errlen};
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fail(&d, NULL, "cannot open: %s", strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    (void)close(fd); /* read-only: nothing is lost if this fails */
    fail(&d, NULL, "cannot stat: %s", strerror(e));
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    (void)close(fd);
    fail(&d, NULL, "cannot open: %s",
         S_ISDIR(st.st_mode) ? strerror(EISDIR) : "not a regular file");
    return NULL;
  }
  size_t len = (size_t)st.st_size;
  void *map = NULL;
  /* mmap refuses length 0; an empty file is still read, to get the usual message. */
  if (len > 0) {
    map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      int e = errno;
      (void)close(fd);
      fail(&d, NULL, "cannot map: %s", strerror(e));
      return NULL;
    }
  }
  /* The mapping outlives the descriptor. */
  if (close(fd) != 0) {
    int e = errno;
    if (map)
      (void)munmap(map, len);
    fail(&d, NULL, "cannot close: %s", strerror(e));
    return NULL;
  }
  StFile *f = st_open_memory(map ? map : "", len, path, err, errlen);
  if (!f) {
    if (map)
      (void)munmap(map, len);
    return NULL;
  }
  f->map = map;
  f->map_len = len;
  return f;
}

void st_close(StFile *f) {
  if (!f)
    return;
  /* munmap of a mapping we made cannot fail in a way the caller could act on. */
  if (f->map)
    (void)munmap(f->map, f->map_len);
  arena_destroy(f->arena);
}

int st_count(const StFile *f) { return f ? f->count : 0; }

const StTensor *st_get(const StFile *f, int i) {
  return f && i >= 0 && i < f->count ? &f->entries[i].t : NULL;
}

const StTensor *st_find(const StFile *f, const char *name) {
  if (!f || !name || f->count == 0)
    return NULL;
  StTensor key = {.name = name};
  const StTensor *keyp = &key;
  const StTensor **hit = bsearch(&keyp, f->by_name, (size_t)f->count, sizeof *f->by_name, by_name);
  return hit ? *hit : NULL;
}

int st_meta_count(const StFile *f) { return f ? f->nmeta : 0; }

const char *st_meta_key(const StFile *f, int i) {
  return f && i >= 0 && i < f->nmeta ? f->meta_keys[i] : NULL;
}

/* Linear: metadata holds a handful of entries. */
const char *st_meta_get(const StFile *f, const char *key) {
  for (int i = 0; f && key && i < f->nmeta; i++)
    if (strcmp(f->meta_keys[i], key) == 0)
      return f->meta_values[i];
  return NULL;
}

const char *st_label(const StFile *f) { return f ? f->label : NULL; }

/* ---- writer ----------------------------------------------------------- */

typedef struct {
  const void *data; /* the caller's; not copied */
  size_t nbytes;
} WEntry;

struct StWriter {
  Arena *arena;
  json_t *tensors; /* name -> header entry, in insertion order (also finds duplicates) */
  json_t *meta;    /* "__metadata__" */
  PtrVec entries;  /* WEntry*, in insertion order = data order */
  uint64_t data_len;
};

StWriter *st_writer_create(void) {
  Arena *arena = arena_create();
  StWriter *w = arena_alloc(arena, sizeof *w);
  w->arena = arena;
  w->tensors = json_object();
  w->meta = json_object();
  if (!w->tensors || !w->meta) {
    st_writer_destroy(w);
    return NULL;
  }
  return w;
}

void st_writer_destroy(StWriter *w) {
  if (!w)
    return;
  json_decref(w->tensors);
  json_decref(w->meta);
  arena_destroy(w->arena);
}

/* The header entry for a tensor whose arguments st_writer_add has checked. */
static json_t *tensor_json(DType dtype, int rank, const int64_t *shape, uint64_t begin,
                           uint64_t end) {
  json_t *dims = json_array();
  if (!dims)
    return NULL;
  for (int i = 0; i < rank; i++)
    if (json_array_append_new(dims, json_integer(shape[i])) != 0) {
      json_decref(dims);
      return NULL;
    }
  /* "o" hands dims over, also when json_pack fails. */
  return json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtype_st_name(dtype), "shape", dims,
                   "data_offsets", (json_int_t)begin, (json_int_t)end);
}

static bool check_add(const StWriter *w, const Diag *d, const char *name, DType dtype, int rank,
                      const int64_t *shape, const void *data, size_t nbytes) {
  if (!name || !*name)
    return fail(d, NULL, "a tensor needs a non-empty name");
  if (strcmp(name, "__metadata__") == 0)
    return fail(d, name, "the name is reserved for metadata");
  if (json_object_get(w->tensors, name))
    return fail(d, name, "duplicate tensor name");
  if (!dtype_st_name(dtype))
    return fail(d, name, "dtype %s has no safetensors name, so it cannot be written",
                dtype_name(dtype));
  if (rank < 0 || rank > FFN_MAX_RANK || (rank > 0 && !shape))
    return fail(d, name, "rank %d is not supported (0 to %d)", rank, FFN_MAX_RANK);
  uint64_t numel = 1, need;
  for (int i = 0; i < rank; i++)
    if (shape[i] < 0 || __builtin_mul_overflow(numel, (uint64_t)shape[i], &numel))
      return fail(d, name, "shape[%d] = %lld is negative or makes the size overflow", i,
                  (long long)shape[i]);
  char text[200];
  /* dtype_bytes rounds bits up to bytes: leave it room for the +7. */
  if (__builtin_mul_overflow(numel, (uint64_t)dtype_bits(dtype), &need) || need > UINT64_MAX - 7)
    return fail(d, name, "byte size of shape %s overflows 64 bits",
                ffn_shape_text(rank, shape, text, sizeof text));
  need = dtype_bytes(dtype, numel);
  if (nbytes != need)
    return fail(d, name, "%zu bytes given but shape %s of %s needs %llu", nbytes,
                ffn_shape_text(rank, shape, text, sizeof text), dtype_st_name(dtype),
                (unsigned long long)need);
  if (nbytes > 0 && !data)
    return fail(d, name, "no data for %zu bytes", nbytes);
  if (nbytes > (uint64_t)INT64_MAX - w->data_len)
    return fail(d, name, "the data buffer would exceed 2^63 bytes");
  return true;
}

int st_writer_add(StWriter *w, const char *name, DType dtype, int rank, const int64_t *shape,
                  const void *data, size_t nbytes, char *err, size_t errlen) {
  Diag d = {"safetensors writer", err, errlen};
  if (!check_add(w, &d, name, dtype, rank, shape, data, nbytes))
    return -1;
  json_t *entry = tensor_json(dtype, rank, shape, w->data_len, w->data_len + nbytes);
  if (!entry) {
    fail(&d, name, "out of memory");
    return -1;
  }
  /* jansson refuses keys that are not UTF-8 (and drops entry then). */
  if (json_object_set_new(w->tensors, name, entry) != 0) {
    fail(&d, name, "the name is not valid UTF-8");
    return -1;
  }
  WEntry *e = arena_alloc(w->arena, sizeof *e);
  e->data = data;
  e->nbytes = nbytes;
  ptrvec_push(w->arena, &w->entries, e);
  w->data_len += nbytes;
  return 0;
}

int st_writer_meta(StWriter *w, const char *key, const char *value) {
  if (!w || !key || !value)
    return -1;
  /* json_string is NULL for invalid UTF-8, which json_object_set_new refuses. */
  return json_object_set_new(w->meta, key, json_string(value)) == 0 ? 0 : -1;
}

/* The header JSON (metadata first, as the reference writes it) padded with spaces to a
 * multiple of 8 bytes, so the data buffer starts 8-aligned. malloc'd. */
static char *make_header(const StWriter *w, const Diag *d, size_t *len) {
  json_t *top = json_object();
  if (!top) {
    fail(d, NULL, "out of memory");
    return NULL;
  }
  bool ok =
      (json_object_size(w->meta) == 0 || json_object_set(top, "__metadata__", w->meta) == 0) &&
      json_object_update(top, w->tensors) == 0;
  char *text = ok ? json_dumps(top, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(top);
  if (!text) {
    fail(d, NULL, "out of memory while writing the header");
    return NULL;
  }
  size_t n = strlen(text), padded = (n + 7) & ~(size_t)7;
  if (padded > ST_MAX_HEADER) {
    free(text);
    fail(d, NULL, "header of %zu bytes exceeds the limit of %u bytes", padded, ST_MAX_HEADER);
    return NULL;
  }
  char *out = realloc(text, padded);
  if (!out) {
    free(text);
    fail(d, NULL, "out of memory while writing the header");
    return NULL;
  }
  memset(out + n, ' ', padded - n);
  *len = padded;
  return out;
}

static void put_le64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

int st_writer_to_memory(StWriter *w, void **buf, size_t *len, char *err, size_t errlen) {
  Diag d = {"<memory>", err, errlen};
  *buf = NULL;
  *len = 0;
  size_t header_len;
  char *header = make_header(w, &d, &header_len);
  if (!header)
    return -1;
  size_t total;
  unsigned char *out = NULL;
  if (!__builtin_add_overflow(8 + header_len, w->data_len, &total))
    out = malloc(total);
  if (!out) {
    free(header);
    fail(&d, NULL, "cannot allocate %llu bytes", 8ull + header_len + w->data_len);
    return -1;
  }
  put_le64(out, header_len);
  memcpy(out + 8, header, header_len);
  free(header);
  size_t at = 8 + header_len;
  for (int i = 0; i < w->entries.len; i++) {
    const WEntry *e = w->entries.items[i];
    if (e->nbytes) /* data may be NULL for empty tensors; memcpy(NULL, 0) is undefined */
      memcpy(out + at, e->data, e->nbytes);
    at += e->nbytes;
  }
  *buf = out;
  *len = total;
  return 0;
}

/* ---- save: regular files atomically, devices and pipes in place (outfile.h) ---- */

static bool write_file(const StWriter *w, const Diag *d, OutFile *o, const char *header, size_t header_len) {
  unsigned char len_bytes[8];
  put_le64(len_bytes, header_len);
  char why[512];
  bool ok = outfile_write(o, len_bytes, 8, why, sizeof why) == 0 &&
            outfile_write(o, header, header_len, why, sizeof why) == 0;
  for (int i = 0; ok && i < w->entries.len; i++) {
    const WEntry *e = w->entries.items[i];
    ok = !e->nbytes || outfile_write(o, e->data, e->nbytes, why, sizeof why) == 0;
  }
  ok = ok && outfile_commit(o, why, sizeof why) == 0;
  if (!ok)
    snprintf(d->err, d->errlen, "%s", why); /* names the path already */
  return ok;
}
int st_writer_save(StWriter *w, const char *path, char *err, size_t errlen) {
  Diag d = {path, err, errlen};
  size_t header_len;
  char *header = make_header(w, &d, &header_len);
  if (!header)
    return -1;
  OutFile o; /* regular files atomically, devices and pipes in place (outfile.h) */
  bool ok = outfile_open(&o, path, err, errlen) == 0 && write_file(w, &d, &o, header, header_len);
  free(header);
  return ok ? 0 : -1;
}
