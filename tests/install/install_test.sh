#!/bin/sh
# install_test.sh CMAKE BUILD WORK SRC LIBDIR CC CUDA_INCLUDE CUDA_LIBDIR: see tests/install.cmake.
set -u
cmake=$1 build=$2 work=$3 src=$4 libdir_rel=$5 cc=$6 cuda_inc=$7 cuda_lib=$8
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" || exit 1
prefix=$work/prefix libdir=$work/prefix/$libdir_rel
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" || fail "cmake --install"
for f in bin/ffnc "$libdir_rel/libffn.so" "$libdir_rel/libffn.so.0.1" "$libdir_rel/libffn.a" include/ffn.h \
         "$libdir_rel/cmake/ffnc/ffncConfig.cmake" "$libdir_rel/cmake/ffnc/ffncConfigVersion.cmake" \
         "$libdir_rel/pkgconfig/ffn.pc"; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
"$prefix/bin/ffnc" --version | head -1 | grep -q "^ffnc 0\.1\.0 (git [0-9a-f]*)" || fail "ffnc --version has no commit"

# Exports: libffn.so exactly the functions ffn.h marks FFN_API; libffn.a no global but ffn_*.
sed -n 's/^FFN_API [^(]*[ *]\(ffn_[a-z_0-9]*\)(.*/\1/p' "$prefix/include/ffn.h" | sort >"$work/api.txt"
nm -D --defined-only "$libdir/libffn.so" | awk '{print $3}' | sort >"$work/exported.txt"
cmp -s "$work/api.txt" "$work/exported.txt" || { diff "$work/api.txt" "$work/exported.txt"; fail "libffn.so exports"; }
[ "$(wc -l <"$work/api.txt")" -gt 30 ] || fail "too few API functions found in ffn.h"
nm -g --defined-only "$libdir/libffn.a" | awk 'NF == 3 && $3 !~ /^ffn_/' >"$work/static_leak.txt"
[ ! -s "$work/static_leak.txt" ] || { head "$work/static_leak.txt"; fail "libffn.a has non-ffn_ globals"; }

# A host program runs as far as this machine allows: usage without arguments (2); a device or
# file problem (3) with the reason: "no CUDA" where there is no GPU.
check_run() { # PROGRAM LABEL
  "$1" >/dev/null 2>&1; [ $? -eq 2 ] || fail "$2: usage exit"
  "$1" "$src/examples/llama3_tiny.ffn" "$work/missing.safetensors" 4 >"$work/run.txt" 2>&1; rc=$?
  [ $rc -eq 3 ] || { cat "$work/run.txt"; fail "$2: exit $rc, expected 3"; }
  if "$prefix/bin/ffnc" --version | grep -q "cuda driver: [0-9]"; then
    grep -q "missing.safetensors" "$work/run.txt" || { cat "$work/run.txt"; fail "$2: no reason"; }
  else
    grep -q "no CUDA" "$work/run.txt" || { cat "$work/run.txt"; fail "$2: no 'no CUDA'"; }
  fi
  echo "$2: $(head -1 "$work/run.txt")"
}

# find_package(ffnc): ffnc::ffn and ffnc::ffn_static
for kind in shared static; do
  flag=OFF; [ $kind = static ] && flag=ON
  "$cmake" -S "$src/examples/host" -B "$work/cmake_$kind" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_PREFIX_PATH="$prefix" -DFFNC_STATIC=$flag >"$work/cmake_$kind.log" 2>&1 || { cat "$work/cmake_$kind.log"; fail "configure ($kind)"; }
  "$cmake" --build "$work/cmake_$kind" >>"$work/cmake_$kind.log" 2>&1 || { cat "$work/cmake_$kind.log"; fail "build ($kind)"; }
  check_run "$work/cmake_$kind/jit_run" "find_package $kind"
done
readelf -d "$work/cmake_shared/jit_run" | grep -q "libffn.so.0.1" || fail "jit_run does not use libffn.so"
readelf -d "$work/cmake_static/jit_run" | grep -q "libffn.so" && fail "static jit_run uses libffn.so"

# pkg-config: shared, and libffn.a with its private libraries next to a program that defines
# read_file and cache_get itself
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cuda="-I$cuda_inc -L$cuda_lib -Wl,-rpath,$cuda_lib -lcudart"
# shellcheck disable=SC2046,SC2086
"$cc" -o "$work/pc_jit_run" "$src/examples/host/jit_run.c" $(pkg-config --cflags --libs ffn) \
  -Wl,-rpath,"$libdir" $cuda -lm || fail "pkg-config build"
check_run "$work/pc_jit_run" "pkg-config shared"
# shellcheck disable=SC2046
"$cc" -o "$work/collide" "$src/tests/install/collide.c" $(pkg-config --cflags ffn) \
  $(pkg-config --static --libs ffn | sed 's/-lffn /-l:libffn.a /') || fail "pkg-config --static build"
"$work/collide" || fail "collide"
echo "PASSED"
