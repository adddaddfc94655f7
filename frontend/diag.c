/* diag.c: diagnostics as dsl.md shows them.
 *
 *   FILE:LINE:COL: error: MESSAGE
 *   <the source line, control bytes as \xNN, a long one cut to the part around COL>
 *   <blanks up to COL-1, tabs kept as tabs so the caret lines up>^
 *   note: ...
 *
 * Columns count characters, as the lexer does: a tab is one column and so is a whole UTF-8
 * sequence. Identical errors (same place, same text) are reported once; the notes of a
 * suppressed error are dropped with it.
 */
#include "frontend.h"
#include "ir/fnv.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A file with more errors than this is most likely not an .ffn file at all. */
#define DIAG_MAX_ERRORS 100

void diags_init(Diags *d) { memset(d, 0, sizeof *d); }

void diags_free(Diags *d) {
  free(d->text);
  free(d->entries);
  for (int i = 0; i < d->capseen; i++)
    free(d->seen[i]);
  free(d->seen);
  memset(d, 0, sizeof *d);
}

static void *xrealloc(void *p, size_t n) { return ffn_xrealloc(p, n); }

static void put(Diags *d, const char *s, size_t n) {
  if (d->len + n + 1 > d->cap) {
    size_t cap = d->cap ? d->cap : 256;
    while (cap < d->len + n + 1)
      cap *= 2;
    d->text = xrealloc(d->text, cap);
    d->cap = cap;
  }
  memcpy(d->text + d->len, s, n);
  d->len += n;
  d->text[d->len] = 0;
}

static bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

/* Control bytes (NUL, ESC, newlines...) of names, paths and source lines shown as \xNN: raw,
 * they would let a file drive the terminal, and a NUL would end the diagnostics' text.
 * Tabs are kept where they must (source lines: the caret line repeats them). */
static void put_escaped(Diags *d, const char *s, size_t n, bool keep_tabs) {
  size_t run = 0; /* bytes before i that need no escape, written in one put */
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!is_control(c) || (keep_tabs && c == '\t')) {
      run++;
      continue;
    }
    put(d, s + i - run, run);
    run = 0;
    char esc[5];
    snprintf(esc, sizeof esc, "\\x%02X", c);
    put(d, esc, 4);
  }
  put(d, s + n - run, run);
}

static void putf(Diags *d, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0)
    return;
  char *buf = xrealloc(NULL, (size_t)n + 1);
  vsnprintf(buf, (size_t)n + 1, fmt, ap);
  put_escaped(d, buf, (size_t)n, false);
  free(buf);
}

static void putstr(Diags *d, const char *s) { put(d, s, strlen(s)); }

static uint64_t hash_key(const char *p) { return ffn_fnv_str(p, FFN_FNV_OFFSET); }

/* Returns true if key was already reported; remembers it otherwise. `seen` is an open
 * addressing table (capseen a power of two): a loop that inlines a broken block thousands
 * of times asks this for every iteration. */
static bool seen_before(Diags *d, const char *key) {
  uint64_t h = hash_key(key);
  if (d->capseen) {
    for (size_t i = h & (size_t)(d->capseen - 1); d->seen[i]; i = (i + 1) & (size_t)(d->capseen - 1))
      if (strcmp(d->seen[i], key) == 0)
        return true;
  }
  if (2 * (d->nseen + 1) > d->capseen) {
    int cap = d->capseen ? d->capseen * 2 : 64;
    char **table = ffn_xcalloc((size_t)cap, sizeof *table);
    for (int i = 0; i < d->capseen; i++)
      if (d->seen[i]) {
        size_t j = hash_key(d->seen[i]) & (size_t)(cap - 1);
        while (table[j])
          j = (j + 1) & (size_t)(cap - 1);
        table[j] = d->seen[i];
      }
    free(d->seen);
    d->seen = table;
    d->capseen = cap;
  }
  size_t i = h & (size_t)(d->capseen - 1);
  while (d->seen[i])
    i = (i + 1) & (size_t)(d->capseen - 1);
  d->seen[i] = xrealloc(NULL, strlen(key) + 1);
  strcpy(d->seen[i], key);
  d->nseen++;
  return false;
}

/* The source line `line` (1-based) and its length without the line end. */
static const char *find_line(const SourceFile *src, int line, size_t *len) {
  if (!src || !src->text)
    return NULL;
  const char *p = src->text, *end = src->text + src->len;
  for (int l = 1; l < line; l++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl)
      return NULL;
    p = nl + 1;
  }
  const char *nl = memchr(p, '\n', (size_t)(end - p));
  size_t n = (size_t)((nl ? nl : end) - p);
  if (n > 0 && p[n - 1] == '\r')
    n--;
  *len = n;
  return p;
}

/* A line longer than this is shown as the part around the caret, with "..." for the rest:
 * a 1 MB line (minified or generated text) would otherwise be printed for every error. */
#define DIAG_MAX_SHOWN 160

/* The source line, then the caret under column col. */
static void put_source_line(Diags *d, const char *text, size_t len, int col) {
  size_t at = 0; /* the caret's byte offset */
  for (int c = 1; at < len && c < col; c++) /* columns count characters, as the lexer does */
    for (at++; at < len && ((unsigned char)text[at] & 0xC0) == 0x80; at++)
      ;
  size_t from = 0, to = len;
  if (len > DIAG_MAX_SHOWN) {
    from = at > DIAG_MAX_SHOWN / 2 ? at - DIAG_MAX_SHOWN / 2 : 0;
    while (from > 0 && ((unsigned char)text[from] & 0xC0) == 0x80) /* whole characters */
      from--;
    to = from + DIAG_MAX_SHOWN < len ? from + DIAG_MAX_SHOWN : len;
    while (to < len && ((unsigned char)text[to] & 0xC0) == 0x80)
      to++;
  }
  if (from > 0)
    put(d, "...", 3);
  put_escaped(d, text + from, to - from, true);
  if (to < len)
    put(d, "...", 3);
  put(d, "\n", 1);
  if (from > 0)
    put(d, "   ", 3);
  for (size_t i = from; i < at && i < to; i++) {
    unsigned char c = (unsigned char)text[i];
    if ((c & 0xC0) == 0x80)
      continue;
    put(d, c == '\t' ? "\t" : is_control(c) ? "    " : " ", c == '\t' || !is_control(c) ? 1 : 4);
  }
  /* a column past the end of the line (the end of the file, say) */
  int shown = 1;
  for (size_t i = 0; i < at; i++)
    shown += ((unsigned char)text[i] & 0xC0) != 0x80;
  for (; shown < col; shown++)
    put(d, " ", 1);
  put(d, "^\n", 2);
}

static void begin_entry(Diags *d, int line, int col) {
  if (d->nentries == d->capentries) {
    d->capentries = d->capentries ? d->capentries * 2 : 16;
    d->entries = xrealloc(d->entries, sizeof(DiagEntry) * (size_t)d->capentries);
  }
  d->entries[d->nentries++] = (DiagEntry){d->len, line, col};
}

static bool over_limit(Diags *d) {
  if (d->nerrors < DIAG_MAX_ERRORS)
    return false;
  if (d->nerrors == DIAG_MAX_ERRORS) {
    begin_entry(d, INT_MAX, 0);
    putstr(d, "ffnc: too many errors; stopping here\n");
    d->nerrors++;
  }
  return true;
}

bool diag_error(Diags *d, const SourceFile *src, SrcLoc loc, const char *fmt, ...) {
  d->muted = true;
  if (over_limit(d))
    return false;
  const char *file = src && src->name ? src->name : loc.file ? loc.file : "<input>";
  va_list ap;
  va_start(ap, fmt);
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);

  char head[1024 + 512];
  if (loc.line > 0)
    snprintf(head, sizeof head, "%.400s:%d:%d: error: %s\n", file, loc.line, loc.col, msg);
  else
    snprintf(head, sizeof head, "%.400s: error: %s\n", file, msg);
  if (seen_before(d, head))
    return false;
  d->muted = false;
  d->nerrors++;
  begin_entry(d, loc.line > 0 ? loc.line : INT_MAX - 1, loc.col);
  put_escaped(d, head, strlen(head) - 1, false);
  put(d, "\n", 1);
  size_t len;
  const char *text = loc.line > 0 ? find_line(src, loc.line, &len) : NULL;
  if (text)
    put_source_line(d, text, len, loc.col);
  return true;
}

void diag_note(Diags *d, const char *fmt, ...) {
  if (d->muted)
    return;
  va_list ap;
  va_start(ap, fmt);
  putstr(d, "note: ");
  putf(d, fmt, ap);
  va_end(ap);
  put(d, "\n", 1);
}

void diag_plain(Diags *d, const char *fmt, ...) {
  d->muted = true;
  if (over_limit(d))
    return;
  d->muted = false;
  d->nerrors++;
  begin_entry(d, INT_MAX - 1, 0);
  va_list ap;
  va_start(ap, fmt);
  putstr(d, "ffnc: error: ");
  putf(d, fmt, ap);
  va_end(ap);
  put(d, "\n", 1);
}

typedef struct {
  DiagEntry e; /* first, so entry_cmp can compare Items */
  size_t len;
} Item;

static int entry_cmp(const void *pa, const void *pb) {
  const DiagEntry *a = pa, *b = pb;
  if (a->line != b->line)
    return a->line < b->line ? -1 : 1;
  if (a->col != b->col)
    return a->col < b->col ? -1 : 1;
  return a->off < b->off ? -1 : a->off > b->off; /* offsets keep the sort stable */
}

void diags_sort(Diags *d, int first) {
  int n = d->nentries - first;
  if (first < 0 || n < 2)
    return;
  DiagEntry *e = d->entries + first;
  Item *items = xrealloc(NULL, sizeof(Item) * (size_t)n);
  for (int i = 0; i < n; i++)
    items[i] = (Item){e[i], (i + 1 < n ? e[i + 1].off : d->len) - e[i].off};
  qsort(items, (size_t)n, sizeof(Item), entry_cmp);
  size_t base = e[0].off, at = 0;
  char *text = xrealloc(NULL, d->len - base + 1);
  for (int i = 0; i < n; i++) {
    memcpy(text + at, d->text + items[i].e.off, items[i].len);
    e[i] = items[i].e;
    e[i].off = base + at;
    at += items[i].len;
  }
  memcpy(d->text + base, text, at);
  free(text);
  free(items);
}

/* ---- "did you mean" ---- */

/* Edit distance, for "did you mean". Names longer than 64 are never close to anything. */
int edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64)
    return 99;
  int row[65];
  for (size_t j = 0; j <= lb; j++)
    row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int up = row[j];
      int best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best)
        best = up + 1;
      if (row[j - 1] + 1 < best)
        best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

void suggest_consider(Suggest *sg, const char *cand) {
  if (strcmp(cand, sg->name) == 0)
    return;
  int d = edit_distance(sg->name, cand);
  /* close, and not a different name altogether (`x` for `y`) */
  if (d <= 2 && d < (int)strlen(sg->name) && d < sg->dist) {
    sg->dist = d;
    sg->best = cand;
  }
}
