/* frontend.h: from `.ffn` source text to a type-checked IR graph.
 *
 * lexer.l (flex, reentrant) -> parser.y (bison, pure, locations) -> AST (ast.h) ->
 * sema.c: scopes, blocks inlined, loops unrolled, shapes and element types checked, IR built.
 * diag.c: diagnostics in the form `file:line:col: error: ...`, the source line, a caret, and
 * optional notes, collected in a Diags buffer (the CLI prints it; the C API returns it).
 */
#ifndef FFNC_FRONTEND_H
#define FFNC_FRONTEND_H

#include "../ir/ir.h"

/* ---- diag.c ---- */

typedef struct {
  const char *name; /* file name as given */
  const char *text; /* whole source (not necessarily NUL-terminated) */
  size_t len;
} SourceFile;

typedef struct {
  size_t off;    /* where the diagnostic starts in Diags.text */
  int line, col; /* its location (line 0: none) */
} DiagEntry;

typedef struct {
  char *text; /* all diagnostics so far, NUL-terminated (malloc'd) */
  size_t len, cap;
  int nerrors;
  /* identical diagnostics (same location and message) are reported once, e.g. an error in
   * a block body that a loop inlines 32 times: a hash set of the first lines */
  char **seen;
  int nseen, capseen;
  bool muted; /* the last error was a duplicate (or over the limit): its notes are dropped */
  DiagEntry *entries;
  int nentries, capentries;
} Diags;

void diags_init(Diags *d);
void diags_free(Diags *d);
/* `file:line:col: error: MSG`, the source line and a caret (when loc has a line). Returns
 * false if it was a duplicate and nothing was added (so callers skip the notes too). */
bool diag_error(Diags *d, const SourceFile *src, SrcLoc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void diag_note(Diags *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Plain one-line error without source context ("ffnc: error: ..."). */
void diag_plain(Diags *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Puts the diagnostics from entry `first` on in source order (stable; those without a
 * line last), each with its notes. The front end finds parse errors before type errors
 * and inlines blocks where they are called; the user reads the file top to bottom. */
void diags_sort(Diags *d, int first);

/* "did you mean": offer each candidate name; best ends as the closest one that is near name
 * (edit distance at most 2 and less than its length), or NULL. Start with {NULL, 99, name}. */
typedef struct {
  const char *best;
  int dist;
  const char *name;
} Suggest;
void suggest_consider(Suggest *sg, const char *cand);
int edit_distance(const char *a, const char *b); /* names longer than 64: 99 */

/* ---- sema.c (entry points) ---- */

/* A setting from the command line (`--precision matmul=f8e4m3`); it overrides the file. */
typedef struct {
  PrecClass cls;
  DType type;
  int group;
} PrecOverride;

typedef struct {
  const PrecOverride *prec;
  int nprec;
  const FuseRequest *fuse; /* `--ffn-fusion A..B`, added to the file's requests */
  int nfuse;
} FrontendOptions;

/* Parse and check; returns the graph, or NULL if any error was reported into d (all the
 * errors found, not only the first). opt may be NULL. */
Graph *frontend_compile_file(const char *path, const FrontendOptions *opt, Diags *d);
Graph *frontend_compile_string(const char *text, size_t len, const char *name, const FrontendOptions *opt, Diags *d);

/* The element types the language knows (DT_NONE if name is not one), and those a value may
 * have (the float types). */
DType dsl_dtype(const char *name);
bool is_value_type(DType t);

/* ---- precision_policy.c: the precision rules, for statements and the command line ---- */

/* "matmul=f8e4m3", "weights=i4", "weights=i4,group=128" (also "weights=i4:128"). The same
 * rules as the file's `precision` statements apply. Returns 0, or -1 with err. */
int parse_precision_override(const char *s, PrecOverride *out, char *err, size_t errlen);
int prec_class_from_name(const char *name); /* -1 if unknown */
/* Checks a setting (group < 0: none given). Returns NULL and the effective type in *eff, or
 * the problem (in buf or a constant string). */
const char *prec_problem(PrecClass cls, DType t, int64_t group, DType *eff, char *buf, size_t len);
/* "i4 group=128", "bf16": a setting as the user wrote it. */
void prec_setting_str(char *buf, size_t len, PrecClass cls, DType t, int group);

#endif
