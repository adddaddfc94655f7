/* ast.h: the syntax tree of a `.ffn` file, and the state the lexer and parser share.
 *
 * The parser (parser.y) builds the tree bottom-up with the constructors of ast.c; nodes are
 * malloc'd one by one so that bison's %destructor can free what it drops while recovering
 * from a syntax error. sema.c walks the tree and builds the IR; ast_free releases it.
 *
 * Every node carries a Span: line and column of its first character (1-based; a tab is
 * one column, a UTF-8 sequence is one column) and the byte offsets [off, end) of its
 * text, so that a diagnostic can quote an operand as the user wrote it.
 */
#ifndef FFNC_AST_H
#define FFNC_AST_H

#include "frontend.h"

typedef struct {
  int line, col; /* start, 1-based */
  int off, end;  /* byte offsets of the text: [off, end) */
} Span;

/* The location type of the parser (bison's YYLTYPE): bison's field names, plus offsets. */
typedef struct {
  int first_line, first_column, last_line, last_column;
  int first_off, last_off;
} FfnLoc;

static inline Span span_of(FfnLoc l) { return (Span){l.first_line, l.first_column, l.first_off, l.last_off}; }

/* A number literal. Integers are the literals written with digits only ("4096"); "1e3" and
 * "2.0" are decimals even where their value is whole. */
typedef struct {
  double value;
  int64_t ival; /* is_int only */
  bool is_int;
} Num;

/* ---- expressions ---- */

typedef enum {
  EX_NUM,       /* num */
  EX_NAME,      /* name */
  EX_NEG,       /* lhs; op_span: the `-` */
  EX_BINARY,    /* op ('+' '-' '*' '/' '@'), lhs, rhs; op_span: the operator */
  EX_TRANSPOSE, /* lhs; op_span: the `^T` */
  EX_CALL,      /* name, args (linked by next), nargs; op_span: the function name */
  EX_ERROR,     /* a part that did not parse (already reported) */
} ExprKind;

typedef struct Expr Expr;
struct Expr {
  ExprKind kind;
  Span span;    /* the whole expression, parentheses included */
  Span op_span; /* what produced the value: operator, function name, or the name itself */
  int op;
  int depth; /* nesting depth of the tree below (bounded, see FE_MAX_EXPR_DEPTH) */
  Num num;
  char *name;
  Expr *lhs, *rhs;
  Expr *args;
  int nargs;
  Expr *next; /* next argument of a call */
};

/* ---- statements ---- */

typedef struct Ident Ident; /* a name in a list: bound names, block parameters */
struct Ident {
  char *name;
  Span span;
  Ident *next;
};

typedef struct DimItem DimItem; /* one entry of a shape `[T, 4096]` */
struct DimItem {
  char *name; /* NULL: num */
  Num num;
  Span span;
  DimItem *next;
};

typedef struct { /* `scale ["tensor"]` after a weight's element type (a pre-quantized weight) */
  char *word;    /* the word as written (sema checks it is `scale`); NULL: none */
  Span span;
  char *str;     /* the scale tensor's name, escapes decoded; NULL: the default */
  Span str_span; /* the string literal, quotes included */
} ScaleSpec;

typedef struct { /* one end of a range `A..B`: an integer literal or a const */
  char *name;    /* NULL: num */
  Num num;
  Span span;
} Bound;

typedef enum {
  ST_MODEL,     /* name */
  ST_DIM,       /* name; has_num: num (static size) */
  ST_CONST,     /* name, num */
  ST_INPUT,     /* name, dims, dtype */
  ST_WEIGHT,    /* name, dims, dtype; has_str: str (tensor name, escapes decoded);
                   scale.word: a word after the type (`scale`), with scale.str its tensor */
  ST_OUTPUT,    /* name */
  ST_BIND,      /* names (one or more), expr */
  ST_RETURN,    /* expr */
  ST_BLOCK,     /* name, names (parameters), body; close: the `}` */
  ST_FOR,       /* name (loop variable), lo, hi, body */
  ST_PRECISION, /* name (class), dtype; has_num: num (group=) with key */
  ST_FUSE,      /* lo, hi */
  ST_ERROR,     /* a statement that did not parse (already reported) */
} StmtKind;

typedef struct Stmt Stmt;
struct Stmt {
  StmtKind kind;
  Span span;      /* the whole statement */
  char *name;
  Span name_span;
  Ident *names;
  Expr *expr;
  Num num;
  bool has_num;
  Span num_span;
  DimItem *dims;
  char *dtype;
  Span dtype_span;
  char *str;
  bool has_str;
  Span str_span; /* the string literal, quotes included */
  ScaleSpec scale; /* ST_WEIGHT */
  char *key;     /* ST_PRECISION: the word before `=` (must be "group") */
  Span key_span;
  Bound lo, hi;
  Stmt *body;
  Span close;
  int depth; /* nesting of blocks and loops below (bounded, see FE_MAX_NESTING) */
  Stmt *next;
};

/* Lists under construction (the parser appends on the right). */
typedef struct { Stmt *head, *tail; } StmtList;
typedef struct { Ident *head, *tail; } IdentList;
typedef struct { DimItem *head, *tail; } DimList;
typedef struct { Expr *head, *tail; int n; } ExprList;

/* Limits that keep hostile input from exhausting the stack or the clock; each is far above
 * what a real model needs and each is reported as an error, never a crash. */
#define FE_MAX_EXPR_DEPTH 256  /* operators nested in one expression */
#define FE_MAX_NESTING 64      /* blocks and loops nested in the text */

/* ---- lexer and parser state (one per parse) ---- */

#define FE_MAX_BRACES 64

typedef struct {
  const SourceFile *src;
  Diags *diags;
  int syntax_errors;  /* parser errors (lexer errors are reported but not counted here) */
  bool depth_reported;
  StmtList program;   /* the result */

  /* scanner position: the next character to read */
  int line, col, off;
  int bracket_depth;   /* ( and [ open: newlines are not statement ends */
  FfnLoc bracket_open; /* the outermost open ( or [ */
  int brace_depth;     /* { open, for the "never closed" hint */
  FfnLoc braces[FE_MAX_BRACES];
  bool eof_newline;    /* the statement end sent before the end of the file */
  int lex_error_line;  /* the last line with a lexical error: its syntax errors are echoes */
} ParseCtx;

/* ---- ast.c ---- */

Expr *expr_new(ExprKind kind, FfnLoc loc);
Expr *expr_num(Num num, FfnLoc loc);
Expr *expr_name(char *name, FfnLoc loc);
Expr *expr_unary(ParseCtx *ctx, ExprKind kind, Expr *operand, FfnLoc op, FfnLoc all);
Expr *expr_binary(ParseCtx *ctx, int op, Expr *lhs, Expr *rhs, FfnLoc oploc, FfnLoc all);
Expr *expr_call(ParseCtx *ctx, char *name, ExprList args, FfnLoc nameloc, FfnLoc all);
void expr_free(Expr *e);
void exprlist_free(ExprList *l);

Stmt *stmt_new(StmtKind kind, FfnLoc loc);
/* Sets the depth of a block or loop from its body; a body nested too deep is reported
 * and dropped. Returns s. */
Stmt *stmt_nest(ParseCtx *ctx, Stmt *s);
void stmt_free(Stmt *s);
void stmts_free(Stmt *list);
void stmtlist_append(StmtList *l, Stmt *s);

Ident *ident_new(char *name, FfnLoc loc);
void idents_free(Ident *list);
void dims_free(DimItem *list);

/* The source text of a span, whitespace runs (newlines too) collapsed to one space. */
char *span_text(const SourceFile *src, Span s);

/* ---- lexer.l ---- */

/* Parses ctx->src into ctx->program, reporting syntax errors into ctx->diags. */
void ast_parse(ParseCtx *ctx);
/* Called by the parser on a syntax error: the scanner forgets open brackets, so that the
 * next newline ends the broken statement and recovery starts there. */
void lexer_error_reset(ParseCtx *ctx);

#endif
