#!/usr/bin/env bash
# Isolated local devices (LIBOMPTARGET_ISOLATE=1), against baselines measured in the same
# run: an empty `#pragma omp target` versus a bare round trip over the same mechanism (a
# pipe pair between two processes: the floor) and versus the remote device over gRPC on a
# loopback offload-server; host->device and device->host copies versus memcpy of the same
# size (goal: at least 0.8). The empty target is measured again with a busy loop on every
# core (loaded), as is and with the worker's short time slice (LIBOMPTARGET_ISOLATE_SLICE_US
# =100, docs/isolate.md), each against the floor measured the same way (its answering side
# without and with the slice); and the CPU an idle program's worker uses over
# IDLE_S seconds (goal: at most 1% of a CPU). Needs `make dist`.
# Usage: scripts/bench-isolate.sh [MiB] [launches]
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=${1:-512}
LAUNCHES=${2:-20000}
DIST=${OMP_ISOLATE_DIST:-dist}
OUT=$(mktemp -d)
IDLE_S=${IDLE_S:-10}
SERVER_PID=
LOAD_PIDS=()
stop_load() { [ ${#LOAD_PIDS[@]} -eq 0 ] || kill "${LOAD_PIDS[@]}" 2>/dev/null || true; LOAD_PIDS=(); }
trap 'stop_load; [ -n "$SERVER_PID" ] && kill $SERVER_PID 2>/dev/null; rm -rf "$OUT"' EXIT

LLVM=22
clang-$LLVM -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -O2 -L.deps/lib$LLVM \
  tests/programs/remote/bench_remote.c -o "$OUT/bench" 2>/dev/null
clang-$LLVM -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -O2 -L.deps/lib$LLVM \
  benches/isolate/idle.c -o "$OUT/idle" 2>/dev/null
cc -O2 benches/isolate/floor.c -o "$OUT/floor"

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
FLOOR=$("$OUT/floor" "$MIB" "$LAUNCHES")
ISO=$(LD_LIBRARY_PATH="$DIST/lib" LIBOMPTARGET_ISOLATE=1 OMP_DEFAULT_DEVICE=0 "$OUT/bench" "$MIB" "$LAUNCHES")
LOCAL=$(LD_LIBRARY_PATH="$DIST/lib" OMP_DEFAULT_DEVICE=0 "$OUT/bench" "$MIB" "$LAUNCHES")
IDLE=$(LD_LIBRARY_PATH="$DIST/lib" LIBOMPTARGET_ISOLATE=1 OMP_DEFAULT_DEVICE=0 "$OUT/idle" "$IDLE_S")
# Loaded: a busy loop on every core while the floor and the empty target are measured again.
# One per core, pinned there when taskset exists: unpinned, the scheduler may put both on one
# core and leave the other to the launches (then "loaded" measures an idle core).
PIN=$(command -v taskset || true)
for ((cpu = 0; cpu < $(nproc); cpu++)); do
  ${PIN:+$PIN -c $cpu} sh -c 'while :; do :; done' & LOAD_PIDS+=($!)
done
FLOOR_LOADED=$("$OUT/floor" 1 "$LAUNCHES")
ISO_LOADED=$(LD_LIBRARY_PATH="$DIST/lib" LIBOMPTARGET_ISOLATE=1 OMP_DEFAULT_DEVICE=0 "$OUT/bench" 1 "$LAUNCHES")
ISO_LOADED_SLICE=$(LD_LIBRARY_PATH="$DIST/lib" LIBOMPTARGET_ISOLATE=1 LIBOMPTARGET_ISOLATE_SLICE_US=100 OMP_DEFAULT_DEVICE=0 \
  "$OUT/bench" 1 "$LAUNCHES")
stop_load

"$DIST/bin/offload-server" --listen 127.0.0.1:0 --insecure-loopback --quiet \
  --library-path "$DIST/lib" >"$OUT/server.out" 2>"$OUT/server.err" &
SERVER_PID=$!
for _ in $(seq 100); do grep -q listening "$OUT/server.out" 2>/dev/null && break; sleep 0.1; done
ADDR=$(sed -n 's/^offload-server listening on //p' "$OUT/server.out")
REMOTE_KERNEL=nan
if [ -n "$ADDR" ]; then
  REMOTE=$(LD_LIBRARY_PATH="$DIST/lib" LIBOMPTARGET_RPC_ADDRESS="$ADDR" OMP_DEFAULT_DEVICE=4 \
    "$OUT/bench" 64 2000)
  REMOTE_KERNEL=$(echo "$REMOTE" | field empty_kernel_us)
fi

RT=$(echo "$FLOOR" | field pipe_round_trip_us)
RT_SLICE=$(echo "$FLOOR" | field pipe_round_trip_slice_us)
MEMCPY=$(echo "$FLOOR" | field memcpy_MBps)
KERNEL=$(echo "$ISO" | field empty_kernel_us)
H2D=$(echo "$ISO" | field h2d_MBps)
D2H=$(echo "$ISO" | field d2h_MBps)
LOCAL_KERNEL=$(echo "$LOCAL" | field empty_kernel_us)
RT_LOADED=$(echo "$FLOOR_LOADED" | field pipe_round_trip_us)
RT_LOADED_SLICE=$(echo "$FLOOR_LOADED" | field pipe_round_trip_slice_us)
KERNEL_LOADED=$(echo "$ISO_LOADED" | field empty_kernel_us)
KERNEL_LOADED_SLICE=$(echo "$ISO_LOADED_SLICE" | field empty_kernel_us)
IDLE_WORKER=$(echo "$IDLE" | field idle_worker_cpu_pct)
IDLE_PROGRAM=$(echo "$IDLE" | field idle_program_cpu_pct)

printf '%-38s %12s %14s %8s %s\n' "measure" "isolated" "baseline" "ratio" "goal"
printf '%-38s %10.2f us %11.2f us %8.2f %s\n' "empty target vs bare pipe round trip" "$KERNEL" "$RT" "$(echo "$KERNEL / $RT" | bc -l)" "(floor; target <= 10 us; floor with a 100 us slice: $RT_SLICE us)"
printf '%-38s %10.2f us %11.2f us %8.2f %s\n' "loaded: empty target vs pipe round trip" "$KERNEL_LOADED" "$RT_LOADED" "$(echo "$KERNEL_LOADED / $RT_LOADED" | bc -l)" "(busy loop on every core; target <= 10 us)"
printf '%-38s %10.2f us %11.2f us %8.2f %s\n' "loaded, 100 us slice (SLICE_US=100)" "$KERNEL_LOADED_SLICE" "$RT_LOADED_SLICE" "$(echo "$KERNEL_LOADED_SLICE / $RT_LOADED_SLICE" | bc -l)" "(worker and floor with it)"
printf '%-38s %10.3f %%  %11.3f %%  %8s %s\n' "idle ${IDLE_S} s: CPU of worker, program" "$IDLE_WORKER" "$IDLE_PROGRAM" "" "(worker <= 1%)"
printf '%-38s %10.2f us %11.2f us %8.3f %s\n' "empty target vs remote device (gRPC)" "$KERNEL" "$REMOTE_KERNEL" "$(echo "$KERNEL / $REMOTE_KERNEL" | bc -l 2>/dev/null || echo nan)" ""
printf '%-38s %10.0f MB/s %9.0f MB/s %8.2f %s\n' "host->device ${MIB} MiB vs memcpy" "$H2D" "$MEMCPY" "$(echo "$H2D / $MEMCPY" | bc -l)" ">= 0.8"
printf '%-38s %10.0f MB/s %9.0f MB/s %8.2f %s\n' "device->host ${MIB} MiB vs memcpy" "$D2H" "$MEMCPY" "$(echo "$D2H / $MEMCPY" | bc -l)" ">= 0.8"
printf '%-38s %10.2f us\n' "(empty target, shared host device)" "$LOCAL_KERNEL"
