/* parser.y: the grammar of `.ffn` files (dsl.md), building the tree of ast.h.
 *
 * A file is a list of statements, each ended by a newline or `;` (lexer.l sends one more
 * newline before the end of the file, and a statement right before a `}` needs none).
 * Which statements may appear inside a block or loop is for sema.c to say, with a clearer
 * message than "unexpected `block`" and without derailing the parse.
 *
 * Errors: every syntax error is reported (parse.error custom, with LAC so the expected
 * tokens are exact) and the parser recovers at the statement's end, so one run reports
 * the errors of all statements. A binding whose right side fails still binds its names
 * (to an error value), so later uses of them do not report errors of their own.
 */
%define api.pure full
%define api.prefix {ffn_yy}
%define api.location.type {FfnLoc}
%define api.token.prefix {TOK_}
%define parse.error custom
%define parse.lac full
%locations
%expect 0
%param {void *scanner}
%parse-param {ParseCtx *ctx}

%code requires {
#include "ast.h"
}

%code provides {
int ffn_yylex(FFN_YYSTYPE *lval, FfnLoc *lloc, void *scanner);
}

%code {
#include <stdlib.h>
#include <string.h>

/* Spans run from the first symbol's start to the last one's end; an empty rule sits at
 * the end of what precedes it. */
#define YYLLOC_DEFAULT(Cur, Rhs, N)                                               \
  do {                                                                            \
    if (N) {                                                                      \
      (Cur).first_line = YYRHSLOC(Rhs, 1).first_line;                             \
      (Cur).first_column = YYRHSLOC(Rhs, 1).first_column;                         \
      (Cur).first_off = YYRHSLOC(Rhs, 1).first_off;                               \
      (Cur).last_line = YYRHSLOC(Rhs, N).last_line;                               \
      (Cur).last_column = YYRHSLOC(Rhs, N).last_column;                           \
      (Cur).last_off = YYRHSLOC(Rhs, N).last_off;                                 \
    } else {                                                                      \
      (Cur).first_line = (Cur).last_line = YYRHSLOC(Rhs, 0).last_line;            \
      (Cur).first_column = (Cur).last_column = YYRHSLOC(Rhs, 0).last_column;      \
      (Cur).first_off = (Cur).last_off = YYRHSLOC(Rhs, 0).last_off;               \
    }                                                                             \
  } while (0)

static void ffn_yyerror(FfnLoc *loc, void *scanner, ParseCtx *ctx, const char *msg);

static Stmt *decl(StmtKind kind, FfnLoc all, char *name, FfnLoc nameloc) {
  Stmt *s = stmt_new(kind, all);
  s->name = name;
  s->name_span = span_of(nameloc);
  return s;
}

static Stmt *typed_decl(StmtKind kind, FfnLoc all, char *name, FfnLoc nameloc, DimList dims, char *dtype,
                        FfnLoc dtloc) {
  Stmt *s = decl(kind, all, name, nameloc);
  s->dims = dims.head;
  s->dtype = dtype;
  s->dtype_span = span_of(dtloc);
  return s;
}

static Stmt *error_stmt(FfnLoc loc) { return stmt_new(ST_ERROR, loc); }

/* From the start of a to the end of b (a rule's @$ would start at the list before them). */
static FfnLoc join(FfnLoc a, FfnLoc b) {
  return (FfnLoc){a.first_line, a.first_column, b.last_line, b.last_column, a.first_off, b.last_off};
}

static Stmt *bind(IdentList names, Expr *e, FfnLoc all) {
  Stmt *s = stmt_new(ST_BIND, all);
  s->names = names.head;
  s->name = ffn_xstrdup(names.head->name);
  s->name_span = names.head->span;
  s->expr = e;
  return s;
}
}

%union {
  char *str;
  Num num;
  Expr *expr;
  ExprList args;
  Stmt *stmt;
  StmtList stmts;
  IdentList idents;
  DimList dims;
  Bound bound;
  ScaleSpec scale;
}

%token END 0 "end of file"
%token <str> IDENT "name"
%token <str> STRING "string"
%token <num> NUMBER "number"
%token NEWLINE "end of line"
%token DOTDOT "`..`"
%token TRANSPOSE "`^T`"
%token MODEL "`model`" DIM "`dim`" CONST "`const`" INPUT "`input`" WEIGHT "`weight`"
%token OUTPUT "`output`" BLOCK "`block`" RETURN "`return`" FOR "`for`" IN "`in`"
%token PRECISION "`precision`" FUSE "`fuse`" FFN "`ffn`"

%type <stmts> list seq body
%type <stmt> stmt
%type <idents> names params param_list
%type <dims> shape dim_list
%type <expr> expr postfix primary
%type <args> args arg_list
%type <bound> bound
%type <scale> scale
%type <num> signed_number

%destructor { free($$); } <str>
%destructor { expr_free($$); } <expr>
%destructor { exprlist_free(&$$); } <args>
%destructor { stmt_free($$); } <stmt>
%destructor { stmts_free($$.head); } <stmts>
%destructor { idents_free($$.head); } <idents>
%destructor { dims_free($$.head); } <dims>
%destructor { free($$.name); } <bound>
%destructor { free($$.word); free($$.str); } <scale>

%left '+' '-'
%left '@' '*' '/'
%precedence NEG

%%

program:
  seq                              { ctx->program = $1; }
;

/* statements ended by a terminator */
list:
  %empty                           { $$ = (StmtList){0}; }
| list term                        { $$ = $1; }
| list stmt term                   { $$ = $1; stmtlist_append(&$$, $2); }
| list error term                  { $$ = $1; stmtlist_append(&$$, error_stmt(@2)); }
| list names '=' error term        { $$ = $1; stmtlist_append(&$$, bind($2, expr_new(EX_ERROR, @4), join(@2, @4))); }
;

/* ... and the last one, which needs none */
seq:
  list
| list stmt                        { $$ = $1; stmtlist_append(&$$, $2); }
| list error                       { $$ = $1; stmtlist_append(&$$, error_stmt(@2)); }
| list names '=' error             { $$ = $1; stmtlist_append(&$$, bind($2, expr_new(EX_ERROR, @4), join(@2, @4))); }
;

body:
  '{' seq '}'                      { $$ = $2; }
;

term:
  NEWLINE
| ';'
;

params:
  %empty                           { $$ = (IdentList){0}; }
| param_list
;

param_list:
  IDENT                            { Ident *p = ident_new($1, @1); $$ = (IdentList){p, p}; }
| param_list ',' IDENT             { $$ = $1; Ident *p = ident_new($3, @3); $$.tail->next = p; $$.tail = p; }
;

stmt:
  MODEL IDENT                      { $$ = decl(ST_MODEL, @$, $2, @2); }
| DIM IDENT                        { $$ = decl(ST_DIM, @$, $2, @2); }
| DIM IDENT '=' NUMBER {
    $$ = decl(ST_DIM, @$, $2, @2);
    $$->num = $4;
    $$->has_num = true;
    $$->num_span = span_of(@4);
  }
| CONST IDENT '=' signed_number {
    $$ = decl(ST_CONST, @$, $2, @2);
    $$->num = $4;
    $$->has_num = true;
    $$->num_span = span_of(@4);
  }
| INPUT IDENT ':' shape IDENT      { $$ = typed_decl(ST_INPUT, @$, $2, @2, $4, $5, @5); }
| WEIGHT IDENT ':' shape IDENT scale {
    $$ = typed_decl(ST_WEIGHT, @$, $2, @2, $4, $5, @5);
    $$->scale = $6;
  }
| WEIGHT IDENT ':' shape IDENT scale '=' STRING {
    $$ = typed_decl(ST_WEIGHT, @$, $2, @2, $4, $5, @5);
    $$->scale = $6;
    $$->str = $8;
    $$->has_str = true;
    $$->str_span = span_of(@8);
  }
| OUTPUT IDENT                     { $$ = decl(ST_OUTPUT, @$, $2, @2); }
| names '=' expr                   { $$ = bind($1, $3, @$); }
| RETURN expr                      { $$ = stmt_new(ST_RETURN, @$); $$->expr = $2; }
| FOR IDENT IN bound DOTDOT bound body {
    $$ = decl(ST_FOR, @$, $2, @2);
    $$->lo = $4;
    $$->hi = $6;
    $$->body = $7.head;
    $$->close = span_of(@7);
    $$ = stmt_nest(ctx, $$);
  }
| PRECISION IDENT IDENT {
    $$ = decl(ST_PRECISION, @$, $2, @2);
    $$->dtype = $3;
    $$->dtype_span = span_of(@3);
  }
| PRECISION IDENT IDENT IDENT '=' NUMBER {
    $$ = decl(ST_PRECISION, @$, $2, @2);
    $$->dtype = $3;
    $$->dtype_span = span_of(@3);
    $$->key = $4;
    $$->key_span = span_of(@4);
    $$->num = $6;
    $$->has_num = true;
    $$->num_span = span_of(@6);
  }
| FUSE FFN bound DOTDOT bound {
    $$ = stmt_new(ST_FUSE, @$);
    $$->lo = $3;
    $$->hi = $5;
  }
| BLOCK IDENT '(' params ')' body {
    $$ = decl(ST_BLOCK, @$, $2, @2);
    $$->names = $4.head;
    $$->body = $6.head;
    $$->close = span_of(@6);
    $$ = stmt_nest(ctx, $$);
  }
;

/* `scale` or `scale "tensor"` after a weight's type: a pre-quantized fp8 weight. Any word
 * is taken here and sema says what it expected, so that `scale` stays an ordinary name
 * everywhere else (no existing program changes meaning). */
scale:
  %empty                           { $$ = (ScaleSpec){0}; }
| IDENT                            { $$ = (ScaleSpec){.word = $1, .span = span_of(@1)}; }
| IDENT STRING                     { $$ = (ScaleSpec){.word = $1, .span = span_of(@1), .str = $2, .str_span = span_of(@2)}; }
;

names:
  IDENT                            { Ident *n = ident_new($1, @1); $$ = (IdentList){n, n}; }
| names ',' IDENT                  { $$ = $1; Ident *n = ident_new($3, @3); $$.tail->next = n; $$.tail = n; }
;

shape:
  '[' ']'                          { $$ = (DimList){0}; }
| '[' dim_list ']'                 { $$ = $2; }
;

dim_list:
  IDENT {
    DimItem *d = ffn_xcalloc(1, sizeof *d);
    *d = (DimItem){.name = $1, .span = span_of(@1)};
    $$ = (DimList){d, d};
  }
| NUMBER {
    DimItem *d = ffn_xcalloc(1, sizeof *d);
    *d = (DimItem){.num = $1, .span = span_of(@1)};
    $$ = (DimList){d, d};
  }
| dim_list ',' IDENT {
    DimItem *d = ffn_xcalloc(1, sizeof *d);
    *d = (DimItem){.name = $3, .span = span_of(@3)};
    $$ = $1;
    $$.tail->next = d;
    $$.tail = d;
  }
| dim_list ',' NUMBER {
    DimItem *d = ffn_xcalloc(1, sizeof *d);
    *d = (DimItem){.num = $3, .span = span_of(@3)};
    $$ = $1;
    $$.tail->next = d;
    $$.tail = d;
  }
;

bound:
  NUMBER                           { $$ = (Bound){.num = $1, .span = span_of(@$)}; }
| '-' NUMBER {
    $$ = (Bound){.num = $2, .span = span_of(@$)};
    $$.num.value = -$$.num.value;
    $$.num.ival = -$$.num.ival;
  }
| IDENT                            { $$ = (Bound){.name = $1, .span = span_of(@$)}; }
;

signed_number:
  NUMBER
| '-' NUMBER                       { $$ = $2; $$.value = -$$.value; $$.ival = -$$.ival; }
;

expr:
  expr '+' expr                    { $$ = expr_binary(ctx, '+', $1, $3, @2, @$); }
| expr '-' expr                    { $$ = expr_binary(ctx, '-', $1, $3, @2, @$); }
| expr '*' expr                    { $$ = expr_binary(ctx, '*', $1, $3, @2, @$); }
| expr '/' expr                    { $$ = expr_binary(ctx, '/', $1, $3, @2, @$); }
| expr '@' expr                    { $$ = expr_binary(ctx, '@', $1, $3, @2, @$); }
| '-' expr %prec NEG               { $$ = expr_unary(ctx, EX_NEG, $2, @1, @$); }
| postfix
;

postfix:
  primary
| postfix TRANSPOSE                { $$ = expr_unary(ctx, EX_TRANSPOSE, $1, @2, @$); }
;

primary:
  NUMBER                           { $$ = expr_num($1, @1); }
| IDENT                            { $$ = expr_name($1, @1); }
| IDENT '(' args ')'               { $$ = expr_call(ctx, $1, $3, @1, @$); }
| '(' expr ')'                     { $$ = $2; $$->span = span_of(@$); }
;

args:
  %empty                           { $$ = (ExprList){0}; }
| arg_list
;

arg_list:
  expr                             { $$ = (ExprList){$1, $1, 1}; }
| arg_list ',' expr                { $$ = $1; $$.tail->next = $3; $$.tail = $3; $$.n++; }
;

%%

/* How a token is named in a message: names and numbers with their text. */
static void describe(char *buf, size_t len, ParseCtx *ctx, yysymbol_kind_t sym, const FfnLoc *loc) {
  const char *text = ctx->src->text + loc->first_off;
  int n = loc->last_off - loc->first_off;
  if (n > 40)
    n = 40;
  switch (sym) {
  case YYSYMBOL_IDENT:
    snprintf(buf, len, "name `%.*s`", n, text);
    return;
  case YYSYMBOL_NUMBER:
    snprintf(buf, len, "number `%.*s`", n, text);
    return;
  case YYSYMBOL_NEWLINE:
    /* the same token ends statements at `;` */
    snprintf(buf, len, "%s", n == 1 && text[0] == ';' ? "`;`" : "end of line");
    return;
  default:
    break;
  }
  const char *name = yysymbol_name(sym);
  if (name[0] == '\'' && name[2] == '\'') /* a character token: '(' */
    snprintf(buf, len, "`%c`", name[1]);
  else
    snprintf(buf, len, "%s", name);
}

static void expected_name(char *buf, size_t len, yysymbol_kind_t sym) {
  const char *name = yysymbol_name(sym);
  if (sym == YYSYMBOL_IDENT)
    name = "a name";
  else if (sym == YYSYMBOL_NUMBER)
    name = "a number";
  else if (sym == YYSYMBOL_STRING)
    name = "a string";
  if (name[0] == '\'' && name[2] == '\'')
    snprintf(buf, len, "`%c`", name[1]);
  else
    snprintf(buf, len, "%s", name);
}

static int yyreport_syntax_error(const yypcontext_t *yyctx, void *scanner, ParseCtx *ctx) {
  (void)scanner;
  ctx->syntax_errors++;
  /* the scanner has already read the unexpected token: what is open includes it */
  int open_brackets = ctx->bracket_depth;
  FfnLoc bracket = ctx->bracket_open;
  lexer_error_reset(ctx);
  yysymbol_kind_t tok = yypcontext_token(yyctx);
  const FfnLoc *loc = yypcontext_location(yyctx);
  char msg[512], what[96];
  /* a bad character or number was reported on this line: what the parser sees is its echo */
  if (loc->first_line == ctx->lex_error_line)
    return 0;
  describe(what, sizeof what, ctx, tok, loc);
  int len = snprintf(msg, sizeof msg, "syntax error: unexpected %s", what);

  /* The expected tokens, when there are few enough to help; "end of line" stands for `;` too. */
  yysymbol_kind_t expected[6];
  int n = yypcontext_expected_tokens(yyctx, expected, 6);
  int shown = 0;
  yysymbol_kind_t list[6];
  for (int i = 0; i < n; i++)
    if (expected[i] != YYSYMBOL_YYUNDEF && expected[i] != YYSYMBOL_YYerror)
      list[shown++] = expected[i];
  if (n > 0 && shown > 0 && shown <= 4) {
    len += snprintf(msg + len, sizeof msg - (size_t)len, "; expected ");
    for (int i = 0; i < shown; i++) {
      char e[64];
      expected_name(e, sizeof e, list[i]);
      len += snprintf(msg + len, sizeof msg - (size_t)len, "%s%s", i == 0 ? "" : i == shown - 1 ? " or " : ", ", e);
    }
  }
  if (!diag_error(ctx->diags, ctx->src, (SrcLoc){ctx->src->name, loc->first_line, loc->first_column}, "%s", msg))
    return 0;

  /* hints for the mistakes that make the error appear far from its cause */
  if (open_brackets > 0 && bracket.first_line < loc->first_line)
    diag_note(ctx->diags, "the `%c` at line %d is never closed; newlines inside ( ) and [ ] do not end a statement",
              ctx->src->text[bracket.first_off], bracket.first_line);
  if (tok == YYSYMBOL_YYEOF && ctx->brace_depth > 0) {
    int i = ctx->brace_depth <= FE_MAX_BRACES ? ctx->brace_depth - 1 : FE_MAX_BRACES - 1;
    diag_note(ctx->diags, "the `{` at line %d is never closed", ctx->braces[i].first_line);
  }
  return 0;
}

static void ffn_yyerror(FfnLoc *loc, void *scanner, ParseCtx *ctx, const char *msg) {
  (void)scanner;
  ctx->syntax_errors++;
  lexer_error_reset(ctx);
  if (strcmp(msg, "memory exhausted") == 0)
    msg = "nesting too deep: the parser ran out of stack";
  diag_error(ctx->diags, ctx->src, (SrcLoc){ctx->src->name, loc->first_line, loc->first_column}, "%s", msg);
}
