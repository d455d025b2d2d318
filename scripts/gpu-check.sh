#!/usr/bin/env bash
# The prepared GPU check of issue 22 (docs/gpu-check.md): LLVM 19.1.7's offload suite (its
# nvptx64 RUN lines), the e2e programs that make sense on a GPU, and the speed table's benches,
# built here for sm_90, run on an NVIDIA GPU machine in one command, checked here.
#
#   scripts/gpu-check.sh build      here: compile everything, pack .gpucheck/gpucheck-bundle.tar
#   scripts/gpu-check.sh run        there ($OUT set): run it all on our runtime (and LLVM 19's)
#   scripts/gpu-check.sh check DIR  here: FileCheck the outputs brought back in DIR; the table
#   scripts/gpu-check.sh dry-run    here, no GPU: build, the run phase on the CPU, check, and
#                                   the device tool call that would start the real run
#
# Environment: GPUCHECK_TESTS=a,b (only suite tests / e2e programs whose path holds a or b),
# GPUCHECK_LLVM=0 (leave LLVM's runtime home), GPUCHECK_DIR (instead of .gpucheck/),
# LLVM_SUITE_DIR (the shared llvm-suite tools; default ../shared/tools/llvm-suite).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
case "${1:-}" in
  build|run|check|dry-run) ;;
  *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
exec python3 "$here/gpu-check/gpucheck.py" "$@"
