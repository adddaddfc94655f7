/* cache_test.c: the NVRTC kernel cache and compile-failure reporting (no GPU needed).
 *
 *  - the first compile writes an entry per compile unit into $FFNC_CACHE_DIR (the runtime's
 *    kernels, the model's kernel); a second compile of the same model hits them (no new entry,
 *    the same images); another model adds only its own kernel's;
 *  - FFNC_NO_CACHE=1 compiles without reading or writing the cache;
 *  - NVRTC rejecting generated code gives FFN_ERR_COMPILE with NVRTC's log and the source with
 *    line numbers;
 *  - a damaged entry (flipped byte, zeroed image, truncated, empty, wrong length field,
 *    trailing bytes, PTX without its NUL) is a miss, and the next store replaces it; through
 *    nvrtc_compile, the image is compiled again, never taken from the damaged entry;
 *  - a fresh cache directory is created 0700; one writable by group or others, or owned by
 *    another user, is neither read nor written, and cache_untrusted() says why.
 *
 * The cache reads its environment once per process, so each case runs in a child process.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "include/ffn.h"
#include "runtime/rt.h"

#include "check.h"

/* The entry layout of cache.c: magic, key length, image length, kind, checksum, key, image. */
enum { HEADER = 33, OFF_ILEN = 16, OFF_KIND = 24 };

static int entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    n += strstr(e->d_name, ".bin") != NULL;
  if (d)
    closedir(d);
  return n;
}

/* The path of the one entry in dir ("" if none). */
static void entry_file(const char *dir, char *path, size_t len) {
  DIR *d = opendir(dir);
  path[0] = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    if (strstr(e->d_name, ".bin"))
      snprintf(path, len, "%s/%s", dir, e->d_name);
  if (d)
    closedir(d);
}

static unsigned char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  unsigned char *buf = malloc(1 << 24);
  *len = f && buf ? fread(buf, 1, 1 << 24, f) : 0;
  if (f)
    fclose(f);
  return buf;
}

static void write_all(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(data, 1, len, f) == len && fclose(f) == 0, "cannot write %s", path);
}

static uint64_t fnv(const void *data, size_t n, uint64_t h) {
  for (size_t i = 0; i < n; i++)
    h = (h ^ ((const unsigned char *)data)[i]) * 1099511628211ull;
  return h;
}

/* An entry as cache.c lays it out, with a correct checksum, for contents cache_put would
 * never write. */
static void write_entry(const char *path, const void *key, uint64_t klen, const void *img, uint64_t ilen,
                        unsigned char ptx) {
  uint64_t sum = fnv(&klen, 8, 1469598103934665603ull);
  sum = fnv(img, ilen, fnv(key, klen, fnv(&ptx, 1, fnv(&ilen, 8, sum))));
  FILE *f = fopen(path, "wb");
  bool ok = f && fwrite("FFNCKC2\n", 1, 8, f) == 8 && fwrite(&klen, 8, 1, f) == 1 && fwrite(&ilen, 8, 1, f) == 1 &&
            fwrite(&ptx, 1, 1, f) == 1 && fwrite(&sum, 8, 1, f) == 1 && fwrite(key, 1, klen, f) == klen &&
            fwrite(img, 1, ilen, f) == ilen;
  CHECK(f && fclose(f) == 0 && ok, "cannot write %s", path);
}

/* Runs case fn(arg) in a child process (a fresh cache state); a failed check there fails it. */
static void in_child(const char *name, void (*fn)(const char *), const char *arg) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    check_failures = 0; /* the parent's count so far is not this case's */
    fn(arg);
    exit(check_failures ? 1 : 0);
  }
  int st = 0;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "case '%s' failed", name);
}

static void use_dir(const char *dir) {
  setenv("FFNC_CACHE_DIR", dir, 1);
  unsetenv("FFNC_NO_CACHE");
}

/* ---- compiles through the cache ---- */

static const char *model_a = "model a\ndim T\ninput x : [T, 64] f32\ny = relu(x) * 2\noutput y\n";
static const char *model_b = "model b\ndim T\ninput x : [T, 64] f32\ny = silu(x) + 1\noutput y\n";

static ffn_program *compile(const char *src) {
  ffn_options *o;
  ffn_options_create(&o);
  ffn_options_set_arch(o, "sm_80");
  ffn_program *p = NULL;
  ffn_status s = ffn_program_compile(src, strlen(src), "cache_test.ffn", o, &p);
  ffn_options_destroy(o);
  CHECK(s == FFN_OK, "compile: %s", ffn_last_error());
  return p;
}

static bool same_images(const ffn_program *a, const ffn_program *b) {
  if (!a || !b || a->nimages != b->nimages)
    return false;
  for (int i = 0; i < a->nimages; i++)
    if (a->images[i].size != b->images[i].size || memcmp(a->images[i].image, b->images[i].image, a->images[i].size))
      return false;
  return true;
}

/* A program is compiled as several NVRTC programs, each its own entry: the runtime's kernels
 * and, for these models, one rowwise kernel. */
static void hits_and_misses(const char *dir) {
  use_dir(dir);
  ffn_program *a1 = compile(model_a);
  CHECK(a1 && a1->nimages == 2, "model a: %d images, expected 2 (the runtime's kernels, one kernel)",
        a1 ? a1->nimages : -1);
  CHECK(entries(dir) == 2, "first compile: %d entries, expected 2", entries(dir));
  ffn_program *a2 = compile(model_a);
  CHECK(entries(dir) == 2, "second compile of the same model: %d entries, expected 2", entries(dir));
  CHECK(same_images(a1, a2), "the cached images differ from the compiled ones");
  ffn_program *b = compile(model_b);
  CHECK(entries(dir) == 3, "another model: %d entries, expected 3 (its kernel; the runtime's are shared)",
        entries(dir));
  ffn_program_destroy(a1);
  ffn_program_destroy(a2);
  ffn_program_destroy(b);

  /* NVRTC rejects broken source: the error carries the log and numbered source */
  Image img;
  ffn_status s = nvrtc_compile("extern \"C\" __global__ void k() {\n  undefined_thing();\n}\n", "broken.cu", "sm_80",
                               false, &img);
  const char *e = ffn_last_error();
  CHECK(s == FFN_ERR_COMPILE, "broken source: status %d", (int)s);
  CHECK(strstr(e, "nvrtcCompileProgram failed") && strstr(e, "undefined_thing") && strstr(e, "    2  "),
        "compile error lacks the log or the numbered source:\n%s", e);

  /* compiled together with others, on several threads: the failure is the broken one's, with
   * its name, and no image is handed out */
  setenv("FFNC_JIT_THREADS", "3", 1);
  CompileUnit units[] = {{"good_one", (char *)"extern \"C\" __global__ void g1(float *p) { p[0] = 1.0f; }\n", 1, 0},
                         {"broken_one", (char *)"extern \"C\" __global__ void k() {\n  undefined_thing();\n}\n", 1, 1},
                         {"good_two", (char *)"extern \"C\" __global__ void g2(float *p) { p[0] = 2.0f; }\n", 1, 2}};
  Image imgs[3] = {{0}};
  s = nvrtc_compile_units(units, 3, "sm_80", NULL, NULL, imgs);
  e = ffn_last_error();
  CHECK(s == FFN_ERR_COMPILE && strstr(e, "broken_one.cu") && strstr(e, "undefined_thing"),
        "a broken unit among others: status %d, error:\n%s", (int)s, e);
  CHECK(!imgs[0].image && !imgs[1].image && !imgs[2].image, "images were handed out after a failure");
  unsetenv("FFNC_JIT_THREADS");
}

static void no_cache(const char *dir) {
  use_dir(dir);
  setenv("FFNC_NO_CACHE", "1", 1);
  ffn_program_destroy(compile(model_a));
  CHECK(entries(dir) == 0, "FFNC_NO_CACHE=1 wrote %d entries", entries(dir));
}

/* ---- damaged entries, through cache_put and cache_get ---- */

static const char key[] = "the key of one entry";

/* cache_get of key finds exactly img (size bytes). */
static bool gets(const void *img, size_t size) {
  Image out = {0};
  if (!cache_get(key, strlen(key), &out))
    return false;
  bool same = out.size == size && memcmp(out.image, img, size) == 0;
  free(out.image);
  return same;
}

typedef void Damage(unsigned char *file, size_t *len);
static void flip_image_byte(unsigned char *f, size_t *len) { f[*len - 5] ^= 0x10; }
static void flip_key_byte(unsigned char *f, size_t *len) { (void)len, f[HEADER + 3] ^= 1; }
static void flip_kind(unsigned char *f, size_t *len) { (void)len, f[OFF_KIND] ^= 1; }
static void flip_magic(unsigned char *f, size_t *len) { (void)len, f[6] = '1'; }
static void zero_image(unsigned char *f, size_t *len) { memset(f + HEADER + strlen(key), 0, *len - HEADER - strlen(key)); }
static void truncate_one(unsigned char *f, size_t *len) { (void)f, *len -= 1; }
static void truncate_header(unsigned char *f, size_t *len) { (void)f, *len = 20; }
static void empty(unsigned char *f, size_t *len) { (void)f, *len = 0; }
static void trailing_byte(unsigned char *f, size_t *len) { f[(*len)++] = 0; }
static void length_plus_one(unsigned char *f, size_t *len) { (void)len, f[OFF_ILEN] += 1; }
static void length_minus_one(unsigned char *f, size_t *len) { (void)len, f[OFF_ILEN] -= 1; }
static void length_huge(unsigned char *f, size_t *len) { (void)len, f[OFF_ILEN + 7] = 0x7f; }

static void damaged_entries(const char *dir) {
  use_dir(dir);
  static const struct { const char *name; Damage *fn; } damages[] = {
      {"flipped image byte", flip_image_byte}, {"flipped key byte", flip_key_byte}, {"flipped kind", flip_kind},
      {"old magic", flip_magic},               {"zeroed image", zero_image},        {"truncated by one", truncate_one},
      {"truncated header", truncate_header},   {"empty file", empty},               {"trailing byte", trailing_byte},
      {"length + 1", length_plus_one},         {"length - 1", length_minus_one},    {"huge length", length_huge},
  };
  unsigned char cubin[300];
  for (size_t i = 0; i < sizeof cubin; i++)
    cubin[i] = (unsigned char)(i * 7 + 1);
  Image img = {cubin, sizeof cubin, false};
  cache_put(key, strlen(key), &img);
  CHECK(gets(cubin, sizeof cubin), "a stored entry is not found");
  char path[4096];
  entry_file(dir, path, sizeof path);
  size_t good_len;
  unsigned char *good = read_all(path, &good_len);
  for (size_t d = 0; d < sizeof damages / sizeof damages[0]; d++) {
    size_t len = good_len;
    unsigned char *bad = malloc(good_len + 1);
    memcpy(bad, good, good_len);
    damages[d].fn(bad, &len);
    write_all(path, bad, len);
    CHECK(!gets(cubin, sizeof cubin) && !cache_get(key, strlen(key), &(Image){0}), "%s: the entry was used",
          damages[d].name);
    cache_put(key, strlen(key), &img); /* what a compile after the miss does */
    CHECK(gets(cubin, sizeof cubin), "%s: the entry was not replaced", damages[d].name);
    free(bad);
  }
  free(good);
}

/* PTX is handed out as a C string: an entry without the NUL is neither stored nor used. */
static void ptx_without_nul(const char *dir) {
  use_dir(dir);
  Image unterminated = {"// ptx", 6, true}, terminated = {"// ptx", 7, true};
  cache_put(key, strlen(key), &unterminated);
  CHECK(entries(dir) == 0, "PTX without its NUL was stored");
  cache_put(key, strlen(key), &terminated);
  CHECK(gets("// ptx", 7), "PTX with its NUL was not stored");
  char path[4096];
  entry_file(dir, path, sizeof path);
  write_entry(path, key, strlen(key), "// ptx", 7, 1); /* the test's writer matches cache.c's */
  CHECK(gets("// ptx", 7), "the test writes entries cache.c does not read");
  write_entry(path, key, strlen(key), "// ptx", 6, 1);
  CHECK(!cache_get(key, strlen(key), &(Image){0}), "PTX without its NUL was used");
}

/* Through nvrtc_compile: a damaged entry is compiled again, and replaced. */
static const char *kernel = "extern \"C\" __global__ void k(float *p) { p[0] = 1.0f; }\n";

static void recompile_one(const char *dir, bool ptx) {
  Image first, again;
  CHECK(nvrtc_compile(kernel, "k.cu", "sm_80", ptx, &first) == FFN_OK, "compile: %s", ffn_last_error());
  char path[4096];
  entry_file(dir, path, sizeof path);
  size_t len;
  unsigned char *file = read_all(path, &len);
  uint64_t klen;
  memcpy(&klen, file + 8, 8);
  if (ptx) /* the image without its NUL, under a correct checksum */
    write_entry(path, file + HEADER, klen, file + HEADER + klen, len - HEADER - klen - 1, 1);
  else {
    file[len - 100] ^= 0x40;
    write_all(path, file, len);
  }
  CHECK(nvrtc_compile(kernel, "k.cu", "sm_80", ptx, &again) == FFN_OK, "compile again: %s", ffn_last_error());
  CHECK(again.size == first.size && memcmp(again.image, first.image, first.size) == 0,
        "%s: the damaged entry was used", ptx ? "ptx" : "cubin");
  CHECK(!ptx || ((char *)again.image)[again.size - 1] == 0, "PTX without its NUL");
  size_t len2;
  unsigned char *file2 = read_all(path, &len2);
  CHECK(len2 == len && memcmp(file2 + HEADER + klen, first.image, first.size) == 0,
        "%s: the damaged entry was not replaced", ptx ? "ptx" : "cubin");
  unlink(path);
  free(file);
  free(file2);
  free(first.image);
  free(again.image);
}

static void recompiles(const char *dir) {
  use_dir(dir);
  recompile_one(dir, false);
  recompile_one(dir, true);
}

/* ---- the directory ---- */

static void fresh_directory(const char *base) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/new/cache", base);
  use_dir(dir);
  Image img = {"cubin", 5, false};
  cache_put(key, strlen(key), &img);
  struct stat st;
  CHECK(stat(dir, &st) == 0 && (st.st_mode & 0777) == 0700, "a new cache directory has mode %04o, expected 0700",
        (unsigned)(st.st_mode & 0777));
  snprintf(dir, sizeof dir, "%s/new", base);
  CHECK(stat(dir, &st) == 0 && (st.st_mode & 0777) == 0700, "a new parent directory has mode %04o, expected 0700",
        (unsigned)(st.st_mode & 0777));
  CHECK(gets("cubin", 5) && cache_untrusted() == NULL, "the new directory is not used");
}

static void store_one(const char *dir) {
  use_dir(dir);
  Image img = {"cubin", 5, false};
  cache_put(key, strlen(key), &img);
  CHECK(gets("cubin", 5), "the entry was not stored");
}

/* dir holds one entry of key, but it is not ours or others can write to it. */
static void untrusted(const char *dir) {
  use_dir(dir);
  CHECK(!cache_get(key, strlen(key), &(Image){0}), "an entry of an untrusted directory was used");
  Image img = {"cubin", 5, false};
  cache_put("another key", 11, &img);
  CHECK(entries(dir) == 1, "an untrusted directory was written to (%d entries)", entries(dir));
  const char *why = cache_untrusted();
  CHECK(why && strstr(why, dir) && (strstr(why, "writable by other users") || strstr(why, "owned by uid")),
        "no reason recorded: %s", why ? why : "(null)");
}

static void untrusted_directories(const char *base) {
  char dir[512];
  static const unsigned modes[] = {0777, 0720, 0702, 01777};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    snprintf(dir, sizeof dir, "%s/mode%o", base, modes[i]);
    in_child("store", store_one, dir);
    chmod(dir, modes[i]);
    in_child("writable by others", untrusted, dir);
  }
  /* owned by another user: only root can make one */
  snprintf(dir, sizeof dir, "%s/owned", base);
  in_child("store", store_one, dir);
  if (geteuid() != 0 || chown(dir, 65534, 65534) != 0) {
    printf("note: not root: the case of a directory owned by another user is skipped\n");
    return;
  }
  in_child("owned by another user", untrusted, dir);
}

static void scratch(char *dir, const char *name) {
  snprintf(dir, 64, "/tmp/ffnc-cache-%s-XXXXXX", name);
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    exit(1);
  }
}

int main(void) {
  char dirs[7][64];
  scratch(dirs[0], "hits");
  scratch(dirs[1], "off");
  scratch(dirs[2], "damage");
  scratch(dirs[3], "ptx");
  scratch(dirs[4], "nvrtc");
  scratch(dirs[5], "fresh");
  scratch(dirs[6], "trust");
  in_child("hits and misses", hits_and_misses, dirs[0]);
  in_child("FFNC_NO_CACHE", no_cache, dirs[1]);
  in_child("damaged entries", damaged_entries, dirs[2]);
  in_child("PTX without its NUL", ptx_without_nul, dirs[3]);
  in_child("recompiled", recompiles, dirs[4]);
  in_child("fresh directory", fresh_directory, dirs[5]);
  untrusted_directories(dirs[6]);
  for (int i = 0; i < 7; i++) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dirs[i]);
    if (system(cmd) != 0)
      printf("note: could not remove %s\n", dirs[i]);
  }
  return check_result("cache_test");
}
