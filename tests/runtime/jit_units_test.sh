#!/bin/sh
# jit_units_test.sh FFNC WORKDIR: a program is compiled as several NVRTC programs on several
# threads (runtime/units.c, nvrtc.c). The AOT package is the same byte for byte whether one
# thread compiles or four; -v reports each program and a summary; nothing is printed without
# -v when stderr is not a terminal; a model edited after a build compiles only its new kernel,
# the rest coming from the cache. Needs NVRTC, no GPU.
set -u
ffnc=$1 work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
printf 'model m\ndim T\ninput x : [T, 64] f16\nweight w : [128, 64] f16 = "w"\ny = silu(x @ w^T)\noutput y\n' > m.ffn
export FFNC_CACHE_DIR="$work/cache"
unset FFNC_NO_CACHE FFNC_JIT_THREADS
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
build() { "$ffnc" build m.ffn --arch sm_80 "$@" 2>err.txt || fail "build $*: exit $?: $(cat err.txt)"; }

FFNC_NO_CACHE=1 FFNC_JIT_THREADS=1 build -o serial.ffnx -v
grep -q "^nvrtc: [0-9]* programs, 1 thread$" err.txt || fail "FFNC_JIT_THREADS=1 -v: $(cat err.txt)"
FFNC_NO_CACHE=1 FFNC_JIT_THREADS=4 build -o parallel.ffnx
cmp -s serial.ffnx parallel.ffnx || fail "the package compiled on 4 threads differs from the one compiled on 1"

build -o a.ffnx -v
n=$(sed -n 's/^nvrtc: \([0-9]*\) programs, [0-9]* threads*$/\1/p' err.txt)
[ -n "$n" ] && [ "$n" -ge 3 ] || fail "-v: no 'nvrtc: N programs, T threads' line (N >= 3): $(cat err.txt)"
[ "$(grep -c '^nvrtc:   k0_sm80_[0-9x]* *[0-9.]* s$' err.txt)" -ge 2 ] || fail "-v: no line per GEMM program: $(cat err.txt)"
grep -q "^nvrtc:   runtime  *[0-9.]* s$" err.txt || fail "-v: no line for the runtime's kernels: $(cat err.txt)"
grep -q "^nvrtc: $n programs (0 from the cache), [0-9]* threads*, [0-9.]* s$" err.txt ||
  fail "-v: no summary for a cold cache: $(cat err.txt)"
cmp -s a.ffnx serial.ffnx || fail "the package built through the cache differs"

build -o b.ffnx
[ ! -s err.txt ] || fail "without -v, stderr not a terminal: $(cat err.txt)"
cmp -s a.ffnx b.ffnx || fail "the package built from the cache differs"

# on a terminal: a progress line, erased at the end (where script(1) can give us one)
if command -v script >/dev/null 2>&1; then
  FFNC_NO_CACHE=1 script -qec "'$ffnc' build m.ffn --arch sm_80 -o t.ffnx" /dev/null > tty.txt 2>&1 ||
    fail "build on a terminal: $(cat tty.txt)"
  grep -q "nvrtc: compiling 1/$n" tty.txt || fail "no progress on a terminal: $(od -c tty.txt | head)"
  [ "$(tail -c 1 tty.txt | od -An -c | tr -d ' ')" = '\r' ] || fail "the progress line is not erased: $(od -c tty.txt | tail -3)"
fi

# an edit that keeps the GEMM: only the new kernel is compiled
printf 'z = relu(x) * 2\noutput z\n' >> m.ffn
build -o c.ffnx -v
grep -q "^nvrtc: $((n + 1)) programs ($n from the cache)" err.txt || fail "after an edit: $(cat err.txt)"
[ "$(grep -c '^nvrtc:   ' err.txt)" -eq $((n + 1)) ] && [ "$(grep -c '(cache)$' err.txt)" -eq "$n" ] ||
  fail "after an edit, the programs from the cache are not marked: $(cat err.txt)"
[ $fails -eq 0 ] && echo "parallel compile and the per-kernel cache: ok"
exit $fails
