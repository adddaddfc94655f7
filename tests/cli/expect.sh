#!/bin/sh
# expect.sh STATUS PATTERN COMMAND...: passes if COMMAND exits with STATUS and its output
# (standard output and error together) matches the extended regular expression PATTERN.
set -u
want=$1 pattern=$2
shift 2
out=$("$@" 2>&1)
rc=$?
[ "$rc" -eq "$want" ] || { echo "FAIL: exit $rc, expected $want: $*"; printf '%s\n' "$out"; exit 1; }
printf '%s\n' "$out" | grep -Eq -e "$pattern" || {
  echo "FAIL: output does not match /$pattern/: $*"
  printf '%s\n' "$out"
  exit 1
}
echo "PASSED: $(printf '%s\n' "$out" | head -n 1)"
