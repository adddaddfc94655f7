/* tune_store.c: the file format of tuned GEMM choices (tune.h): writing, strict parsing,
 * checking against the loading model's key, and the bucket a call uses. No CUDA here. */
#include "tune.h"
#include "../ir/fnv.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[] = "ffnc-tune 1\n";
enum { MAX_FILE = 64 * 1024 };


/* Text fields are one line each: a name with a line break or a control byte (no device
 * has one) is written with '?' in its place, and then matches no key. */
static void clean(char *dst, size_t len, const char *src) {
  snprintf(dst, len, "%s", src);
  for (char *p = dst; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      *p = '?';
}

static int key_lines(const TuneKey *k, char *buf, size_t len) {
  char device[sizeof k->device], ffnc[sizeof k->ffnc], arch[sizeof k->arch], dtype[sizeof k->dtype];
  clean(device, sizeof device, k->device);
  clean(ffnc, sizeof ffnc, k->ffnc);
  clean(arch, sizeof arch, k->arch);
  clean(dtype, sizeof dtype, k->dtype);
  return snprintf(buf, len, "device %s\nsms %d\ndriver %d\nffnc %s\nkernel %s\narch %s\ndtype %s\nshape %lld %lld %d\n",
                  device, k->sms, k->driver, ffnc, k->kernel, arch, dtype, (long long)k->n, (long long)k->k,
                  k->streams);
}

char *tune_format(const TuneEntry *e) {
  size_t cap = 2048 + (size_t)e->n * 128;
  char *out = malloc(cap);
  if (!out)
    return NULL;
  size_t at = (size_t)snprintf(out, cap, "%s", MAGIC);
  at += (size_t)key_lines(&e->key, out + at, cap - at);
  for (int i = 0; i < e->n && at < cap; i++) {
    const TuneBucket *b = &e->b[i];
    char config[sizeof b->config];
    clean(config, sizeof config, b->config);
    at += (size_t)snprintf(out + at, cap - at, "bucket %lld %s %d %.3f %.3f\n", (long long)b->rows, config, b->splits,
                           b->us, b->default_us);
  }
  if (at + 64 >= cap) { /* cannot happen with the fields' sizes; never write a cut file */
    free(out);
    return NULL;
  }
  snprintf(out + at, cap - at, "sum %016llx\n", (unsigned long long)ffn_fnv(out, at, FFN_FNV_OFFSET));
  return out;
}

static int fail(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (why && len)
    vsnprintf(why, len, fmt, ap);
  va_end(ap);
  return -1;
}

/* The next line of [*p, end) without its newline, into line (NUL-terminated); false at the end,
 * for a line without its newline, or one too long. */
static bool next_line(const char **p, const char *end, char *line, size_t len) {
  const char *nl = memchr(*p, '\n', (size_t)(end - *p));
  if (!nl || (size_t)(nl - *p) >= len)
    return false;
  memcpy(line, *p, (size_t)(nl - *p));
  line[nl - *p] = 0;
  *p = nl + 1;
  return true;
}

/* A whole decimal integer in [lo, hi]. */
static bool parse_int(const char *s, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  if (!((*s >= '0' && *s <= '9') || *s == '-'))
    return false;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi)
    return false;
  *out = v;
  return true;
}

static bool parse_time(const char *s, double *out) {
  char *end;
  if (!(*s >= '0' && *s <= '9'))
    return false;
  double v = strtod(s, &end);
  if (end == s || *end || !isfinite(v) || v < 0)
    return false;
  *out = v;
  return true;
}

static bool config_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= sizeof(((TuneBucket *)0)->config))
    return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_'))
      return false;
  return true;
}

/* A bucket line's fields (after "bucket "). */
static bool parse_bucket(char *s, TuneBucket *b) {
  char *f[5];
  int n = 0;
  for (char *tok = strtok(s, " "); tok && n < 6; tok = strtok(NULL, " "))
    if (n < 5)
      f[n++] = tok;
    else
      return false;
  long long rows, splits;
  if (n != 5 || !parse_int(f[0], 1, 2147483647, &rows) || !config_name(f[1]) ||
      !parse_int(f[2], 0, TUNE_MAX_SPLITS, &splits) || !parse_time(f[3], &b->us) || !parse_time(f[4], &b->default_us))
    return false;
  b->rows = rows;
  snprintf(b->config, sizeof b->config, "%s", f[1]);
  b->splits = (int)splits;
  return true;
}

/* The checksum line, the file's last, over everything before it: where it starts, or NULL after
 * saying why. */
static const char *checked_sum(const char *text, const char *end, char *why, size_t whylen) {
  const char *sum = NULL;
  for (const char *q = text; q < end; q++)
    if ((q == text || q[-1] == '\n') && (size_t)(end - q) >= 4 && memcmp(q, "sum ", 4) == 0)
      sum = q;
  char line[512];
  const char *s = sum;
  if (!sum || !next_line(&s, end, line, sizeof line) || s != end || strlen(line) != 20)
    return fail(why, whylen, "damaged (no checksum line at the end: truncated?)"), NULL;
  char *hex_end;
  errno = 0;
  unsigned long long stored = strtoull(line + 4, &hex_end, 16);
  if (*hex_end || errno || ffn_fnv(text, (size_t)(sum - text), FFN_FNV_OFFSET) != stored)
    return fail(why, whylen, "damaged (checksum mismatch)"), NULL;
  return sum;
}

/* The key lines at p (before sum) against the loading model's: their length, or -1 after saying
 * which line differs (another device, driver, ffnc build or kernel). */
static int checked_key(const char *p, const char *sum, const TuneKey *want, char *why, size_t whylen) {
  char expect[2048];
  int klen = key_lines(want, expect, sizeof expect);
  if (klen < 0 || (size_t)klen >= sizeof expect || (size_t)(sum - p) < (size_t)klen)
    return fail(why, whylen, "damaged (short key)");
  if (memcmp(p, expect, (size_t)klen) == 0)
    return klen;
  const char *a = p, *b = expect;
  char got[512], exp[512];
  while (next_line(&a, sum, got, sizeof got) && next_line(&b, expect + klen, exp, sizeof exp))
    if (strcmp(got, exp) != 0)
      return fail(why, whylen, "made for another %.*s (the file has \"%.200s\", this is \"%.200s\")",
                  (int)strcspn(exp, " "), exp, got, exp);
  return fail(why, whylen, "made for another key");
}

int tune_parse(const char *text, size_t len, const TuneKey *want, TuneEntry *out, char *why, size_t whylen) {
  const char *end = text + len;
  size_t mlen = strlen(MAGIC);
  if (len < mlen || memcmp(text, MAGIC, mlen) != 0)
    return fail(why, whylen, "not a tuning file of this format (no \"ffnc-tune 1\" line)");
  const char *sum = checked_sum(text, end, why, whylen);
  if (!sum)
    return -1;
  int klen = checked_key(text + mlen, sum, want, why, whylen);
  if (klen < 0)
    return -1;
  const char *p = text + mlen + klen;
  TuneEntry e = {.key = *want};
  char line[512];
  while (p < sum) {
    if (!next_line(&p, sum, line, sizeof line) || strncmp(line, "bucket ", 7) != 0)
      return fail(why, whylen, "damaged (an unexpected line)");
    if (e.n == TUNE_MAX_BUCKETS)
      return fail(why, whylen, "damaged (more than %d buckets)", TUNE_MAX_BUCKETS);
    TuneBucket *b = &e.b[e.n];
    if (!parse_bucket(line + 7, b))
      return fail(why, whylen, "damaged (bucket %d)", e.n + 1);
    if (e.n > 0 && b->rows <= e.b[e.n - 1].rows)
      return fail(why, whylen, "damaged (buckets out of order)");
    e.n++;
  }
  if (e.n == 0)
    return fail(why, whylen, "damaged (no buckets)");
  *out = e;
  return 0;
}

void tune_path(const char *dir, const TuneKey *k, char *buf, size_t len) {
  char text[2048];
  int n = key_lines(k, text, sizeof text);
  size_t m = n < 0 ? 0 : (size_t)n < sizeof text ? (size_t)n : sizeof text - 1;
  snprintf(buf, len, "%s/tune-%016llx%016llx.txt", dir, (unsigned long long)ffn_fnv(text, m, FFN_FNV_OFFSET),
           (unsigned long long)ffn_fnv(text, m, FFN_FNV_OFFSET2));
}

int tune_save(const char *dir, const TuneEntry *e, char *why, size_t whylen) {
  char path[4096], tmp[4200];
  tune_path(dir, &e->key, path, sizeof path);
  char *text = tune_format(e);
  if (!text)
    return fail(why, whylen, "out of host memory");
  snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    free(text);
    return fail(why, whylen, "cannot create a file in %s: %s", dir, strerror(errno));
  }
  FILE *f = fdopen(fd, "wb");
  size_t n = strlen(text);
  bool ok = f && fwrite(text, 1, n, f) == n;
  int err = errno;
  if (f)
    ok = fclose(f) == 0 && ok;
  else
    close(fd);
  free(text);
  if (!ok || rename(tmp, path) != 0) {
    err = ok ? errno : err;
    unlink(tmp);
    return fail(why, whylen, "cannot write %s: %s", path, strerror(err));
  }
  return 0;
}

int tune_load(const char *dir, const TuneKey *want, TuneEntry *out, char *why, size_t whylen) {
  char path[4096];
  tune_path(dir, want, path, sizeof path);
  FILE *f = fopen(path, "rb");
  if (!f)
    return 0;
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_FILE) {
    fclose(f);
    return fail(why, whylen, "%s: not a regular file of at most %d bytes", path, MAX_FILE);
  }
  char *text = malloc((size_t)st.st_size + 1);
  size_t n = text ? fread(text, 1, (size_t)st.st_size, f) : 0;
  fclose(f);
  if (!text || n != (size_t)st.st_size) {
    free(text);
    return fail(why, whylen, "%s: cannot read it", path);
  }
  char reason[768];
  int rc = tune_parse(text, n, want, out, reason, sizeof reason);
  free(text);
  if (rc != 0)
    return fail(why, whylen, "%s: %s", path, reason);
  return 1;
}

const TuneBucket *tune_lookup(const TuneEntry *e, int64_t rows) {
  const TuneBucket *at = NULL;
  for (int i = 0; i < e->n && e->b[i].rows <= rows; i++)
    at = &e->b[i];
  return at;
}
