/* canon.c: canonical form for the passes that follow: no-op casts removed, dead code gone. */
#include "passes.h"

int pass_canon(Compile *c) {
  Graph *g = c->g;
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (!n->dead && n->op == OP_CAST && n->args[0]->dtype == n->dtype) {
      ir_replace_uses(g, n, n->args[0]);
      n->dead = true;
    }
  }
  ir_compact(g);
  return 0;
}
