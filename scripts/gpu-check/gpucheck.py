#!/usr/bin/env python3
"""scripts/gpu-check.sh's phases (docs/gpu-check.md): build here, run there, check here, and
the dry run that does all it can without a GPU."""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bundle  # noqa: E402
import check  # noqa: E402
import programs  # noqa: E402
import runner  # noqa: E402
import suite  # noqa: E402
from common import (BUNDLE_NAME, CUDA, LLVM19_LIB, NVPTX, REPO, SM, WORK, Clock, fresh_dir, mib,  # noqa: E402
                    read_json, say, write_json)

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools")
DIST_LIB = os.path.join(REPO, "dist", "lib")
# The whole run there: the device tool allows 10 minutes a command; the tests stop starting new
# programs after RUN_BUDGET_S, the benches (about a minute) stop by RUN_DEADLINE_S, and the
# outputs are packed before RUN_TIMEOUT_S.
RUN_BUDGET_S = 330
RUN_DEADLINE_S = 480
RUN_TIMEOUT_S = 540
TRAVEL_LIMIT = 64 << 20
MAX_TRAVEL = int(float(os.environ.get("GPUCHECK_MAX_MIB", "56")) * 1048576)


def bundle_path():
    return os.path.join(WORK, BUNDLE_NAME)


def subset():
    """GPUCHECK_TESTS=a,b: only the suite tests and e2e programs whose path holds a or b."""
    v = os.environ.get("GPUCHECK_TESTS", "").strip()
    return [s for s in v.split(",") if s] if v else []


def want_llvm():
    """GPUCHECK_LLVM=0 leaves LLVM's runtime at home (default: carried when it fits)."""
    return os.environ.get("GPUCHECK_LLVM", "1") != "0"


def preflight():
    if not os.path.exists(os.path.join(DIST_LIB, "libomptarget.so.19.1")):
        sys.exit("gpu-check: dist/lib/libomptarget.so.19.1 is missing: run `make dist` first")
    if not os.path.exists(os.path.join(CUDA, "bin", "ptxas")):
        say("CUDA compiler pieces missing: running scripts/setup-cuda.sh")
        subprocess.run([os.path.join(REPO, "scripts", "setup-cuda.sh")], check=True)
    for tool in ("clang-19", "clang++-19", "flang-new-19", "xz", "tar"):
        if not shutil.which(tool):
            sys.exit("gpu-check: %s not found (scripts/setup.sh installs the toolchains)" % tool)


def cmd_build(args):
    clock = Clock()
    preflight()
    os.makedirs(WORK, exist_ok=True)
    stage = fresh_dir(os.path.join(WORK, "build"))
    logs = fresh_dir(os.path.join(WORK, "logs"))
    limit = subset()
    jobs = args.jobs or os.cpu_count() or 2
    say("build: %s for %s (%s), into %s" % ("a subset " + ",".join(limit) if limit else "everything",
                                           SM, NVPTX, os.path.relpath(WORK, REPO)))
    items, skipped, suite_root = suite.build(os.path.join(stage, "w"), logs, jobs, limit)
    say("[%s] suite: %d built, %d skipped" % (clock, len(items), len(skipped)))
    e2e, e2e_skipped = programs.build_e2e(stage, logs, limit)
    benches, bench_skipped = programs.build_benches(stage, logs)
    items += e2e + benches
    skipped += e2e_skipped + bench_skipped
    say("[%s] e2e: %d built, %d not; benches: %d" % (clock, len(e2e), len(e2e_skipped), len(benches)))
    # Only the programs travel from the suite's work tree (not its lib/ links to this machine).
    shutil.rmtree(os.path.join(stage, "w", "lib"), ignore_errors=True)
    ours = bundle.copy_ours(DIST_LIB, os.path.join(stage, "rt", "ours"))
    os.makedirs(os.path.join(stage, "rt", "common"))
    shutil.copy2(os.path.join(LLVM19_LIB, "libomp.so.5"), os.path.join(stage, "rt", "common", "libomp.so.5"))
    # LLVM's libomptarget dlopens "libomp.so": the same copy, not whatever else is installed.
    os.symlink("libomp.so.5", os.path.join(stage, "rt", "common", "libomp.so"))
    shutil.copytree(TOOLS, os.path.join(stage, "tools"))
    parts_dir = fresh_dir(os.path.join(WORK, "parts"))
    llvm_part, llvm_libs = (None, [])
    if want_llvm():
        llvm_part, llvm_libs = bundle.llvm_runtime_part(os.path.join(WORK, "cache"))
        bundle.soname_links(llvm_libs, os.path.join(stage, "rt", "llvm"))
    tree = bundle.tree_size()
    manifest = {
        "items": items, "skipped": skipped, "suite_root": suite_root, "llvm_runtime": bool(llvm_part),
        "ours": ours, "built": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "git": subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                              text=True).stdout.strip(),
        "subset": limit,
    }
    manifest["build_id"] = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:12]
    payload = os.path.join(parts_dir, "payload.tar.xz")
    while True:
        write_json(os.path.join(stage, "manifest.json"), manifest)
        say("[%s] compressing the payload" % clock)
        bundle.compress_payload(stage, payload)
        parts = [payload] + ([llvm_part] if manifest["llvm_runtime"] else [])
        size = sum(os.path.getsize(p) for p in parts)
        if size + tree <= MAX_TRAVEL or not manifest["llvm_runtime"]:
            break
        say("bundle %s + tree %s is over %s: LLVM's runtime stays home" % (mib(size), mib(tree), mib(MAX_TRAVEL)))
        manifest["llvm_runtime"] = False
        manifest["llvm_left_home"] = "the bundle with it was %s" % mib(size)
        shutil.rmtree(os.path.join(stage, "rt", "llvm"), ignore_errors=True)
    bundle.outer(bundle_path(), parts)
    write_json(os.path.join(WORK, "manifest.json"), manifest)
    with open(os.path.join(WORK, "skipped.txt"), "w") as f:
        f.write("".join("%s\t%s\n" % s for s in skipped))
    total = os.path.getsize(bundle_path()) + tree
    if total > TRAVEL_LIMIT:
        sys.exit("gpu-check: %s would travel, over the 64 MiB limit" % mib(total))
    say("[%s] bundle %s: %s (payload %s%s); with the tree %s travels, limit 64 MiB" % (
        clock, os.path.relpath(bundle_path(), REPO), mib(os.path.getsize(bundle_path())), mib(os.path.getsize(payload)),
        ", LLVM 19 runtime %s" % mib(os.path.getsize(llvm_part)) if manifest["llvm_runtime"] else ", no LLVM runtime",
        mib(total)))
    return manifest


def cmd_run(args):
    out = args.out or os.environ.get("OUT")
    if not out:
        sys.exit("gpu-check: run needs $OUT (the folder whose files come back) or --out DIR")
    if not os.path.exists(bundle_path()):
        sys.exit("gpu-check: %s not found: run `scripts/gpu-check.sh build` here and carry it" % bundle_path())
    runner.run(bundle_path(), out, dry=False, jobs=args.jobs, budget=args.budget, deadline=args.deadline)


def cmd_check(args):
    manifest_path = os.path.join(WORK, "manifest.json")
    if not os.path.exists(manifest_path):
        sys.exit("gpu-check: %s not found: check needs the build that made the bundle" % manifest_path)
    manifest = read_json(manifest_path)
    log = os.path.join(args.dir, "run.log")
    if os.path.exists(log) and manifest["build_id"] not in open(log).read():
        say("warning: %s does not name build %s: these outputs may come from another bundle" % (log, manifest["build_id"]))
    # The files the device tool brought back are read-only: the table and the unpacked outputs
    # go to .gpucheck/check/.
    work = fresh_dir(os.path.join(WORK, "check"))
    check.check(manifest_path, os.path.abspath(args.dir), manifest["suite_root"], work)
    say("table saved in %s" % os.path.join(work, "table.txt"))


def validate(manifest, root):
    """What can be checked of the bundle without a GPU; returns a list of problems."""
    problems = []
    for item in manifest["items"]:
        for key in ("script", "cpu_script"):
            s = item.get(key)
            if s and subprocess.run(["bash", "-n"], input=s.encode(), stderr=subprocess.PIPE).returncode != 0:
                problems.append("%s: %s is not valid bash" % (item["id"], key))
        if item["kind"] == "suite":
            for c in item["commands"]:
                for w in c.split():
                    if w.startswith("@W@/") and "/Output/" in w and c.split()[c.split().index(w) - 1] == "-o":
                        if not os.path.exists(os.path.join(root, "w", w[len("@W@/"):])):
                            problems.append("%s: %s did not travel" % (item["id"], w))
        elif item["kind"] in ("e2e", "bench"):
            exe = os.path.join(root, item["cwd"], item["script"].split()[-1 if item["kind"] == "e2e" else -2])
            data = open(exe, "rb").read() if os.path.exists(exe) else b""
            if not data.startswith(b"\x7fELF") or NVPTX.encode() not in data or SM.encode() not in data:
                problems.append("%s: %s is not an x86_64 program with an %s %s image" % (item["id"], exe, NVPTX, SM))
    for lib in ["rt/ours/libomptarget.so.19.1", "rt/common/libomp.so.5"] + (
            ["rt/llvm/libomptarget.so.19.1", "rt/llvm/libLLVM.so.19.1"] if manifest["llvm_runtime"] else []):
        if not os.path.exists(os.path.join(root, lib)):
            problems.append("bundle lacks %s" % lib)
    return problems


def cmd_dry_run(args):
    clock = Clock()
    manifest = cmd_build(args)
    tmp = tempfile.mkdtemp(prefix="gpucheck-dry.")
    try:
        out = os.path.join(tmp, "out")
        root = os.path.join(tmp, "root")
        say("[%s] dry run: the run phase on this machine's CPU (no GPU here)" % clock)
        runner.run(bundle_path(), out, dry=True, jobs=args.jobs, budget=args.budget, deadline=args.deadline,
                   work=root)
        problems = validate(manifest, root)
        files = sorted(os.listdir(out))
        if len(files) > 8 or any(os.path.getsize(os.path.join(out, f)) > 16 << 20 for f in files):
            problems.append("the run phase wrote more than 8 files or one over 16 MiB: %s" % files)
        saved = os.path.join(WORK, "dry-run")
        shutil.rmtree(saved, ignore_errors=True)
        shutil.copytree(out, saved)
        lines, verdicts = check.check(os.path.join(WORK, "manifest.json"), saved, manifest["suite_root"], saved)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    items = {i["id"]: i for i in manifest["items"]}
    if manifest["llvm_runtime"] and not all(v == "pass" for v, _ in verdicts.get(("bench/omp_bench", "llvm"), [("fail", "")])):
        problems.append("LLVM 19's runtime as carried did not run the bench's x86_64 companion: "
                        "see outputs/llvm/bench_omp_bench.r1/stderr in %s" % os.path.join(saved, "outputs.tar.xz"))
    for (i, rt), vs in sorted(verdicts.items()):
        if items[i]["kind"] != "suite" and rt in ("ours", "none") and any(v not in ("pass", "skip") for v, _ in vs):
            problems.append("%s on %s (CPU): %s" % (i, rt, "; ".join("%s %s" % v for v in vs)))
    print_plan(manifest)
    for p in problems:
        print("PROBLEM: " + p)
    print("dry run: %s (%s)" % ("OK" if not problems else "%d problems" % len(problems), clock))
    return 1 if problems else 0


def print_plan(manifest):
    """What the GPU run would do, and the device tool call that starts it."""
    kinds = {}
    for i in manifest["items"]:
        kinds[i["kind"]] = kinds.get(i["kind"], 0) + 1
    rts = 2 if manifest["llvm_runtime"] else 1
    size = os.path.getsize(bundle_path())
    call = {"command": "scripts/gpu-check.sh run", "carry": [os.path.relpath(bundle_path(), REPO)],
            "timeout_s": RUN_TIMEOUT_S}
    print("")
    print("On the GPU, `scripts/gpu-check.sh run` would run: %d suite tests and %d e2e programs on %d runtime%s "
          "(ours%s), the bench %d times, the raw-driver floor twice; %d not built (%s)."
          % (kinds.get("suite", 0), kinds.get("e2e", 0), rts, "s" if rts > 1 else "",
             " and LLVM 19's" if manifest["llvm_runtime"] else "", 2 * rts if kinds.get("bench") else 0,
             len(manifest["skipped"]), os.path.relpath(os.path.join(WORK, "skipped.txt"), REPO)))
    reasons = {}
    for _, why in manifest["skipped"]:
        why = why.split(":")[0] if why.startswith("build failed") else why
        reasons[why] = reasons.get(why, 0) + 1
    for why, n in sorted(reasons.items(), key=lambda r: -r[1]):
        print("  not built: %3d  %s" % (n, why))
    if not manifest["llvm_runtime"]:
        print("LLVM 19's runtime stays home (%s): no LLVM column, the suite is judged by FileCheck alone."
              % manifest.get("llvm_left_home", "GPUCHECK_LLVM=0"))
    print("Bundle: %s, %s; the tree that travels with it: %s (limit 64 MiB)." % (
        os.path.relpath(bundle_path(), REPO), mib(size), mib(size + bundle.tree_size())))
    print("Device tool call, from the checkout the session started in (copy the bundle there first):")
    print("  run " + json.dumps(call))
    print("Then, with the files it brought back in DIR: scripts/gpu-check.sh check DIR")


def main():
    ap = argparse.ArgumentParser(prog="gpu-check.sh", description=__doc__)
    sub = ap.add_subparsers(dest="phase", required=True)
    for name in ("build", "run", "dry-run"):
        p = sub.add_parser(name)
        p.add_argument("-j", "--jobs", type=int, default=None)
        p.add_argument("--budget", type=int, default=RUN_BUDGET_S,
                       help="seconds after which no new test starts (the benches still run)")
        p.add_argument("--deadline", type=int, default=RUN_DEADLINE_S,
                       help="seconds after which no bench starts and a running one is stopped")
        if name == "run":
            p.add_argument("--out", help="output folder (default: $OUT)")
    p = sub.add_parser("check")
    p.add_argument("dir", help="the folder holding the files the run brought back")
    args = ap.parse_args()
    rc = {"build": lambda a: cmd_build(a) and 0, "run": cmd_run, "check": cmd_check,
          "dry-run": cmd_dry_run}[args.phase](args)
    sys.exit(rc or 0)


if __name__ == "__main__":
    main()
