#!/usr/bin/env bash
# The demo: compile the examples with ompcc and run them on our runtime (dist/lib).
# Run through `make demo`, which sets up the toolchains and builds dist/ first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/target/demo"
mkdir -p "$out"
export LD_LIBRARY_PATH="$root/dist/lib"
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }
step "$root/dist/bin/ompcc" -fopenmp -O2 --target-offload=x86_64-pc-linux-gnu "$root/examples/vector_add.c" -o "$out/vector_add"
step "$out/vector_add"
echo
echo "The same binary with the runtime telling what it does (LIBOMPTARGET_INFO=0x10):"
LIBOMPTARGET_INFO=0x10 "$out/vector_add"
step "$root/dist/bin/ompcc" -fopenmp -O2 --target-offload=x86_64-pc-linux-gnu "$root/examples/saxpy.f90" -o "$out/saxpy"
step "$out/saxpy"
step "$root/dist/bin/ompcc" --offload-list "$out/vector_add"
