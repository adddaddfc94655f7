/* verify_test.c: ir_verify (ir/ir.c) refuses each kind of broken graph with a message that names
 * the node and what is wrong, and accepts the graph again once the damage is undone. The graph
 * is examples/llama3_tiny.ffn as the front end builds it. Needs no GPU. */
#include "check.h"
#include "codegen/driver.h"
#include "gpu/gpu_util.h"

#include <string.h>

static Graph *g;

/* the verifier's verdict on g: "" if it passes, else its message */
static const char *verdict(void) {
  static char err[512];
  err[0] = 0;
  if (ir_verify(g, err, sizeof err) == 0)
    return "";
  return err[0] ? err : "(no message)";
}

#define REFUSED(what, needle)                                                                    \
  do {                                                                                           \
    const char *v_ = verdict();                                                                  \
    CHECK(*v_ && strstr(v_, needle), "%s: expected a message with \"%s\", got \"%s\"", what,     \
          needle, v_);                                                                           \
  } while (0)

/* the first live node with operands whose op is not a leaf */
static Node *first_computed(void) {
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (!n->dead && n->nargs > 0 && op_info[n->op].cls != OPC_LEAF)
      return n;
  }
  return NULL;
}

int main(void) {
  size_t len;
  const char *file = "examples/llama3_tiny.ffn";
  char *path = source_path(file), *text = source_text(file, &len);
  Diags d;
  diags_init(&d);
  DriverOptions o = {.sm = 90, .opt_level = 3};
  g = driver_model_graph(text, len, path, &o, &d);
  CHECK(g != NULL, "%s", d.text ? d.text : "no graph");
  if (!g)
    return check_result("verify_test");
  CHECK(!*verdict(), "the front end's graph: %s", verdict());
  Node *n = first_computed(), *last = GRAPH_NODE(g, g->nodes.len - 1);
  CHECK(n && n != last, "no computed node before the last");
  if (!n || n == last)
    return check_result("verify_test");

  bool konst = n->konst; /* a stale const flag */
  n->konst = !konst;
  REFUSED("const flag", "const flag is stale");
  n->konst = konst;

  Node *arg = n->args[0]; /* an operand defined after its user */
  n->args[0] = last;
  REFUSED("operand order", "is not a live node defined before it");
  n->args[0] = arg;

  Shape shape = n->shape; /* a shape its operands do not give */
  n->shape.d[n->shape.rank - 1].size += 1;
  n->shape.d[n->shape.rank - 1].sym = -1;
  REFUSED("shape", "but the operands give");
  n->shape = shape;

  DType dt = n->dtype; /* no element type */
  n->dtype = DT_NONE;
  REFUSED("element type", "has no element type");
  n->dtype = dt;

  int nargs = n->nargs; /* an operand count the op does not take */
  n->nargs = op_info[n->op].max_args + 1;
  REFUSED("operand count", "operands, the op takes");
  n->nargs = nargs;

  bool dead = arg->dead; /* an operand that is dead */
  arg->dead = true;
  REFUSED("dead operand", "is not a live node");
  arg->dead = dead;

  int nout = g->noutputs; /* no outputs */
  g->noutputs = 0;
  REFUSED("outputs", "graph has no outputs");
  g->noutputs = nout;

  char where[32]; /* each message names its node */
  snprintf(where, sizeof where, "%%%d (", n->id);
  n->konst = !konst;
  REFUSED("the node named", where);
  n->konst = konst;

  CHECK(!*verdict(), "the graph once repaired: %s", verdict());
  graph_destroy(g);
  free(path);
  free(text);
  return check_result("verify_test");
}
