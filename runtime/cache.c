/* cache.c: the on-disk kernel cache.
 *
 * Directory: $FFNC_CACHE_DIR, else $XDG_CACHE_HOME/ffnc, else $HOME/.cache/ffnc.
 * FFNC_NO_CACHE=1 bypasses it. An entry is named by a hash of its key and holds the key
 * itself, so a lookup compares the whole key (source, options, arch, versions) and a hash
 * collision can only miss. Entries are written to a temporary file and renamed, so readers
 * never see a partial entry; the cache is best-effort and any failure just means a compile.
 */
#include "rt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[8] = {'F', 'F', 'N', 'C', 'K', 'C', '1', '\n'};

static bool cache_dir(char *buf, size_t len) {
  const char *off = getenv("FFNC_NO_CACHE");
  if (off && *off && strcmp(off, "0") != 0)
    return false;
  const char *d = getenv("FFNC_CACHE_DIR");
  if (d && *d)
    snprintf(buf, len, "%s", d);
  else if ((d = getenv("XDG_CACHE_HOME")) && *d)
    snprintf(buf, len, "%s/ffnc", d);
  else if ((d = getenv("HOME")) && *d)
    snprintf(buf, len, "%s/.cache/ffnc", d);
  else
    return false;
  /* mkdir -p */
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/')
      continue;
    *p = 0;
    mkdir(buf, 0755);
    *p = '/';
  }
  return mkdir(buf, 0755) == 0 || errno == EEXIST;
}

static uint64_t fnv(const char *s, size_t n, uint64_t h) {
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

static bool entry_path(const char *key, size_t keylen, char *buf, size_t len) {
  char dir[3500];
  if (!cache_dir(dir, sizeof dir))
    return false;
  snprintf(buf, len, "%s/%016llx%016llx.bin", dir, (unsigned long long)fnv(key, keylen, 1469598103934665603ull),
           (unsigned long long)fnv(key, keylen, 0x84222325cbf29ce4ull));
  return true;
}

bool cache_get(const char *key, size_t keylen, Image *out) {
  char path[4096];
  if (!entry_path(key, keylen, path, sizeof path))
    return false;
  FILE *f = fopen(path, "rb");
  if (!f)
    return false;
  bool ok = false;
  char magic[8];
  uint64_t klen, ilen;
  unsigned char ptx;
  char *k = NULL;
  void *img = NULL;
  if (fread(magic, 1, 8, f) != 8 || memcmp(magic, MAGIC, 8) != 0 || fread(&klen, 8, 1, f) != 1 ||
      fread(&ilen, 8, 1, f) != 1 || fread(&ptx, 1, 1, f) != 1 || klen != keylen || ilen > (1ull << 32))
    goto out;
  k = malloc(klen ? klen : 1);
  img = malloc(ilen ? ilen : 1);
  if (!k || !img || fread(k, 1, klen, f) != klen || memcmp(k, key, klen) != 0 || fread(img, 1, ilen, f) != ilen)
    goto out;
  *out = (Image){img, (size_t)ilen, ptx != 0};
  img = NULL;
  ok = true;
out:
  free(k);
  free(img);
  fclose(f);
  return ok;
}

void cache_put(const char *key, size_t keylen, const Image *img) {
  char path[4096], tmp[4200];
  if (!entry_path(key, keylen, path, sizeof path))
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
  bool ok = fwrite(MAGIC, 1, 8, f) == 8 && fwrite(&klen, 8, 1, f) == 1 && fwrite(&ilen, 8, 1, f) == 1 &&
            fwrite(&ptx, 1, 1, f) == 1 && fwrite(key, 1, keylen, f) == keylen &&
            fwrite(img->image, 1, img->size, f) == img->size;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0)
    unlink(tmp);
}
