#!/bin/sh
# outputs_test.sh FFNC MODEL WORKDIR: what ffnc writes and how it words shape mistakes.
#   - a new output gets 0666 less the umask (it was 0600 from mkstemp, then a fixed 0644);
#   - an input whose static dim is wrong is refused (exit 1) with a message that names the
#     input, the dim and both sizes, and still shows both shapes; compare says the same.
set -u
ffnc=$1 model=$2 dir=$3
mkdir -p "$dir" && cd "$dir" || exit 1
rm -f out.ir w.st in.st out.st
fail() { echo "FAIL: $*"; exit 1; }
mode() { stat -c %a "$1"; }

(umask 027 && "$ffnc" build "$model" --emit ir -o out.ir) || fail "build --emit ir"
[ "$(mode out.ir)" = 640 ] || fail "--emit output under umask 027 has mode $(mode out.ir), expected 640"
(umask 022 && "$ffnc" gen "$model" --weights w.st) || fail "gen --weights"
[ "$(mode w.st)" = 644 ] || fail "gen output under umask 022 has mode $(mode w.st), expected 644"

# inputs for the same model with D = 128 instead of 256
sed 's/^dim D = 256/dim D = 128/' "$model" >d128.ffn
grep -q '^dim D = 128' d128.ffn || fail "the model no longer declares 'dim D = 256'"
"$ffnc" gen d128.ffn --inputs in.st --dim T=5 || fail "gen --inputs"
"$ffnc" run "$model" --weights w.st --input in.st --output out.st --device cpu 2>err.txt
rc=$?
[ $rc -eq 1 ] || fail "run with a wrong input shape: exit $rc, expected 1: $(cat err.txt)"
grep -q "input 'x': dim 1: expected 256, got 128 (declared \[T, 256\], got \[5, 128\])" err.txt ||
  fail "unclear shape message: $(cat err.txt)"
[ ! -e out.st ] || fail "an output was written"
"$ffnc" gen "$model" --inputs right.st --dim T=5 || fail "gen --inputs right.st"
"$ffnc" compare in.st right.st >cmp.txt
rc=$?
[ $rc -eq 1 ] || fail "compare of two shapes: exit $rc, expected 1"
grep -q "FAIL x: dim 1 is 128 here, 256 in right.st (\[5, 128\] vs \[5, 256\])" cmp.txt ||
  fail "compare's shape message: $(cat cmp.txt)"
echo "PASSED: $(cat err.txt)"
