/* ffnc.c: the command-line driver. One function per subcommand (tools/cmd_*.c). */
#include "cli.h"
#include "include/ffn.h"
#include "runtime/rt.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *summary;
} commands[] = {
    {"check", cmd_check, "parse and type-check a .ffn file"},
    {"build", cmd_build, "compile ahead of time, or emit IR / CUDA / PTX / cubin"},
    {"run", cmd_run, "compile (JIT) and run once on safetensors inputs"},
    {"bench", cmd_bench, "time the model against cuBLASLt and the device's limits"},
    {"analyze", cmd_analyze, "what precision and FFN Fusion cost on calibration data"},
    {"tune", cmd_tune, "time each GEMM's tile configurations on the GPU; save the fastest"},
    {"gen", cmd_gen, "write random weights and inputs of the right names and shapes"},
    {"compare", cmd_compare, "compare the tensors of two safetensors files"},
};

static const char environment[] =
    "environment:\n"
    "  FFNC_CACHE_DIR=DIR        the kernel cache (default $XDG_CACHE_HOME/ffnc or ~/.cache/ffnc)\n"
    "  FFNC_NO_CACHE=1           bypass the kernel cache\n"
    "  FFNC_JIT_THREADS=N        NVRTC compiles at once (default: one per CPU)\n"
    "  FFNC_NVRTC_LIBRARY=PATH   the libnvrtc to load, before the usual search\n"
    "  FFNC_DISABLE_NVRTC=1      behave as if NVRTC were missing (AOT packages need none)\n"
    "  FFNC_GEMM_VARIANT=CONFIG  force a GEMM tile configuration (kernels/gemm_host.h; tuning); a\n"
    "                            comma-separated list: the first one each GEMM has\n"
    "  FFNC_GEMM_SPLITS=N        force split-K N (1-32) on every GEMM that can split\n"
    "  FFNC_WGRAD=mma            sm_90: weight gradients on mma.sync instead of wgmma (comparison)\n"
    "  FFNC_NO_TUNE=1            do not load the choices `ffnc tune` saved (the built-in rule decides)\n"
    "  FFNC_INTERP_THREADS=N     threads of the CPU reference interpreter (--device cpu)\n"
    "  FFNC_NCCL_LIBRARY=PATH    the libnccl.so.2 that --tp N on the GPU loads (default: the usual search)\n"
    "  FFNC_TP_WHOLE_WEIGHTS=1   --tp N on the GPU: each rank binds whole weights, not its slices (a check)\n"
    "  FFNC_TP_OVERLAP=0         --tp N on the GPU: run every call whole, its all-reduces not overlapped\n"
    "  FFNC_PDL=0                sm_90: never start a GEMM during the tail of the one before (by default\n"
    "                            after a GEMM that fills the GPU with at most 16 waves of work:\n"
    "                            programmatic dependent launch)\n"
    "  FFNC_TP_BLOCKS=N          cut every call into N row blocks (1-16; default under --tp: 2-4 from 1024 tokens)\n"
    "  FFNC_LIBRARY=PATH         the libffn.so the Python package loads (not ffnc itself)\n"
    "\n"
    "exit status:\n"
    "  0  success\n"
    "  1  a problem in your files (source, weights, inputs, shapes) or in writing an output\n"
    "  2  bad usage (unknown option, bad value, missing argument)\n"
    "  3  a device, driver or compiler problem (no GPU, out of memory, NVRTC, a kernel fault)\n";

static void usage(FILE *out, bool full) {
  fprintf(out, "usage: ffnc COMMAND [ARGS]   (ffnc COMMAND --help for each)\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
  fprintf(out, "\n  --version   compiler, NVRTC and driver versions\n  --help      this text\n");
  if (full) /* a usage error gets the commands only; --help gets everything */
    fprintf(out, "\n%s", environment);
}

/* Whatever a command printed (compare's table, --dump-ir-after, --help) must have reached
 * standard output: `ffnc compare A B > /dev/full` used to exit 0. */
static int stdout_checked(int status) {
  errno = 0;
  bool failed = fflush(stdout) != 0 || ferror(stdout);
  if (failed && status == 0) /* a command that failed has said why already */
    cli_error("cannot write to standard output: %s", errno ? strerror(errno) : "an earlier write failed");
  return failed && status == 0 ? EXIT_USER : status;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr, false);
    return EXIT_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
    usage(stdout, true);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    char nvrtc[128], driver[128];
    ffn_runtime_versions(nvrtc, sizeof nvrtc, driver, sizeof driver);
    printf("ffnc %s\nnvrtc: %s\ncuda driver: %s\n", ffn_build_info(), nvrtc, driver);
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(argv[1], commands[i].name) == 0) {
      int status = stdout_checked(commands[i].fn(argc - 1, argv + 1));
      /* the library bypasses a kernel cache others could have written to, silently */
      const char *why = cache_untrusted();
      if (why)
        fprintf(stderr, "ffnc: note: %s\n", why);
      return status;
    }
  cli_error("unknown command '%s'", argv[1]);
  usage(stderr, false);
  return EXIT_USAGE;
}
