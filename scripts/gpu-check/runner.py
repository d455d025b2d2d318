"""The run phase: on the GPU machine (one command, $OUT set), or here in the dry run.

Unpacks the bundle, runs every item on each runtime it carries (ours; LLVM 19's when carried),
each in its own process group with a time limit, tests in parallel and the benches alone at the
end, and writes at most five files into the output folder (common.OUT_*). Python 3 standard
library only: the GPU machine has nothing else we can count on."""
import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor

from common import (LLVM, NONE, OURS, OUT_ENV, OUT_LOG, OUT_OUTPUTS, OUT_RESULTS,
                    OUT_SPEED)

# Where the suite's sources would be: the capture tool writes FileCheck arguments relative to it.
SUITE_THERE = "/gpucheck-suite"
OUTPUT_CAP = 1 << 20          # bytes kept of one stdout/stderr (the tail)
OUTPUTS_TAR_CAP = 15 << 20    # one file back is at most 16 MiB


def unpack(bundle, dest):
    """The bundle (a tar of compressed parts) into `dest`; returns the manifest."""
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    with tarfile.open(bundle) as outer:
        names = outer.getnames()
        outer.extractall(dest, filter="data") if hasattr(tarfile, "data_filter") else outer.extractall(dest)
    for part in names:
        p = os.path.join(dest, part)
        with tarfile.open(p) as inner:
            if hasattr(tarfile, "data_filter"):
                inner.extractall(dest, filter="tar")
            else:
                inner.extractall(dest)
        os.unlink(p)
    with open(os.path.join(dest, "manifest.json")) as f:
        return json.load(f)


def runtime_env(root, runtime, capture_dir):
    """The environment of one run: lit's clean one, the runtime chosen by LD_LIBRARY_PATH."""
    rt = os.path.join(root, "rt")
    libs = {OURS: [rt + "/ours", rt + "/common"], LLVM: [rt + "/llvm", rt + "/common"], NONE: []}[runtime]
    env = {"PATH": os.path.join(root, "tools") + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
           "HOME": os.environ.get("HOME", "/tmp"), "LLVM_DISABLE_CRASH_REPORT": "1",
           "GC_SUITE": SUITE_THERE, "GC_W": os.path.join(root, "w"), "GC_CAPTURE_DIR": capture_dir,
           "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
    for v in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LANG"):
        if v in os.environ:
            env[v] = os.environ[v]
    if libs:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
    return env


def keep_tail(path):
    size = os.path.getsize(path)
    if size > OUTPUT_CAP:
        with open(path, "rb") as f:
            f.seek(size - OUTPUT_CAP)
            data = f.read()
        with open(path, "wb") as f:
            f.write(b"[gpu-check: first %d bytes cut]\n" % (size - OUTPUT_CAP) + data)


def output_key(item_id, round_no=0):
    """The folder of one item's outputs under outputs/<runtime>/ (benches: one per round)."""
    key = re.sub(r"[^A-Za-z0-9_.-]", "_", item_id)
    return key + (".r%d" % round_no if round_no else "")


def run_one(root, outputs, item, runtime, script, timeout, round_no=0):
    """Runs one item on one runtime; returns its result row (a dict)."""
    d = os.path.join(outputs, runtime, output_key(item["id"], round_no))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "script.sh"), "w") as f:
        f.write(script + "\n")
    env = runtime_env(root, runtime, d)
    t0 = time.time()
    timed_out = False
    with open(os.path.join(d, "stdout"), "wb") as out, open(os.path.join(d, "stderr"), "wb") as err:
        p = subprocess.Popen(["bash", os.path.join(d, "script.sh")], cwd=os.path.join(root, item["cwd"]),
                             env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            rc = None
        try:
            os.killpg(p.pid, signal.SIGKILL)  # leftovers of the item (everything, on a timeout)
        except OSError:
            pass
        if rc is None:
            rc = p.wait()
    for f in ("stdout", "stderr"):
        keep_tail(os.path.join(d, f))
    if timed_out:
        status = "timeout"
    elif rc == 0:
        status = "ok"
    elif rc == 77 and item["kind"] == "floor":
        status = "skip"
    else:
        status = "fail"
    return {"id": item["id"], "kind": item["kind"], "runtime": runtime, "status": status,
            "rc": rc if not timed_out else "", "seconds": round(time.time() - t0, 2)}


def plan(manifest, dry):
    """(tests, benches): lists of (item, runtime, script, timeout) in the order they run."""
    runtimes = [OURS] + ([LLVM] if manifest["llvm_runtime"] else [])
    tests, benches = [], []
    for item in manifest["items"]:
        if dry:
            script = item["script"] if item["kind"] == "suite" else item.get("cpu_script")
            if not script:
                continue
            timeout = 30
        else:
            script, timeout = item["script"], item["timeout"]
        if item["kind"] == "floor":
            benches += [(item, NONE, script, timeout)] * 2
        elif item["kind"] == "bench":
            for _ in range(2):  # alternating runtimes, twice each: the check takes the best
                benches += [(item, rt, script, timeout) for rt in runtimes]
        elif dry and item["kind"] == "suite":
            tests.append((item, OURS, script, timeout))  # host fallback: exercises the plumbing
        else:
            tests += [(item, rt, script, timeout) for rt in runtimes]
    return tests, benches


def machine_report(root, manifest, path):
    """What the check should know about the machine: GPU, driver, which libraries resolved."""
    lines = []

    def cmd(argv, env=None):
        try:
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30, env=env)
            lines.append("$ " + " ".join(argv) + "\n" + p.stdout.decode("utf-8", "replace"))
        except (OSError, subprocess.TimeoutExpired) as e:
            lines.append("$ %s\n[%s]\n" % (" ".join(argv), e))

    cmd(["uname", "-a"])
    cmd(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem", "--format=csv"])
    probe = next((os.path.join(root, i["cwd"], "omp_bench") for i in manifest["items"] if i["kind"] == "bench"), None)
    for rt in [OURS] + ([LLVM] if manifest["llvm_runtime"] else []):
        if probe and os.path.exists(probe):
            cmd(["ldd", probe], env=runtime_env(root, rt, "/nonexistent"))
    with open(path, "w") as f:
        f.write("\n".join(lines))


def pack_outputs(outputs, path, log):
    """outputs/ as one tar.xz under the size a returned file may have (largest files dropped)."""
    files = []
    for dirpath, _, names in os.walk(outputs):
        files += [os.path.join(dirpath, n) for n in names]
    files.sort(key=os.path.getsize)
    while True:
        with tarfile.open(path, "w:xz") as t:
            for f in files:
                t.add(f, arcname=os.path.relpath(f, os.path.dirname(outputs)))
        if os.path.getsize(path) <= OUTPUTS_TAR_CAP or not files:
            return
        dropped = files.pop()
        log("outputs too large: dropping %s" % dropped)


def run(bundle, out_dir, dry=False, jobs=None, budget=330, deadline=480, work=None):
    """The whole run phase. `budget`: seconds after which no new test starts; `deadline`:
    seconds after which no bench starts, and by which a running one is stopped (the command's
    own limit is a minute later: the outputs still have to be packed). Returns the number of
    result rows."""
    t_start = time.time()
    os.makedirs(out_dir, exist_ok=True)
    logf = open(os.path.join(out_dir, OUT_LOG), "a")

    def log(msg):
        line = "[%5.0fs] %s" % (time.time() - t_start, msg)
        print("gpu-check: " + line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    root = work or os.path.join(os.environ.get("TMPDIR", "/tmp"), "gpucheck-run")
    log("unpacking %s (%d bytes) into %s" % (bundle, os.path.getsize(bundle), root))
    manifest = unpack(bundle, root)
    log("bundle build %s, made %s from commit %s" % (manifest["build_id"], manifest["built"], manifest["git"]))
    outputs = os.path.join(root, "outputs")
    os.makedirs(outputs, exist_ok=True)
    tests, benches = plan(manifest, dry)
    jobs = jobs or max(1, min(8, (os.cpu_count() or 2)))
    log("%d test runs (-j%d), %d bench runs; runtimes: ours%s; %s"
        % (len(tests), jobs, len(benches), " + LLVM 19" if manifest["llvm_runtime"] else "",
           "DRY RUN on the CPU" if dry else "on the GPU"))
    rows, done = [], 0

    def one(job):
        item, rt, script, timeout = job
        if time.time() - t_start > budget:
            return {"id": item["id"], "kind": item["kind"], "runtime": rt, "status": "not-run",
                    "rc": "", "seconds": 0}
        return run_one(root, outputs, item, rt, script, timeout)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for row in pool.map(one, tests):
            rows.append(row)
            done += 1
            quiet = dry and row["kind"] == "suite"  # host fallback: failures are expected
            if (row["status"] not in ("ok", "not-run") and not quiet) or done % 25 == 0 or done == len(tests):
                log("%d/%d %s [%s] %s" % (done, len(tests), row["id"], row["runtime"], row["status"]))
    rounds = {}
    for item, rt, script, timeout in benches:
        n = rounds[(item["id"], rt)] = rounds.get((item["id"], rt), 0) + 1
        left = deadline - (time.time() - t_start)
        if left < 10:
            rows.append({"id": item["id"], "kind": item["kind"], "runtime": rt, "status": "not-run",
                         "rc": "", "seconds": 0})
            log("bench %s [%s] round %d: not run, past the deadline" % (item["id"], rt, n))
            continue
        row = run_one(root, outputs, item, rt, script, min(timeout, left), round_no=n)
        rows.append(row)
        log("bench %s [%s] round %d: %s in %.1fs" % (item["id"], rt, n, row["status"], row["seconds"]))
    with open(os.path.join(out_dir, OUT_RESULTS), "w") as f:
        f.write("id\tkind\truntime\tstatus\trc\tseconds\tmode\n")
        for r in rows:
            f.write("%s\t%s\t%s\t%s\t%s\t%s\t%s\n" % (r["id"], r["kind"], r["runtime"], r["status"],
                                                      r["rc"], r["seconds"], "cpu" if dry else "gpu"))
    with open(os.path.join(out_dir, OUT_SPEED), "w") as f:
        f.write("runtime\tround\tmetric\tvalue\tunit\n")
        for (item_id, rt), count in sorted(rounds.items()):
            for n in range(1, count + 1):
                path = os.path.join(outputs, rt, output_key(item_id, n), "stdout")
                if not os.path.exists(path):
                    continue
                with open(path, errors="replace") as out:
                    for line in out:
                        w = line.split()
                        if len(w) == 4 and w[0] == "metric":
                            f.write("%s\t%d\t%s\t%s\t%s\n" % (rt, n, w[1], w[2], w[3]))
    machine_report(root, manifest, os.path.join(out_dir, OUT_ENV))
    pack_outputs(outputs, os.path.join(out_dir, OUT_OUTPUTS), log)
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    log("done in %.0fs: %s" % (time.time() - t_start, ", ".join("%d %s" % (v, k) for k, v in sorted(counts.items()))))
    logf.close()
    return len(rows)
