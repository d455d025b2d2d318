#!/usr/bin/env bash
# Installs the toolchains this project builds and tests with, and prepares .deps/:
#   clang-19/22, flang-19/22, LLVM's runtimes (libomp5-19, liboffload-22) for side-by-side runs,
#   libomp-22-dev (system) and a private extract of libomp-19-dev (the two conflict),
#   Open MPI and MPICH (MPI devices' tests and benchmark; the runtime loads libmpi only under a launcher).
#   gdb (omp-replay's test stops a replayed kernel at its source line under gdb).
#   valgrind (make bench counts instructions and cache misses per launch with callgrind).
# Idempotent: a second run only checks. Needs root (or sudo) the first time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/.deps"
pkgs=(clang-19 clang-22 flang-19 flang-22 llvm-19 llvm-22 libomp5-19 liboffload-22 libomp-22-dev llvm-19-tools lld-19 make python3 python3-pip unzip bc cmake xz-utils binutils openmpi-bin libopenmpi-dev mpich gdb valgrind)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  # clang-22 comes from bookworm-security; make sure the index is current.
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >&2
fi

mkdir -p "$deps"
dev19="$deps/libomp-19-dev/usr/lib/llvm-19"
if [ ! -f "$dev19/lib/libomptarget.devicertl.a" ]; then
  echo "setup: extracting libomp-19-dev privately into .deps/" >&2
  (cd "$deps" && apt-get download -qq libomp-19-dev=1:19.1.7-3~deb12u1 2>/dev/null \
     && dpkg-deb -x libomp-19-dev_*.deb libomp-19-dev && rm -f libomp-19-dev_*.deb)
fi
# Directories of dev symlinks so `-L` finds -lomptarget (and clang 19's devicertl) for each version.
mkdir -p "$deps/lib19" "$deps/lib22"
ln -sfn /usr/lib/llvm-19/lib/libomptarget.so.19.1 "$deps/lib19/libomptarget.so"
ln -sfn /usr/lib/llvm-19/lib/libomp.so.5 "$deps/lib19/libomp.so"
ln -sfn "$dev19/lib/libomptarget.devicertl.a" "$deps/lib19/libomptarget.devicertl.a"
ln -sfn /usr/lib/llvm-22/lib/libomptarget.so.22.1 "$deps/lib22/libomptarget.so"
ln -sfn "$dev19/lib/clang/19/include" "$deps/include19"
# The CUDA compiler pieces clang needs to build nvptx64 images (ptxas, nvlink, fatbinary and
# libdevice), from NVIDIA's wheels on the Python package index: pinned versions, checked by
# SHA-256 before anything is unpacked. CUDA 13.0 (the release a driver 580 machine runs).
# Laid out as a toolkit directory clang accepts with --cuda-path: .deps/cuda-13.0.
"$root/scripts/setup-cuda.sh" "$deps"
echo "setup: toolchains ready" >&2
