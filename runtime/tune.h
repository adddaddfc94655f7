/* tune.h: autotuned GEMM choices, measured on a device and kept in the kernel cache directory.
 *
 * The runtime picks each GEMM launch's tile configuration and split-K from the call's rows
 * (kernels/gemm_host.h: a table fitted on one card). ffn_model_tune (`ffnc tune`) times the
 * configurations a GEMM kernel was compiled with ("variants") and the split-K factors it can
 * take at a few row counts ("buckets") on the model's device, and stores the fastest of each
 * bucket in a small text file per (device, kernel):
 *
 *   ffnc-tune 1
 *   device NVIDIA H200              cuDeviceGetName
 *   sms 132
 *   driver 13000                    cuDriverGetVersion
 *   ffnc 0.1.0 (git 5f29864abcde)   ffn_build_info(): another build never trusts these
 *   kernel 3f0c...                  32 hex digits: the kernel's identity (tune_kernel_id: its
 *                                   generated text and NVRTC's version, or AOT: its cubins)
 *   arch sm_90
 *   dtype bf16                      A's element type
 *   shape 28672 4096 2              N, K, streams
 *   bucket 1 sm80_16x128x128 0 61.2 61.2
 *   bucket 16 ...                   rows, configuration, split-K (0: the heuristic's for the
 *                                   call's rows), microseconds, the heuristic's microseconds
 *   sum 0123456789abcdef            FNV-1a 64 of every byte before this line
 *
 * named tune-HASH.txt after a hash of the key lines, written to a temporary file and renamed.
 * A file is used only if it parses exactly, its checksum matches and every key line equals
 * what the loading model computes; anything else is ignored (and said in ffn_model_tuning).
 * A call with R rows uses the bucket with the most rows at or below R, B, while R <= 2B or the
 * chosen configuration's regime (its max_m) covers R; below the first bucket, and beyond that,
 * the heuristic decides (exec_choose).
 *
 * This part (tune_store.c) is plain C with no CUDA: the tests run it without a GPU. The
 * measuring and loading are tune.c.
 */
#ifndef FFNC_TUNE_H
#define FFNC_TUNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { TUNE_MAX_BUCKETS = 32, TUNE_MAX_SPLITS = 32 };

typedef struct {
  char device[128]; /* the device's name */
  int sms;
  int driver;       /* cuDriverGetVersion: 13000 for 13.0 */
  char ffnc[128];   /* ffn_build_info() */
  char kernel[33];  /* the kernel's identity, 32 hex digits */
  char arch[16];    /* "sm_90" */
  char dtype[16];   /* A's element type: "bf16" */
  int64_t n, k;     /* output columns per stream, inner dim (PlanKernel.n, .k) */
  int streams;
} TuneKey;

typedef struct {
  int64_t rows;
  char config[32];   /* a tile configuration's name (kernels/gemm_host.h) */
  int splits;        /* split-K; 0: the heuristic's for the call's rows (ffn_gemm_pick_splits) */
  double us;         /* the choice's measured time */
  double default_us; /* the heuristic's choice at these rows, measured in the same run */
} TuneBucket;

typedef struct {
  TuneKey key;
  int n;
  TuneBucket b[TUNE_MAX_BUCKETS]; /* rows strictly ascending */
} TuneEntry;

/* The file's text (malloc'd; NULL when out of memory). */
char *tune_format(const TuneEntry *e);
/* Parses text into out and checks it against want: 0, or -1 with the reason in why (damaged,
 * another format, or made for another device, driver, ffnc or kernel). */
int tune_parse(const char *text, size_t len, const TuneKey *want, TuneEntry *out, char *why, size_t whylen);
/* dir/tune-HASH.txt for key k. */
void tune_path(const char *dir, const TuneKey *k, char *buf, size_t len);
/* Writes e atomically (a temporary file renamed onto it): 0, or -1 with the reason. */
int tune_save(const char *dir, const TuneEntry *e, char *why, size_t whylen);
/* The entry for want from dir: 1 (in out), 0 when there is none, -1 when the file there is
 * not one to trust (the reason in why). */
int tune_load(const char *dir, const TuneKey *want, TuneEntry *out, char *why, size_t whylen);
/* The bucket a call with `rows` rows uses: the one with the most rows at or below it; NULL
 * below the first. */
const TuneBucket *tune_lookup(const TuneEntry *e, int64_t rows);

#endif
