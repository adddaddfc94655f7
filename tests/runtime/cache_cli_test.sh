#!/bin/sh
# cache_cli_test.sh FFNC WORKDIR: `ffnc build --emit` through the kernel cache (issue 11). A
# cached cubin with zeroed bytes is compiled again, not written out; --emit ptx writes the PTX
# text without its NUL; a cache directory others can write to is not used, and ffnc says so
# once (a note; the build still succeeds). Needs NVRTC, no GPU.
set -u
ffnc=$1 work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
printf 'model m\ndim T\ninput x : [T, 64] f32\ny = relu(x) * 2\noutput y\n' > m.ffn
export FFNC_CACHE_DIR="$work/cache"
unset FFNC_NO_CACHE
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
build() { "$ffnc" build m.ffn --arch sm_80 "$@" 2>err.txt || fail "build $*: exit $?: $(cat err.txt)"; }

build --emit cubin -o a.cubin
entry=$(ls cache/*.bin)
size=$(wc -c < "$entry")
dd if=/dev/zero of="$entry" bs=1 seek=$((size - 64)) count=64 conv=notrunc 2>/dev/null
build --emit cubin -o b.cubin
cmp -s a.cubin b.cubin || fail "a cached cubin with zeroed bytes was written out"

build --emit ptx -o a.ptx
[ -s a.ptx ] && [ "$(tr -d '\000' < a.ptx | wc -c)" -eq "$(wc -c < a.ptx)" ] || fail "--emit ptx wrote a NUL"
build --emit ptx -o b.ptx
cmp -s a.ptx b.ptx || fail "the cached PTX differs from the compiled one"
[ ! -s err.txt ] || fail "a private cache directory gave a message: $(cat err.txt)"

chmod 0777 cache
build --emit cubin -o c.cubin
cmp -s a.cubin c.cubin || fail "the cubin built past an untrusted cache differs"
[ "$(grep -c "^ffnc: note: kernel cache .*/cache is writable by other users (mode 0777): not used$" err.txt)" -eq 1 ] ||
  fail "no single note about the untrusted cache: $(cat err.txt)"
[ $fails -eq 0 ] && echo "cache from the command line: ok"
exit $fails
