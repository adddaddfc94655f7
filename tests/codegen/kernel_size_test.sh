#!/bin/sh
# kernel_size_test.sh FFNC MODEL ARCH LIMIT CUBIN
# NVRTC compiles MODEL whole (`ffnc build --emit cubin`); the machine code of each of its rowwise
# kernels (ELF section .text.kN, .text.kN_one or .text.kN_rows) must be at most LIMIT bytes. At decode such a
# kernel is one block per row, run after a product that has evicted its code from the caches, so
# it fetches its code from memory as it goes: the fp8 quantizer of a 28672-wide row was 166 KB
# and took 20 us of the Llama-3-70B fp8 sublayer's 276 at one token (kernels/NOTES.md,
# twenty-first session; with the exact path out of line, 34 KB, and the decode form's 16 KB).
# Needs readelf (binutils).
set -u
ffnc=$1 model=$2 arch=$3 limit=$4 cubin=$5
"$ffnc" build "$model" --emit cubin --arch "$arch" -o "$cubin" || exit 1
command -v readelf >/dev/null || { echo "FAIL: readelf (binutils) not found"; exit 1; }
sizes=$(readelf -S -W "$cubin" 2>/dev/null |
  sed -n 's/.*\.text\.\(k[0-9][0-9]*\(_rows\|_one\)\{0,1\}\) *PROGBITS *[0-9a-f]* [0-9a-f]* \([0-9a-f]*\) .*/\1 \3/p')
[ -n "$sizes" ] || { echo "FAIL: no rowwise kernel in $cubin"; exit 1; }
rc=0
echo "$sizes" | {
  while read -r name hex; do
    bytes=$((0x$hex))
    if [ "$bytes" -gt "$limit" ]; then
      echo "FAIL: $name is $bytes bytes of $arch code (limit $limit)"
      rc=1
    else
      echo "ok   $name: $bytes bytes (limit $limit)"
    fi
  done
  exit $rc
}
