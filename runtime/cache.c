/* cache.c: the on-disk kernel cache.
 *
 * Directory: $FFNC_CACHE_DIR, else $XDG_CACHE_HOME/ffnc, else $HOME/.cache/ffnc.
 * FFNC_NO_CACHE=1 bypasses it. Both are read once per process. The cache is best-effort:
 * any failure, and any entry that does not check out, just means a compile (whose result
 * then replaces the entry).
 *
 * An entry is named by a hash of its key and holds (native byte order):
 *
 *   "FFNCKC2\n" | u64 key length | u64 image length | u8 kind (1: PTX, 0: cubin)
 *   | u64 checksum | key | image
 *
 * The checksum is FNV-1a 64 over everything after the magic except itself (the lengths, the
 * kind, the key and the image). It guards against corruption and stale or partial writes,
 * not against a writer with access to the directory (that is why the directory must be
 * private, below): every FNV-1a step is a bijection of the 64-bit state, so a change confined
 * to one byte always changes the sum, and any other accidental change escapes with odds of
 * about 2^-64. Lengths must also match the file's size exactly, so truncated, extended and
 * garbage-length files are rejected before anything is allocated. The whole key is compared,
 * so a collision of the name's hash can only miss. A PTX image must end with its NUL (as
 * NVRTC returns it), so callers may treat it as a C string. Entries are written to a
 * temporary file and renamed, so readers never see a partial entry.
 *
 * The directory is created 0700. One that other users can write to (group or other write
 * bit), or that is not owned by us, could hold entries we never wrote: it is not used, and
 * cache_untrusted() says why (the library prints nothing; ffnc prints a note).
 */
#include "rt.h"
#include "../ir/fnv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[8] = {'F', 'F', 'N', 'C', 'K', 'C', '2', '\n'};
enum { HEADER_SIZE = 8 + 8 + 8 + 1 + 8 };

static struct {
  bool usable;          /* dir exists, and is ours and private */
  char dir[3500];
  char untrusted[3700]; /* why an existing directory is not used; "" when it is, or is absent */
} cache;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static atomic_bool cache_resolved;

/* A directory someone else can write to may hold entries we did not write: not used. */
static bool dir_trusted(const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return false;
  if (st.st_uid != geteuid()) {
    snprintf(cache.untrusted, sizeof cache.untrusted, "kernel cache %s is owned by uid %u, not by uid %u: not used",
             dir, (unsigned)st.st_uid, (unsigned)geteuid());
    return false;
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    snprintf(cache.untrusted, sizeof cache.untrusted,
             "kernel cache %s is writable by other users (mode %04o): not used", dir, (unsigned)(st.st_mode & 07777));
    return false;
  }
  return true;
}

static void resolve(void) {
  char *buf = cache.dir;
  size_t len = sizeof cache.dir;
  const char *off = getenv("FFNC_NO_CACHE");
  const char *d = getenv("FFNC_CACHE_DIR");
  if (off && *off && strcmp(off, "0") != 0)
    goto done;
  if (d && *d)
    snprintf(buf, len, "%s", d);
  else if ((d = getenv("XDG_CACHE_HOME")) && *d)
    snprintf(buf, len, "%s/ffnc", d);
  else if ((d = getenv("HOME")) && *d)
    snprintf(buf, len, "%s/.cache/ffnc", d);
  else
    goto done;
  /* mkdir -p; existing directories keep their mode (checked below for the last one) */
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/')
      continue;
    *p = 0;
    mkdir(buf, 0700);
    *p = '/';
  }
  mkdir(buf, 0700);
  cache.usable = dir_trusted(buf);
done:
  atomic_store(&cache_resolved, true);
}

const char *cache_untrusted(void) {
  return atomic_load(&cache_resolved) && cache.untrusted[0] ? cache.untrusted : NULL;
}

const char *cache_directory(void) {
  pthread_once(&cache_once, resolve);
  return cache.usable ? cache.dir : NULL;
}


static bool entry_path(const char *key, size_t keylen, char *buf, size_t len) {
  pthread_once(&cache_once, resolve);
  if (!cache.usable)
    return false;
  snprintf(buf, len, "%s/%016llx%016llx.bin", cache.dir, (unsigned long long)ffn_fnv(key, keylen, FFN_FNV_OFFSET),
           (unsigned long long)ffn_fnv(key, keylen, FFN_FNV_OFFSET2));
  return true;
}

/* The checksum of an entry: its lengths, kind, key and image. */
static uint64_t entry_sum(uint64_t klen, uint64_t ilen, unsigned char ptx, const void *key, const void *img) {
  uint64_t h = ffn_fnv(&klen, 8, FFN_FNV_OFFSET);
  h = ffn_fnv(&ilen, 8, h);
  h = ffn_fnv(&ptx, 1, h);
  h = ffn_fnv(key, (size_t)klen, h);
  return ffn_fnv(img, (size_t)ilen, h);
}

static bool ptx_terminated(const void *img, size_t size) { return size > 0 && ((const char *)img)[size - 1] == 0; }

/* Reads the entry at f for key into out; false for anything but an intact entry of key. */
static bool read_entry(FILE *f, const char *key, size_t keylen, Image *out) {
  char magic[8];
  uint64_t klen, ilen, sum;
  unsigned char ptx;
  struct stat st;
  if (fread(magic, 1, 8, f) != 8 || memcmp(magic, MAGIC, 8) != 0 || fread(&klen, 8, 1, f) != 1 ||
      fread(&ilen, 8, 1, f) != 1 || fread(&ptx, 1, 1, f) != 1 || fread(&sum, 8, 1, f) != 1 ||
      fstat(fileno(f), &st) != 0)
    return false;
  if (st.st_size < HEADER_SIZE)
    return false;
  /* the lengths must account for the file exactly (so neither is garbage, and their sum
   * cannot overflow) before anything is allocated */
  uint64_t body = (uint64_t)st.st_size - HEADER_SIZE;
  if (klen != keylen || klen > body || ilen != body - klen || ptx > 1)
    return false;
  char *k = malloc(klen ? klen : 1);
  void *img = malloc(ilen ? ilen : 1);
  bool ok = k && img && fread(k, 1, klen, f) == klen && memcmp(k, key, klen) == 0 && fread(img, 1, ilen, f) == ilen &&
            entry_sum(klen, ilen, ptx, k, img) == sum && (!ptx || ptx_terminated(img, ilen));
  free(k);
  if (!ok) {
    free(img);
    return false;
  }
  *out = (Image){img, (size_t)ilen, ptx != 0};
  return true;
}

bool cache_get(const char *key, size_t keylen, Image *out) {
  char path[4096];
  if (!entry_path(key, keylen, path, sizeof path))
    return false;
  FILE *f = fopen(path, "rb");
  if (!f)
    return false;
  bool ok = read_entry(f, key, keylen, out);
  fclose(f);
  return ok;
}

void cache_put(const char *key, size_t keylen, const Image *img) {
  char path[4096], tmp[4200];
  if ((img->ptx && !ptx_terminated(img->image, img->size)) || !entry_path(key, keylen, path, sizeof path))
    return;
  snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0)
    return;
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    close(fd);
    unlink(tmp);
    return;
  }
  uint64_t klen = keylen, ilen = img->size;
  unsigned char ptx = img->ptx;
  uint64_t sum = entry_sum(klen, ilen, ptx, key, img->image);
  bool ok = fwrite(MAGIC, 1, 8, f) == 8 && fwrite(&klen, 8, 1, f) == 1 && fwrite(&ilen, 8, 1, f) == 1 &&
            fwrite(&ptx, 1, 1, f) == 1 && fwrite(&sum, 8, 1, f) == 1 && fwrite(key, 1, keylen, f) == keylen &&
            fwrite(img->image, 1, img->size, f) == img->size;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0)
    unlink(tmp);
}
