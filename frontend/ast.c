/* ast.c: constructors and destructors of the syntax tree (ast.h). */
#include "ast.h"

#include <stdlib.h>
#include <string.h>

static void *xcalloc(size_t size) { return ffn_xcalloc(1, size); }

/* ---- expressions ---- */

Expr *expr_new(ExprKind kind, FfnLoc loc) {
  Expr *e = xcalloc(sizeof *e);
  e->kind = kind;
  e->span = e->op_span = span_of(loc);
  return e;
}

Expr *expr_num(Num num, FfnLoc loc) {
  Expr *e = expr_new(EX_NUM, loc);
  e->num = num;
  return e;
}

Expr *expr_name(char *name, FfnLoc loc) {
  Expr *e = expr_new(EX_NAME, loc);
  e->name = name;
  return e;
}

/* Trees deeper than FE_MAX_EXPR_DEPTH would make every recursive walk (sema, free) a
 * stack risk on hostile input; a real model is nowhere near. Reported once per file. */
static Expr *too_deep(ParseCtx *ctx, Expr *e) {
  if (e->depth <= FE_MAX_EXPR_DEPTH)
    return e;
  if (!ctx->depth_reported) {
    ctx->depth_reported = true;
    ctx->syntax_errors++;
    diag_error(ctx->diags, ctx->src, (SrcLoc){ctx->src->name, e->op_span.line, e->op_span.col},
               "expression nested too deeply (more than %d operators inside each other)", FE_MAX_EXPR_DEPTH);
  }
  Expr *err = xcalloc(sizeof *err);
  err->kind = EX_ERROR;
  err->span = e->span;
  err->op_span = e->op_span;
  expr_free(e);
  return err;
}

Expr *expr_unary(ParseCtx *ctx, ExprKind kind, Expr *operand, FfnLoc op, FfnLoc all) {
  Expr *e = expr_new(kind, all);
  e->op_span = span_of(op);
  e->lhs = operand;
  e->depth = operand->depth + 1;
  return too_deep(ctx, e);
}

Expr *expr_binary(ParseCtx *ctx, int op, Expr *lhs, Expr *rhs, FfnLoc oploc, FfnLoc all) {
  Expr *e = expr_new(EX_BINARY, all);
  e->op = op;
  e->op_span = span_of(oploc);
  e->lhs = lhs;
  e->rhs = rhs;
  e->depth = (lhs->depth > rhs->depth ? lhs->depth : rhs->depth) + 1;
  return too_deep(ctx, e);
}

Expr *expr_call(ParseCtx *ctx, char *name, ExprList args, FfnLoc nameloc, FfnLoc all) {
  Expr *e = expr_new(EX_CALL, all);
  e->op_span = span_of(nameloc);
  e->name = name;
  e->args = args.head;
  e->nargs = args.n;
  int depth = 0;
  for (Expr *a = args.head; a; a = a->next)
    if (a->depth > depth)
      depth = a->depth;
  e->depth = depth + 1;
  return too_deep(ctx, e);
}

void expr_free(Expr *e) {
  if (!e)
    return;
  expr_free(e->lhs);
  expr_free(e->rhs);
  for (Expr *a = e->args, *next; a; a = next) {
    next = a->next;
    expr_free(a);
  }
  free(e->name);
  free(e);
}

void exprlist_free(ExprList *l) {
  for (Expr *a = l->head, *next; a; a = next) {
    next = a->next;
    expr_free(a);
  }
  *l = (ExprList){0};
}

/* ---- statements ---- */

Stmt *stmt_new(StmtKind kind, FfnLoc loc) {
  Stmt *s = xcalloc(sizeof *s);
  s->kind = kind;
  s->span = span_of(loc);
  return s;
}

Stmt *stmt_nest(ParseCtx *ctx, Stmt *s) {
  int depth = 0;
  for (Stmt *b = s->body; b; b = b->next)
    if (b->depth > depth)
      depth = b->depth;
  s->depth = depth + 1;
  if (s->depth <= FE_MAX_NESTING)
    return s;
  if (!ctx->depth_reported) {
    ctx->depth_reported = true;
    ctx->syntax_errors++;
    diag_error(ctx->diags, ctx->src, (SrcLoc){ctx->src->name, s->span.line, s->span.col},
               "blocks and loops nested too deeply (more than %d inside each other)", FE_MAX_NESTING);
  }
  Stmt *err = stmt_new(ST_ERROR, (FfnLoc){0});
  err->span = s->span;
  stmt_free(s);
  return err;
}

void idents_free(Ident *list) {
  for (Ident *i = list, *next; i; i = next) {
    next = i->next;
    free(i->name);
    free(i);
  }
}

void dims_free(DimItem *list) {
  for (DimItem *d = list, *next; d; d = next) {
    next = d->next;
    free(d->name);
    free(d);
  }
}

void stmt_free(Stmt *s) {
  if (!s)
    return;
  free(s->name);
  idents_free(s->names);
  expr_free(s->expr);
  dims_free(s->dims);
  free(s->dtype);
  free(s->str);
  free(s->scale.word);
  free(s->scale.str);
  free(s->key);
  free(s->lo.name);
  free(s->hi.name);
  stmts_free(s->body);
  free(s);
}

void stmts_free(Stmt *list) {
  for (Stmt *s = list, *next; s; s = next) {
    next = s->next;
    stmt_free(s);
  }
}

void stmtlist_append(StmtList *l, Stmt *s) {
  if (l->tail)
    l->tail->next = s;
  else
    l->head = s;
  l->tail = s;
}

Ident *ident_new(char *name, FfnLoc loc) {
  Ident *i = xcalloc(sizeof *i);
  i->name = name;
  i->span = span_of(loc);
  return i;
}

char *span_text(const SourceFile *src, Span s) {
  int len = s.end - s.off;
  if (len < 0 || s.off < 0 || (size_t)s.end > src->len)
    len = 0;
  char *out = xcalloc((size_t)len + 1);
  int n = 0;
  bool space = false;
  for (int i = 0; i < len; i++) {
    char c = src->text[s.off + i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      space = true;
      continue;
    }
    if (c == '#') { /* a comment inside a multi-line operand: skip to its end */
      while (i + 1 < len && src->text[s.off + i + 1] != '\n')
        i++;
      continue;
    }
    if (space && n > 0)
      out[n++] = ' ';
    space = false;
    out[n++] = c;
  }
  out[n] = 0;
  return out;
}
