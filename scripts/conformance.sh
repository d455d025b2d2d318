#!/usr/bin/env bash
# Runs LLVM 19.1.7's own offload test suite (../shared/tools/llvm-suite) against our
# dist/lib/libomptarget.so.19.1 and compares with LLVM's recorded results: every test that
# passes on LLVM's runtime must pass on ours. Exits non-zero on any such regression.
# usage: scripts/conformance.sh [--isolate] [extra run_llvm_suite.py args, e.g. a test subset]
#   --isolate: the same run with LIBOMPTARGET_ISOLATE=1 (kernels in a worker process) and the
#   mapping checker on (LIBOMPTARGET_CHECK=bugs: guard pages, access tracking, findings, and
#   each kernel's stack and device malloc against a GPU's defaults); the
#   tests listed in scripts/conformance-isolate-expected.txt may fail there, each for the
#   reason written beside it (they rely on sharing the program's memory, or are wrong on
#   purpose), and only the tests listed in scripts/conformance-check-expected.txt may make
#   the checker report anything: a finding on any other test is a false alarm and fails.
# usage: scripts/conformance.sh --mpi [TEST-OR-SUBSTRING ...]
#   --mpi: every test that passed in the plain run (run it first: its kept binaries are run
#   again, nothing is compiled) runs with its target regions on an MPI device rank
#   (`mpirun -np 1 TEST : -np 1 offload-mpi-device`, LIBOMPTARGET_MPI_DEVICES_FIRST=1; see
#   scripts/conformance-mpi.py); the tests listed in scripts/conformance-mpi-expected.txt may
#   fail there, each for the reason written beside it (they need shared memory).
set -euo pipefail
mode=plain
expected=/dev/null
if [ "${1:-}" = "--isolate" ]; then
  shift
  mode=isolate
  expected="$(cd "$(dirname "$0")" && pwd)/conformance-isolate-expected.txt"
  set -- --env LIBOMPTARGET_ISOLATE=1 --env LIBOMPTARGET_CHECK=bugs "$@"
elif [ "${1:-}" = "--mpi" ]; then
  shift
  mode=mpi
  expected="$(cd "$(dirname "$0")" && pwd)/conformance-mpi-expected.txt"
fi
root=$(cd "$(dirname "$0")/.." && pwd)
suite="${LLVM_SUITE_DIR:-$root/../shared/tools/llvm-suite}"
[ -d "$suite" ] || { echo "conformance: $suite not found (set LLVM_SUITE_DIR)" >&2; exit 1; }
[ -f "$root/dist/lib/libomptarget.so.19.1" ] || { echo "conformance: run 'make dist' first" >&2; exit 1; }
"$suite/fetch-suite.sh" >/dev/null
out="$root/target/conformance"
mkdir -p "$out"
jobs=$(nproc)
work="$out/work-$mode"
rm -rf "$work"
if [ "$mode" = mpi ]; then
  command -v mpirun >/dev/null || { echo "conformance: --mpi needs mpirun (Open MPI: scripts/setup.sh installs it)" >&2; exit 1; }
  [ -f "$out/ours-plain.json" ] && [ -d "$out/work-plain" ] \
    || { echo "conformance: --mpi runs the plain run's binaries again: run scripts/conformance.sh first" >&2; exit 1; }
  "$root/scripts/conformance-mpi.py" --plain-work "$out/work-plain" --plain-results "$out/ours-plain.json" \
    --work "$work" --dist "$root/dist" -j "$jobs" --out "$out/ours-$mode.json" "$@" \
    | tee "$out/summary-$mode.txt"
else
  "$suite/run_llvm_suite.py" --runtime-dir "$root/dist/lib" -j "$jobs" -q --out "$out/ours-$mode.json" \
    --keep-work --work-dir "$work" \
    --compare "$suite/baseline-llvm19.json" "$@" | tee "$out/summary-$mode.txt" || true  # failures are judged below
fi
# Regressions: tests that pass with LLVM's runtime and do not pass with ours.
extra=$#; [ "$mode" = isolate ] && extra=$((extra - 4))  # --env ISOLATE=1 --env CHECK=bugs
full=$([ "$extra" -eq 0 ] && echo full || echo subset)
checked="$(cd "$(dirname "$0")" && pwd)/conformance-check-expected.txt"
python3 - "$suite/baseline-llvm19.json" "$out/ours-$mode.json" "$full" "$expected" "$mode" "$work" "$checked" <<'PY'
import json, os, sys
def load(p):
    d = json.load(open(p))
    tests = d.get("tests", d)
    if isinstance(tests, list):
        return {t["name"]: t["status"] for t in tests}
    return {k: (v["status"] if isinstance(v, dict) else v) for k, v in tests.items()}
base, ours = load(sys.argv[1]), load(sys.argv[2])
# Tests allowed to fail in this mode: `name  # reason` lines.
allowed = {l.split("#")[0].strip() for l in open(sys.argv[4]) if l.split("#")[0].strip()}
bad = sorted(t for t, s in ours.items() if base.get(t) == "pass" and s != "pass" and t not in allowed)
excused = sorted(t for t, s in ours.items() if base.get(t) == "pass" and s != "pass" and t in allowed)
if not ours or (sys.argv[3] == "full" and len(ours) != len(base)):
    sys.exit(f"conformance: results for {len(ours)} tests, expected {len(base)}")
better = sorted(t for t, s in ours.items() if s == "pass" and base.get(t) not in (None, "pass"))
passed = sum(1 for s in ours.values() if s == "pass")
others = len(ours) - passed - len(bad)
mode = sys.argv[5]
print(f"conformance ({mode}): {passed} passed on our runtime; {len(bad)} regressions against LLVM 19; {len(better)} tests pass only on ours; {len(excused)} expected to differ")
for t in excused:
    print(f"  expected to differ ({mode}): {t}")
for t in better:
    print(f"  fixed: {t}")
for t in bad:
    print(f"  REGRESSION: {t}")
# The mapping checker (isolated run): findings only where the test is wrong on purpose.
alarms = []
if mode == "isolate":
    on_purpose = {l.split("#")[0].strip() for l in open(sys.argv[7]) if l.split("#")[0].strip()}
    tests = os.path.join(sys.argv[6], "tests")
    for dirpath, _, files in os.walk(tests):
        for f in files:
            if not f.endswith(".out"):
                continue
            name = os.path.relpath(os.path.join(dirpath, f), tests).replace("/Output/", "/")[:-len(".out")]
            text = open(os.path.join(dirpath, f), errors="replace").read()
            found = [l for l in text.splitlines() if "omptarget check:" in l]
            if found and name not in on_purpose:
                alarms.append(name)
                print(f"  FALSE ALARM: {name}: {found[0][:300]}")
    print(f"mapping checker: {len(alarms)} false alarms; findings allowed in {len(on_purpose)} tests that are wrong on purpose")
    bad = bad + alarms
# The closing line: regressions count as failures; unsupported tests and LLVM's own failures
# (which fail on LLVM's runtime as well) as skipped.
print(f"conformance: {passed} passed, {len(bad)} failed, {others} skipped")
sys.exit(1 if bad else 0)
PY
