#!/bin/sh
# Compile time and memory stay linear in the model (issue 11: --emit cuda of 10,000 Llama-8B
# layers took 124 s in normfold and gateup, each scanning the graph once per layer; 10,000
# layers now take about 1.5 s and 160 MB). 5,000 layers within 15 s and 1 GB of address
# space fail loudly if a pass goes quadratic again (it took 30 s before), without being
# flaky on a loaded machine. The front end: 40,000 outputs and 100,000 bindings in seconds.
ffnc=$1 model=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fails=0
bounded() { # bounded WHAT SECONDS COMMAND...
  what=$1 secs=$2; shift 2
  start=$(date +%s)
  (ulimit -v 1000000; timeout "$secs" "$@" >/dev/null 2>err.txt); rc=$?
  t=$(( $(date +%s) - start ))
  if [ $rc -ne 0 ]; then
    echo "FAIL: $what: exit $rc after $t s (limit $secs s, 1 GB): $(head -c 300 err.txt)"; fails=$((fails + 1))
  else
    echo "$what: $t s"
  fi
}
sed 's/0\.\.L/0..5000/' "$model" > deep.ffn
bounded "build --emit cuda, 5000 Llama-8B layers" 15 "$ffnc" build deep.ffn --emit cuda -o deep.cu
awk 'BEGIN { print "model many_outputs\ndim T\ninput x : [T, 8] f32";
             for (i = 0; i < 40000; i++) printf "y%d = x + %d\noutput y%d\n", i, i, i }' > outputs.ffn
bounded "check, 40000 outputs" 15 "$ffnc" check outputs.ffn
awk 'BEGIN { print "model many_names\ndim T\ninput x : [T, 8] f32";
             for (i = 0; i < 100000; i++) printf "v%d = x\n", i; print "output v99999" }' > names.ffn
bounded "check, 100000 bindings" 15 "$ffnc" check names.ffn
[ $fails -eq 0 ] && echo "scale: ok"
exit $fails
