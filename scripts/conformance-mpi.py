#!/usr/bin/env python3
"""Runs the LLVM offload suite's tests again with their target regions on an MPI device.

`scripts/conformance.sh --mpi` calls this after the plain run, which keeps its work
directory (`--keep-work`): the binaries it built and each test's RUN lines, expanded into
`Output/<test>.script` by ../shared/tools/llvm-suite/run_llvm_suite.py. Nothing is compiled
again. Each test that passed on the host device runs its script once more with:

- every build step (a compiler or `ar` command) replaced by `true`, the binary being there;
- every run of a built program replaced by that program as the program rank of an MPI job
  with one device rank (`mpirun -np 1 PROGRAM : -np 1 offload-mpi-device`), with
  `LIBOMPTARGET_MPI_DEVICES_FIRST=1`, so that device 0, the default device, is the device
  rank's first device;
- the RUN lines of a program built more than once (`-O0` then `-O3`) kept only for its last
  build, the one whose binary the plain run kept (the others are counted as skipped).

The program's exit is reproduced: a status, or the signal that ended it (`not --crash`).
Where the RUN line merges stderr into stdout (`2>&1`), the program rank merges them itself,
so their order is the program's and not that of the launcher's two forwarding pipes.

usage: conformance-mpi.py --plain-work DIR --plain-results JSON --work DIR --dist DIR
                          --out JSON [-j N] [--timeout S] [TEST-OR-SUBSTRING ...]
"""

import argparse
import concurrent.futures
import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time

# A build step inside a RUN command: a compiler the suite's substitutions name, or `ar`, up
# to the next `&&`, `|` or `;` (with its redirections: `> %t.custom 2>&1`).
BUILD = re.compile(r"(?<![\w/.=-])(?:/usr/bin/(?:clang|clang\+\+|flang-new)-19|ar) (?:[^|&;]|&(?!&))*")
# The RUN commands of a kept script, as run_llvm_suite.py writes them.
COMMAND = re.compile(r"^\{ (.*)\n\} \|\| exit \$\?$", re.M)
SCRIPT_PREAMBLE = """set -o pipefail
echo() { if [ "${1-}" = ignored-command ] && [ ! -t 0 ]; then cat >/dev/null 2>&1; fi; builtin echo "$@"; }
"""

# The program rank: runs the test program (stderr into stdout with --merge), writes how it
# ended to the status file, and ends the same way (a non-zero status makes mpirun end the
# device rank too).
RANK_SHIM = r"""#!/bin/bash
status_file=$1; shift
if [ "$1" = --merge ]; then shift; exec 2>&1; fi
"$@"
s=$?
echo "$s" > "$status_file"
exit "$s"
"""

# A test's command for "run this program": the job, then the program's own exit. Open MPI
# binds each rank of a job of two to one core: the device rank's kernels would then run on
# one core (libomp forms teams of one thread), unlike the plain run's.
MPI_RUN = r"""#!/bin/bash
here=$(cd "$(dirname "$0")" && pwd)
status_file=$(mktemp "${TMPDIR:-/tmp}/conformance-mpi.XXXXXX")
trap 'rm -f "$status_file"' EXIT
mpirun --allow-run-as-root --oversubscribe --bind-to none -q \
  -np 1 "$here/rank-shim" "$status_file" "$@" : -np 1 "$OMP_CONFORMANCE_MPI_DEVICE" </dev/null
rc=$?
s=$(cat "$status_file" 2>/dev/null)
[ -n "$s" ] || { echo "conformance-mpi: the program rank did not report its end (mpirun status $rc)" >&2; exit 125; }
rm -f "$status_file"
trap - EXIT
if [ "$s" -gt 128 ]; then
  kill -s $((s - 128)) $$
fi
exit "$s"
"""


def build_output(step):
    """The file a build step writes: the last `-o` of a compiler, an archive for `ar`."""
    outs = re.findall(r" -o (\S+)", step)
    if outs:
        return outs[-1]
    words = step.split()
    return words[2] if words[0] == "ar" and len(words) > 2 else None


def rewrite(commands):
    """The RUN commands of one test for the MPI run, and how many were skipped."""
    builds = []  # (command index, output)
    for i, c in enumerate(commands):
        for m in BUILD.finditer(c):
            out = build_output(m.group(0))
            if out:
                builds.append((i, out, " -c " in m.group(0) or " -shared" in m.group(0)
                               or m.group(0).startswith("ar ")))
    last = {}
    for i, out, _ in builds:
        last[out] = i
    programs = {out for _, out, not_program in builds if not not_program}
    kept, skipped = [], 0
    stale = set()  # outputs whose binary now on disk is not the one this point of the script built
    for i, c in enumerate(commands):
        mine = [(o, n) for j, o, n in builds if j == i]
        for out, _ in mine:
            if last[out] == i:
                stale.discard(out)
            else:
                stale.add(out)
        if any(out in stale for out, _ in mine) or any(
                re.search(r"(?<![\w/.=-])%s(?![\w.-])" % re.escape(p), c) for p in stale):
            skipped += 1
            continue
        c = BUILD.sub("true ", c)
        for p in programs:
            c = re.sub(r"(?<![\w/.=-])%s(?![\w.-])((?:[^|&;]*?)2>&1)?" % re.escape(p),
                       lambda m: '"$OMP_CONFORMANCE_MPI_RUN" %s%s%s' % (
                           "--merge " if m.group(1) else "", m.group(0)[:len(p)], m.group(1) or ""),
                       c)
        kept.append(c)
    return kept, skipped


# The probe: the default device must be an MPI device, whose kernels run in another
# process (its rank's worker).
PROBE = r"""#include <omp.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
  int pid = 0;
#pragma omp target map(from : pid)
  pid = getpid();
  printf("probe: devices=%d default=%d kernel-in-this-process=%d\n", omp_get_num_devices(),
         omp_get_default_device(), pid == getpid());
  return 0;
}
"""
PROBE_WANTED = re.compile(r"probe: devices=\d+ default=0 kernel-in-this-process=0")


def probe(args, env, meta):
    """Builds the probe as the plain run built its tests and runs it on the MPI device.
    Returns its output line, or exits saying why the run cannot be trusted."""
    d = os.path.join(args.work, "probe")
    os.makedirs(d, exist_ok=True)
    src, exe = os.path.join(d, "probe.c"), os.path.join(d, "probe")
    with open(src, "w") as f:
        f.write(PROBE)
    build = "%s %s %s -fopenmp-targets=x86_64-pc-linux-gnu %s -o %s %s" % (
        meta["clang"], meta["openmp_flags"], meta["flags"], src, exe,
        os.path.join(args.plain_work, "lib", "libomptarget.devicertl.a"))
    run = subprocess.run("%s && \"$OMP_CONFORMANCE_MPI_RUN\" %s" % (build, exe), shell=True, env=env,
                         cwd=d, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=args.timeout)
    out = (run.stdout + run.stderr).strip()
    if run.returncode != 0 or not PROBE_WANTED.search(out):
        sys.exit("conformance-mpi: the probe's default device is not an MPI device (status %d):\n%s"
                 % (run.returncode, out))
    return PROBE_WANTED.search(out).group(0)


def preexec():
    os.setsid()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_test(rel, args, env):
    d, f = os.path.split(rel)
    src_script = os.path.join(args.plain_work, "tests", d, "Output", f + ".script")
    res = {"status": "fail", "time": 0.0}
    try:
        commands = COMMAND.findall(open(src_script).read())
    except OSError as e:
        res["reason"] = "no script of the plain run: %s" % e
        return res
    kept, skipped = rewrite(commands)
    res["runs_skipped"] = skipped
    exec_dir = os.path.join(args.work, "tests", d)
    out_dir = os.path.join(exec_dir, "Output")
    os.makedirs(out_dir, exist_ok=True)
    script = os.path.join(out_dir, f + ".script")
    with open(script, "w") as s:
        s.write(SCRIPT_PREAMBLE)
        for c in kept:
            s.write("{ %s\n} || exit $?\n" % c)
        s.write("exit 0\n")
    out_path = os.path.join(out_dir, f + ".out")
    t0 = time.time()
    with open(out_path, "wb") as out:
        p = subprocess.Popen(["bash", script], cwd=exec_dir, env=env, stdin=subprocess.DEVNULL,
                             stdout=out, stderr=subprocess.STDOUT, preexec_fn=preexec)
        try:
            rc = p.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            rc = None
        try:
            os.killpg(p.pid, signal.SIGKILL)  # leftovers: a device rank, mpirun (everything on timeout)
        except OSError:
            pass
        p.wait()
    res["time"] = round(time.time() - t0, 2)
    if rc is None:
        res.update(status="timeout", reason="timed out after %ss" % args.timeout)
    elif rc == 0:
        res["status"] = "pass"
    else:
        res["exit_code"] = rc
    if res["status"] != "pass":
        res["output_tail"] = open(out_path, errors="replace").read()[-3000:]
        res["commands"] = kept
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tests", nargs="*", help="tests (paths relative to the suite, or substrings)")
    ap.add_argument("--plain-work", required=True, help="the plain run's kept work directory")
    ap.add_argument("--plain-results", required=True, help="the plain run's results JSON")
    ap.add_argument("--work", required=True, help="this run's work directory")
    ap.add_argument("--dist", required=True, help="dist/ (the runtime and offload-mpi-device)")
    ap.add_argument("--out", required=True, help="results JSON")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    args.plain_work, args.work, args.dist = (os.path.abspath(p) for p in (args.plain_work, args.work, args.dist))

    plain_results = json.load(open(args.plain_results))
    plain = plain_results["tests"]
    tests = sorted(t for t, r in plain.items() if r["status"] == "pass"
                   and (not args.tests or any(s in t for s in args.tests)))
    os.makedirs(os.path.join(args.work, "bin"), exist_ok=True)
    for name, text in (("rank-shim", RANK_SHIM), ("mpi-run", MPI_RUN)):
        path = os.path.join(args.work, "bin", name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)
    # The plain run's environment (run_llvm_suite.py's make_config): its `not` wrapper first
    # on PATH, our runtime first on LD_LIBRARY_PATH.
    env = {"PATH": os.path.join(args.plain_work, "bin") + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
           "LLVM_DISABLE_CRASH_REPORT": "1",
           "LD_LIBRARY_PATH": os.pathsep.join([os.path.join(args.dist, "lib"), "/usr/lib/llvm-19/lib"]),
           "LIBOMPTARGET_MPI_DEVICES_FIRST": "1",
           "OMP_CONFORMANCE_MPI_RUN": os.path.join(args.work, "bin", "mpi-run"),
           "OMP_CONFORMANCE_MPI_DEVICE": os.path.join(args.dist, "bin", "offload-mpi-device")}
    for v in ("HOME", "TMPDIR", "TERM", "LD_PRELOAD"):
        if v in os.environ:
            env[v] = os.environ[v]

    start = time.time()
    print("conformance-mpi: %s" % probe(args, env, plain_results["meta"]))
    print("conformance-mpi: %d tests that passed on the host device, each on an MPI device rank (-j%d)"
          % (len(tests), args.jobs))
    sys.stdout.flush()
    results, lock, done = {}, threading.Lock(), [0]

    def task(rel):
        r = run_test(rel, args, env)
        with lock:
            results[rel] = r
            done[0] += 1
            if r["status"] != "pass":
                print("[%3d/%d] %-8s %s (%.1fs)" % (done[0], len(tests), r["status"].upper(), rel, r["time"]))
                sys.stdout.flush()

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        list(ex.map(task, tests))
    # Tests not run here keep the plain run's status (a failure there is judged there too).
    everything = {t: {"status": r["status"], "reason": "not run on MPI: %s on the host device" % r["status"]}
                  for t, r in plain.items() if t not in results}
    everything.update(results)
    with open(args.out, "w") as f:
        json.dump({"tests": dict(sorted(everything.items()))}, f, indent=1)
        f.write("\n")
    passed = sum(1 for r in results.values() if r["status"] == "pass")
    skipped = sum(r.get("runs_skipped", 0) for r in results.values())
    print("conformance-mpi: %d of %d passed on an MPI device; %d RUN lines of earlier builds skipped; "
          "wall time %.1f s" % (passed, len(results), skipped, time.time() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
