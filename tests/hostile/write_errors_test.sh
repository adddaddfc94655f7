#!/bin/sh
# Every command that writes reports a failed write with exit 1 (they exited 0 on /dev/full).
ffnc=$1 model=$2 work=$3
[ -w /dev/full ] || { echo "no /dev/full here: skipped"; exit 77; }
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fails=0
expect1() { # expect1 WHAT COMMAND...: exit status 1 and a message on stderr
  what=$1; shift
  "$@" 2>err.txt; rc=$?
  if [ $rc -ne 1 ] || ! grep -q "No space left on device" err.txt; then
    echo "FAIL: $what: exit $rc, stderr: $(cat err.txt)"; fails=$((fails + 1))
  fi
}
"$ffnc" gen "$model" --weights w.safetensors || exit 1
expect1 "build -o - > /dev/full" sh -c "'$ffnc' build '$model' --emit ir -o - > /dev/full"
expect1 "build -o /dev/full" "$ffnc" build "$model" --emit cuda -o /dev/full
expect1 "compare > /dev/full" sh -c "'$ffnc' compare w.safetensors w.safetensors > /dev/full"
expect1 "--dump-ir-after > /dev/full" sh -c "'$ffnc' build '$model' --emit ir --dump-ir-after=fuse -o ir.txt > /dev/full"
expect1 "gen --weights /dev/full" "$ffnc" gen "$model" --weights /dev/full
[ -z "$(ls -A | grep -v -e '^w.safetensors$' -e '^err.txt$' -e '^ir.txt$')" ] || { echo "FAIL: left behind: $(ls -A)"; fails=$((fails + 1)); }
[ $fails -eq 0 ] && echo "write errors: ok"
exit $fails
