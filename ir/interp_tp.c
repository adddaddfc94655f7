/* interp_tp.c: the ranks of a tensor-parallel program on the CPU, in lockstep.
 *
 * One thread per rank runs interp_run on its rank's graph; an ALLREDUCE is a rendezvous:
 * every rank posts its buffer, waits for the others, sums all buffers in rank order in f64
 * (the same bits on every rank), waits again until everyone has read, and writes its sum
 * back. A rank that stops early (an error) marks the communicator broken, and every rank
 * waiting or arriving later fails instead of waiting forever.
 */
#include "interp.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n;          /* ranks */
  int arrived;    /* at the current barrier */
  long phase;     /* barriers passed */
  bool broken;    /* a rank stopped: no barrier can complete */
  float **posted; /* by rank: its buffer at the current all-reduce */
  int64_t *count; /* by rank: its element count */
} Comm;

/* Waits until all n ranks are here; false if the communicator broke. */
static bool barrier(Comm *c) {
  pthread_mutex_lock(&c->mu);
  long phase = c->phase;
  if (++c->arrived == c->n) {
    c->arrived = 0;
    c->phase++;
    pthread_cond_broadcast(&c->cv);
  }
  while (c->phase == phase && !c->broken)
    pthread_cond_wait(&c->cv, &c->mu);
  bool ok = c->phase != phase;
  pthread_mutex_unlock(&c->mu);
  return ok;
}

static void break_comm(Comm *c) {
  pthread_mutex_lock(&c->mu);
  c->broken = true;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

typedef struct {
  Comm *comm;
  int rank;
  const Graph *g;
  const InterpSources *src;
  InterpComm hook;
  RefTensor *outputs;
  int rc;
  char err[512];
} Rank;

static int allreduce(void *ctx, float *data, int64_t n, DType dt, char *err, size_t errlen) {
  Rank *r = ctx;
  Comm *c = r->comm;
  c->posted[r->rank] = data;
  c->count[r->rank] = n;
  if (!barrier(c))
    return ffn_errf(err, errlen, "rank %d: another rank stopped before this all-reduce", r->rank);
  for (int k = 0; k < c->n; k++)
    if (c->count[k] != n)
      return break_comm(c), ffn_errf(err, errlen, "rank %d: all-reduce of %lld values, rank %d has %lld", r->rank,
                                     (long long)n, k, (long long)c->count[k]);
  float *sum = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  if (!sum)
    return break_comm(c), ffn_errf(err, errlen, "out of host memory");
  for (int64_t i = 0; i < n; i++) {
    double s = 0;
    for (int k = 0; k < c->n; k++)
      s += c->posted[k][i];
    sum[i] = (float)round_to_dtype(s, dt);
  }
  bool ok = barrier(c); /* nobody writes before everyone has read */
  memcpy(data, sum, sizeof(float) * (size_t)n);
  free(sum);
  return ok ? 0 : ffn_errf(err, errlen, "rank %d: another rank stopped during this all-reduce", r->rank);
}

static void *run_rank(void *arg) {
  Rank *r = arg;
  r->rc = interp_run_rank(r->g, r->src, &r->hook, r->outputs, r->err, sizeof r->err);
  if (r->rc != 0)
    break_comm(r->comm);
  return NULL;
}

int interp_run_tp(const Graph *const *ranks, int n, const InterpSources *src, RefTensor *outputs, char *err,
                  size_t errlen) {
  if (n < 1)
    return ffn_errf(err, errlen, "tensor parallel: %d ranks", n);
  int nout = ranks[0]->noutputs;
  for (int r = 1; r < n; r++)
    if (ranks[r]->noutputs != nout)
      return ffn_errf(err, errlen, "tensor parallel: rank %d has %d outputs, rank 0 has %d", r, ranks[r]->noutputs,
                      nout);
  Comm comm = {.n = n, .posted = calloc((size_t)n, sizeof(float *)), .count = calloc((size_t)n, sizeof(int64_t))};
  Rank *rk = calloc((size_t)n, sizeof *rk);
  pthread_t *tid = calloc((size_t)n, sizeof *tid);
  bool *started = calloc((size_t)n, sizeof *started);
  int rc = 0;
  if (!comm.posted || !comm.count || !rk || !tid || !started) {
    rc = ffn_errf(err, errlen, "out of host memory");
    goto out;
  }
  pthread_mutex_init(&comm.mu, NULL);
  pthread_cond_init(&comm.cv, NULL);
  for (int r = 0; r < n; r++) {
    rk[r] = (Rank){&comm, r, ranks[r], src, {allreduce, &rk[r]}, outputs + (size_t)r * (size_t)nout, 0, ""};
  }
  for (int r = 0; r < n; r++) {
    started[r] = pthread_create(&tid[r], NULL, run_rank, &rk[r]) == 0;
    if (!started[r]) { /* the ranks already running fail at their next all-reduce */
      rk[r].rc = ffn_errf(rk[r].err, sizeof rk[r].err, "cannot start a thread for rank %d", r);
      break_comm(&comm);
    }
  }
  for (int r = 0; r < n; r++)
    if (started[r])
      pthread_join(tid[r], NULL);
  /* the first rank that failed for a reason of its own, not because another one stopped */
  for (int r = 0; r < n && rc == 0; r++)
    if (rk[r].rc != 0 && !strstr(rk[r].err, "another rank stopped"))
      rc = ffn_errf(err, errlen, "rank %d: %s", r, rk[r].err);
  for (int r = 0; r < n && rc == 0; r++)
    if (rk[r].rc != 0)
      rc = ffn_errf(err, errlen, "rank %d: %s", r, rk[r].err);
  if (rc != 0)
    for (int r = 0; r < n; r++)
      if (rk[r].rc == 0)
        for (int i = 0; i < nout; i++)
          ref_free(&outputs[(size_t)r * (size_t)nout + (size_t)i]);
  pthread_mutex_destroy(&comm.mu);
  pthread_cond_destroy(&comm.cv);
out:
  free(comm.posted);
  free(comm.count);
  free(rk);
  free(tid);
  free(started);
  return rc;
}
