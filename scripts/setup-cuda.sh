#!/usr/bin/env bash
# Puts the CUDA compiler pieces into DEPS/cuda-13.0 (default: .deps/ of this checkout):
# bin/{ptxas,nvlink,fatbinary}, nvvm/libdevice/libdevice.10.bc, version.txt, and the empty
# include/ and lib64/ that clang 19 looks for before it accepts a directory as a CUDA
# installation. Enough for `clang-19 --offload-arch=sm_90 --cuda-path=…` and for ompcc's
# nvptx64 target to build fat binaries on a machine without a GPU or a CUDA install.
#
# The pieces come from NVIDIA's wheels on the Python package index (no CUDA repository is
# reachable here): pinned versions, each file checked against its SHA-256 before it is
# unpacked. Idempotent: a second run only checks. Needs python3 -m pip and unzip.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps="${1:-$root/.deps}"
cuda="$deps/cuda-13.0"
version="13.0.88"
# name  sha256  — the wheels for manylinux x86_64 (py3-none: any Python 3).
wheels=(
  "nvidia_cuda_nvcc-$version-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03"
  "nvidia_nvvm-$version-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0"
)
if [ -x "$cuda/bin/ptxas" ] && [ -x "$cuda/bin/nvlink" ] && [ -f "$cuda/nvvm/libdevice/libdevice.10.bc" ] \
   && [ "$(cat "$cuda/version.txt" 2>/dev/null)" = "CUDA Version $version" ]; then
  exit 0
fi
echo "setup: fetching the CUDA $version compiler pieces (ptxas, nvlink, libdevice) into $cuda" >&2
cache="$deps/wheels"
mkdir -p "$cache"
for w in "${wheels[@]}"; do
  set -- $w
  file="$cache/$1"
  if [ ! -f "$file" ] || ! echo "$2  $file" | sha256sum -c --status; then
    rm -f "$file"
    pkg=$(echo "$1" | cut -d- -f1 | tr _ -)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_12_x86_64 \
      --platform manylinux2010_x86_64 -d "$cache" "$pkg==$version" >&2
  fi
  if ! echo "$2  $file" | sha256sum -c --status; then
    echo "setup: $1 does not have the expected SHA-256; not unpacking it" >&2
    exit 1
  fi
done
tmp=$(mktemp -d "$deps/cuda-unpack.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
set -- ${wheels[0]}; unzip -q -o "$cache/$1" 'nvidia/cu13/bin/ptxas' 'nvidia/cu13/bin/nvlink' 'nvidia/cu13/bin/fatbinary' -d "$tmp"
set -- ${wheels[1]}; unzip -q -o "$cache/$1" 'nvidia/cu13/nvvm/libdevice/libdevice.10.bc' -d "$tmp"
mkdir -p "$tmp/nvidia/cu13/include" "$tmp/nvidia/cu13/lib64"
chmod 755 "$tmp/nvidia/cu13/bin/"*
echo "CUDA Version $version" > "$tmp/nvidia/cu13/version.txt"
rm -rf "$cuda"
mv "$tmp/nvidia/cu13" "$cuda"
echo "setup: CUDA compiler pieces ready in $cuda" >&2
