/* precision_policy.c: the rules of the precision policy (dsl.md "Precision"), shared by the
 * file's `precision` statements (sema.c reports those at their source) and the command line's
 * `--precision CLASS=TYPE` overrides. passes/precision.c applies the policy to the graph. */
#include "frontend.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int prec_class_from_name(const char *name) {
  for (int c = 0; c < PREC_COUNT; c++)
    if (strcmp(prec_class_names[c], name) == 0)
      return c;
  return -1;
}

/* Checks a setting. group < 0: none given. Returns NULL and the effective type, or the
 * problem. */
const char *prec_problem(PrecClass cls, DType t, int64_t group, DType *eff, char *buf, size_t len) {
  *eff = t;
  switch (cls) {
  case PREC_DEFAULT:
    if (t != DT_F32 && t != DT_F16 && t != DT_BF16)
      return snprintf(buf, len, "`precision default` must be f32, f16 or bf16, not %s", dtype_name(t)), buf;
    break;
  case PREC_ACCUMULATE:
    if (t != DT_F32)
      return "only f32 accumulation is supported";
    break;
  case PREC_NORM:
    /* statistics are always computed in at least f32: a narrower request means f32 */
    if (!is_value_type(t))
      return snprintf(buf, len, "`precision norm` takes a float type, not %s", dtype_name(t)), buf;
    *eff = DT_F32;
    break;
  case PREC_MATMUL:
    if (!is_value_type(t))
      return snprintf(buf, len, "`precision matmul` must be f32, f16, bf16, f8e4m3 or f8e5m2, not %s", dtype_name(t)),
             buf;
    break;
  case PREC_WEIGHTS:
    if (t != DT_I8 && t != DT_I4)
      return snprintf(buf, len, "`precision weights` must be i8 or i4, not %s", dtype_name(t)), buf;
    break;
  default:
    return "unknown precision class";
  }
  if (group >= 0 && !(cls == PREC_WEIGHTS && t == DT_I4))
    return "`group=` applies only to `precision weights i4`";
  if (group == 0 || group > INT_MAX)
    return "the group size must be a positive integer";
  return NULL;
}

void prec_setting_str(char *buf, size_t len, PrecClass cls, DType t, int group) {
  if (cls == PREC_WEIGHTS && group > 0)
    snprintf(buf, len, "%s group=%d", dtype_name(t), group);
  else
    snprintf(buf, len, "%s", dtype_name(t));
}

int parse_precision_override(const char *text, PrecOverride *out, char *err, size_t errlen) {
  const char *eq = strchr(text, '=');
  if (!eq) {
    snprintf(err, errlen, "`%s`: expected CLASS=TYPE, like matmul=f8e4m3", text);
    return -1;
  }
  char cls_name[32], type_name[32];
  snprintf(cls_name, sizeof cls_name, "%.*s", (int)(eq - text) < 31 ? (int)(eq - text) : 31, text);
  const char *t = eq + 1, *sep = t + strcspn(t, ",:");
  snprintf(type_name, sizeof type_name, "%.*s", (int)(sep - t) < 31 ? (int)(sep - t) : 31, t);
  int c = prec_class_from_name(cls_name);
  if (c < 0) {
    snprintf(err, errlen, "unknown precision class `%s` (the classes are default, accumulate, norm, matmul and weights)",
             cls_name);
    return -1;
  }
  DType dt = dsl_dtype(type_name);
  if (dt == DT_NONE) {
    snprintf(err, errlen, "unknown element type `%s`", type_name);
    return -1;
  }
  int64_t group = -1;
  if (*sep) {
    const char *g = sep + 1;
    if (*sep == ',') {
      if (strncmp(g, "group=", 6) != 0) {
        snprintf(err, errlen, "`%s`: expected `,group=N` after the type", text);
        return -1;
      }
      g += 6;
    }
    char *end;
    errno = 0;
    long long v = strtoll(g, &end, 10);
    if (end == g || *end || errno || v <= 0) { /* -7 would read as "no group" below */
      snprintf(err, errlen, "`%s`: the group size must be a positive integer", text);
      return -1;
    }
    group = v;
  }
  char buf[160];
  DType eff;
  const char *why = prec_problem((PrecClass)c, dt, group, &eff, buf, sizeof buf);
  if (why) {
    snprintf(err, errlen, "%s", why);
    return -1;
  }
  *out = (PrecOverride){(PrecClass)c, eff, group > 0 ? (int)group : 0};
  return 0;
}
