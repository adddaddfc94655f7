#!/bin/sh
# scripts/pack_branch.sh NAME: a branch's worktree at /work/wt/NAME (its source at HEAD and its
# build/, configured there) packed as .devcarry/v_NAME.tar.xz (~3 MB: the build stripped as
# scripts/devcarry.sh strips it), so that one device call can A/B several branches against main.
# On the GPU machine (carry [".devcarry"]):
#   tar xJf .devcarry/v_NAME.tar.xz -C /work/wt      # the same absolute paths as here
#   export FFNC_SOURCE_DIR=/work/wt/NAME FFNC_CACHE_DIR=/work/wt/NAME/build/test-kernel-cache
#   cd /work/wt/NAME/build && ctest -L gpu ... && ./ffnc bench ...
# (main's own build travels as .devcarry/build: scripts/devcarry.sh). The eleventh session ran
# three branches' GPU tests in parallel and their benches in turn this way, in one call.
set -eu
n=$1
[ -d "/work/wt/$n/build" ] || { echo "pack_branch: no /work/wt/$n/build (git worktree add /work/wt/$n BRANCH; configure and build it there)" >&2; exit 1; }
here=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "/tmp/pk/$n"
mkdir -p "/tmp/pk/$n" "$here/.devcarry"
git -C "/work/wt/$n" archive HEAD | tar x -C "/tmp/pk/$n"
cp -a "/work/wt/$n/build" "/tmp/pk/$n/build"
cd "/tmp/pk/$n/build"
find . \( -name "*.o" -o -name "*.cubin" -o -name "*.ffnx" -o -name "*.safetensors" -o -name "*.st" -o -name "*.a" \) -delete
rm -rf Testing tests/no_gpu tests/jit_units tests/cli_outputs host_examples analyze_* install* test-kernel-cache
find . -path "*corpus*" -prune -exec rm -rf {} + 2>/dev/null || true
find . -type f -perm -u+x | while read -r f; do if file "$f" | grep -q ELF; then strip "$f"; fi; done
tar cJf "$here/.devcarry/v_$n.tar.xz" -C /tmp/pk "$n"
rm -rf "/tmp/pk/$n"
ls -la "$here/.devcarry/v_$n.tar.xz"
