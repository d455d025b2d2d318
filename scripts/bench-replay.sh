#!/usr/bin/env bash
# Kernel record and replay's costs (issue 21, docs/replay.md), all on the isolated device and
# measured in one run (benches/isolate/record.c):
#   1. the launch path: an empty target and a small-map target with recording off
#      (LIBOMPTARGET_RECORD_MAX=0), with the default (only a launch that fails is recorded) and
#      with LIBOMPTARGET_RECORD on but choosing no launch (a kernel regex that matches none):
#      ns per launch, best of RUNS, and each against off (goal: ~1.00);
#   2. recording every launch (LIBOMPTARGET_RECORD_LAUNCH=all) of a BabelStream-like loop
#      (4 kernels over three STREAM_MIB-MiB arrays): the slowdown against not recording, and
#      the bytes written per launch;
#   3. omp-replay of one recorded kernel over a 64 MiB array (--repeat 11): the restore time (first, and
#      best of the later ones) against a memcpy of 64 MiB (goal: <= 2x). The first restore reads
#      .record_input into fresh pages (huge pages asked for, all faulted in by one call); the later
#      ones copy from the bytes read into memory before the first run (not counted in any run).
# Needs `make dist`. Usage: scripts/bench-replay.sh [launches] [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
LAUNCHES=${1:-5000}
RUNS=${2:-5}
STREAM_MIB=${STREAM_MIB:-2}
STREAM_ITERS=${STREAM_ITERS:-4}
DIST=${OMP_REPLAY_DIST:-dist}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
clang-22 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -O2 -g -L.deps/lib22 \
  benches/isolate/record.c -o "$OUT/record"

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
ratio() { echo "scale=2; $1 / $2" | bc -l; }
iso() { env LD_LIBRARY_PATH="$DIST/lib" LIBOMPTARGET_ISOLATE=1 "$@"; }
# best FIELD CMD...: the lowest FIELD of $RUNS runs.
best() {
  local f=$1; shift
  for _ in $(seq "$RUNS"); do "$@" | field "$f"; done | sort -g | head -1
}

echo "== record/replay: the launch path, isolated device, ns per launch (best of $RUNS x $LAUNCHES)"
printf '%-40s %10s %10s %10s %10s\n' recording empty "x off" small-map "x off"
OFF_E=$(best empty_ns iso LIBOMPTARGET_RECORD_MAX=0 "$OUT/record" launch "$LAUNCHES")
OFF_S=$(best smallmap_ns iso LIBOMPTARGET_RECORD_MAX=0 "$OUT/record" launch "$LAUNCHES")
row() {
  local name=$1; shift
  local e s
  e=$(best empty_ns iso "$@" "$OUT/record" launch "$LAUNCHES")
  s=$(best smallmap_ns iso "$@" "$OUT/record" launch "$LAUNCHES")
  printf '%-40s %10s %10s %10s %10s\n' "$name" "$e" "$(ratio "$e" "$OFF_E")" "$s" "$(ratio "$s" "$OFF_S")"
}
printf '%-40s %10s %10s %10s %10s\n' "off (LIBOMPTARGET_RECORD_MAX=0)" "$OFF_E" 1.00 "$OFF_S" 1.00
row "default (a failing launch only)"
row "on, choosing none (_KERNEL=no_match)" LIBOMPTARGET_RECORD="$OUT/none" LIBOMPTARGET_RECORD_KERNEL=no_match

echo "== record/replay: recording every launch of a BabelStream-like loop ($STREAM_ITERS x 4 kernels, 3 x $STREAM_MIB MiB)"
PLAIN=$(best stream_ms_per_iteration iso LIBOMPTARGET_RECORD_MAX=0 "$OUT/record" stream "$STREAM_ITERS" "$STREAM_MIB")
ALL_OUT=$(iso LIBOMPTARGET_RECORD="$OUT/all" LIBOMPTARGET_RECORD_LAUNCH=all LIBOMPTARGET_RECORD_MAX=4G \
  "$OUT/record" stream "$STREAM_ITERS" "$STREAM_MIB")
ALL=$(echo "$ALL_OUT" | field stream_ms_per_iteration)
RECORDS=$(find "$OUT/all" -name '*.json' | wc -l)
BYTES=$(du -sb "$OUT/all" | cut -f1)
rm -rf "$OUT/all"
printf 'not recorded %.3f ms per iteration; every launch recorded %.3f ms (%sx); %s records, %s bytes per launch\n' \
  "$PLAIN" "$ALL" "$(ratio "$ALL" "$PLAIN")" "$RECORDS" "$((BYTES / (RECORDS > 0 ? RECORDS : 1)))"

echo "== record/replay: omp-replay restore of a 64 MiB kernel against memcpy (goal <= 2x)"
iso LIBOMPTARGET_RECORD="$OUT/big" "$OUT/record" big >/dev/null
REPLAY=$("$DIST/bin/omp-replay" "$OUT"/big/*.json --repeat 11)
FIRST=$(echo "$REPLAY" | sed -n 's/^run 1: .*(restore \([0-9.]*\) ms)/\1/p')
LATER=$(echo "$REPLAY" | sed -n 's/^run [0-9]*: .*(restore \([0-9.]*\) ms)/\1/p' | tail -n +2 | sort -g | head -1)
MEMCPY=$(best memcpy_ms env LD_LIBRARY_PATH="$DIST/lib" "$OUT/record" memcpy)
printf 'memcpy 64 MiB %.3f ms; restore: first %.3f ms (%sx), later best %.3f ms (%sx)\n' \
  "$MEMCPY" "$FIRST" "$(ratio "$FIRST" "$MEMCPY")" "$LATER" "$(ratio "$LATER" "$MEMCPY")"
