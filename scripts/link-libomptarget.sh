#!/usr/bin/env bash
# Links libomptarget.so from the Rust static library so that every export carries the
# symbol version VERS1.0 (rustc's own cdylib version script would put them at Base, and
# clang-linked programs import `__tgt_*@VERS1.0`).
# usage: link-libomptarget.sh <libomptarget.a> <exports.map> <output.so> [soname]
set -euo pipefail
archive=$1 map=$2 out=$3 soname=${4:-}
# Pull in exactly the exported functions (-u), then let --gc-sections drop the rest of std.
exports=$(nm --defined-only "$archive" 2>/dev/null | awk '$2=="T"{print $3}' \
  | grep -E '^(__tgt_|omp_|llvm_omp_|ompx_|ompt_libomptarget_|__llvm|llvmLaunchKernel|__kmpc_push_target)' | sort -u)
[ -n "$exports" ] || { echo "link-libomptarget: no exports found in $archive" >&2; exit 1; }
undef=()
[ -z "$soname" ] || undef+=("-Wl,-soname,$soname")
for s in $exports; do undef+=("-Wl,-u,$s"); done
cc -shared -o "$out.tmp" -Wl,--version-script="$map" -Wl,--gc-sections -Wl,-z,now \
  "${undef[@]}" "$archive" -lgcc_s -lpthread -ldl -lm -lc
mv -f "$out.tmp" "$out"
