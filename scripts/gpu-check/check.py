"""The check phase, here: FileCheck what the suite's programs printed there, compare the e2e
programs' output with their expected output, and print and save the table: tests passed on ours
and on LLVM's, regressions (pass on LLVM's, not on ours), and the speed ratios of issue 22."""
import os
import re
import shutil
import subprocess
import tarfile

from common import LLVM, NONE, OURS, OUT_OUTPUTS, OUT_RESULTS, OUT_SPEED, read_json
from runner import output_key
from suite import local_filecheck_args

FILECHECK = shutil.which("FileCheck-19") or "/usr/lib/llvm-19/bin/FileCheck"


def read_tsv(path):
    with open(path) as f:
        head = f.readline().rstrip("\n").split("\t")
        return [dict(zip(head, line.rstrip("\n").split("\t"))) for line in f if line.strip()]


def filecheck_captures(d, suite_root):
    """(ok, why) for the FileCheck inputs one suite test's run kept, in the order they ran."""
    n = 1
    while os.path.exists(os.path.join(d, "fc%d.args" % n)):
        with open(os.path.join(d, "fc%d.args" % n)) as f:
            lines = f.read().splitlines()
        negate = "negate=1" in lines[0]
        args = local_filecheck_args(lines[1:], suite_root)
        with open(os.path.join(d, "fc%d.in" % n), "rb") as f:
            p = subprocess.run([FILECHECK] + args, stdin=f, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
        if (p.returncode == 0) == negate:
            first = p.stdout.decode("utf-8", "replace").strip().splitlines()[:1]
            return False, "FileCheck #%d (%s): %s" % (n, lines[0], first[0] if first else "passed, expected to fail")
        n += 1
    return True, "%d FileCheck inputs" % (n - 1)


def first_line(path):
    try:
        with open(path, errors="replace") as f:
            return f.readline().strip()
    except OSError:
        return ""


def stderr_hint(d):
    """The line of a failed run's stderr that most likely says why (one naming an error)."""
    try:
        with open(os.path.join(d, "stderr"), errors="replace") as f:
            lines = [l.strip() for l in f if l.strip()]
    except OSError:
        return ""
    named = [l for l in lines if "error" in l.lower() or "fatal" in l.lower()]
    return ((named or lines or [""])[0])[:240]


def normalized(text, rule):
    lines = text.splitlines()
    if not rule:
        return lines
    if rule[0] == "drop":
        return [l for l in lines if not re.search(rule[1], l)]
    if rule[0] == "sub":
        return [re.sub(rule[1], rule[2], l) for l in lines]
    if rule[0] == "words":
        return sorted(text.split())
    raise ValueError("unknown normalize rule %r" % (rule,))


def judge(item, row, d, suite_root):
    """(verdict, why) of one result row: pass, fail, xfail, xpass, timeout, not-run, skip."""
    if row["status"] == "skip" and row["mode"] == "gpu":
        return "fail", "skipped on the GPU machine: " + first_line(os.path.join(d, "stdout"))
    if row["status"] in ("timeout", "not-run", "skip"):
        return row["status"], ""
    stdout = open(os.path.join(d, "stdout"), errors="replace").read() if os.path.exists(os.path.join(d, "stdout")) else ""
    if item["kind"] == "suite":
        ok = row["status"] == "ok"
        why = "" if ok else "exit status %s: %s" % (row["rc"], stderr_hint(d))
        if ok:
            ok, why = filecheck_captures(d, suite_root)
        if item.get("xfail"):
            return ("xpass" if ok else "xfail"), why
        return ("pass" if ok else "fail"), why
    if row["status"] != "ok":
        return "fail", "exit status %s: %s" % (row["rc"], stderr_hint(d))
    if item["kind"] == "e2e":
        if item.get("expected") is None:
            return "pass", "exit status 0 (no reference output)"
        got, want = normalized(stdout, item.get("normalize")), normalized(item["expected"], item.get("normalize"))
        if got != want:
            diff = next((i for i in range(max(len(got), len(want)))
                         if i >= len(got) or i >= len(want) or got[i] != want[i]), 0)
            return "fail", "output differs at line %d: got %r, expected %r" % (
                diff + 1, got[diff] if diff < len(got) else None, want[diff] if diff < len(want) else None)
        return "pass", ""
    if item["kind"] == "bench":
        bad = [l for l in stdout.splitlines() if l.startswith("check ") and not l.endswith(" 1")]
        return ("fail", "wrong result: " + bad[0]) if bad else ("pass", "")
    return "pass", ""


def speed_rows(path):
    """{(runtime, metric): best value over rounds} (lowest time, highest bandwidth)."""
    best = {}
    if not os.path.exists(path):
        return best
    for r in read_tsv(path):
        k, v = (r["runtime"], r["metric"]), float(r["value"])
        higher = r["unit"].endswith("/s")
        if k not in best or (v > best[k] if higher else v < best[k]):
            best[k] = v
    return best


# (what the issue asks, numerator, denominator, bound, "<=" or ">=")
SPEED_GOALS = [
    ("empty target: ours / LLVM", (OURS, "empty_target"), (LLVM, "empty_target"), 0.8, "<="),
    ("empty target: ours / raw launch+sync", (OURS, "empty_target"), (NONE, "launch_sync"), 1.3, "<="),
    ("map(tofrom) 8 KiB: ours / LLVM (time)", (OURS, "map_tofrom_8k"), (LLVM, "map_tofrom_8k"), 0.9, "<="),
    ("map(tofrom) 64 MiB: ours / LLVM (time)", (OURS, "map_tofrom_64m"), (LLVM, "map_tofrom_64m"), 0.9, "<="),
    ("64 MiB bandwidth: ours / raw cuMemcpy", (OURS, "map_tofrom_64m_bw"), (NONE, "memcpy_tofrom_64m_bw"), 0.9, ">="),
    ("triad: ours / LLVM (GB/s)", (OURS, "triad"), (LLVM, "triad"), 0.98, ">="),
]


def metrics_table(best):
    """Every measured metric, one line each: what the ratios are made of."""
    names = sorted({m for _, m in best})
    rts = [rt for rt in (OURS, LLVM, NONE) if any((rt, m) in best for m in names)]
    lines = ["%-24s" % "metric (best round)" + "".join("%12s" % {NONE: "raw driver"}.get(rt, rt) for rt in rts)]
    for m in names:
        lines.append("%-24s" % m + "".join("%12s" % ("%.3f" % best[(rt, m)] if (rt, m) in best else "-") for rt in rts))
    return lines


def speed_table(best):
    lines = ["%-42s %10s %10s %7s  %s" % ("speed (issue 22)", "ours", "reference", "ratio", "goal")]
    for what, num, den, bound, op in SPEED_GOALS:
        a, b = best.get(num), best.get(den)
        if a is None or b is None or b == 0:
            lines.append("%-42s %10s %10s %7s  %s %.2f: not measured" % (
                what, "-" if a is None else "%.3f" % a, "-" if b is None else "%.3f" % b, "-", op, bound))
            continue
        ratio = a / b
        met = ratio <= bound if op == "<=" else ratio >= bound
        lines.append("%-42s %10.3f %10.3f %7.2f  %s %.2f: %s" % (what, a, b, ratio, op, bound, "met" if met else "MISSED"))
    return lines


def check(manifest_path, results_dir, suite_root, work_dir):
    """Judges one run's outputs (results_dir may be read-only: the device tool's files are);
    prints the table and saves it as work_dir/table.txt. Returns (table lines, verdicts)."""
    manifest = read_json(manifest_path)
    items = {i["id"]: i for i in manifest["items"]}
    report_path = os.path.join(work_dir, "table.txt")
    work = os.path.join(work_dir, "unpacked")
    shutil.rmtree(work, ignore_errors=True)
    with tarfile.open(os.path.join(results_dir, OUT_OUTPUTS)) as t:
        t.extractall(work)
    outputs = os.path.join(work, "outputs")
    rows = read_tsv(os.path.join(results_dir, OUT_RESULTS))
    mode = rows[0]["mode"] if rows else "gpu"
    verdicts = {}  # (id, runtime) -> [(verdict, why)] (benches: one per round)
    for row in rows:
        item = items.get(row["id"])
        if item is None:
            continue
        mine = verdicts.setdefault((row["id"], row["runtime"]), [])
        # The benches ran in rounds, each with its own folder (runner.output_key).
        round_no = len(mine) + 1 if item["kind"] in ("bench", "floor") else 0
        d = os.path.join(outputs, row["runtime"], output_key(row["id"], round_no))
        mine.append(judge(item, row, d, suite_root))
    lines = []
    title = ("DRY RUN on the CPU (host fallback and x86_64 companions; NOT a GPU result)" if mode == "cpu"
             else "GPU run")
    lines.append("gpu-check: %s; runtimes: ours%s" % (title, " + LLVM 19 (CUDA plugin)" if manifest["llvm_runtime"] else ""))
    lines.append("%-8s %6s %10s %10s %11s %10s" % ("category", "ran", "pass ours", "pass LLVM", "regressions", "only ours"))
    regressions, failures = [], []
    for kind in ("suite", "e2e", "bench", "floor"):
        ids = sorted({i for (i, _) in verdicts if items[i]["kind"] == kind})
        if not ids:
            continue

        def passed(i, rt):
            v = verdicts.get((i, rt))
            return bool(v) and all(x[0] in ("pass", "xfail", "skip") for x in v)
        ours = [i for i in ids if passed(i, OURS) or passed(i, NONE)]
        on_llvm = any((i, LLVM) in verdicts for i in ids)  # the dry run runs the suite on ours only
        llvm = [i for i in ids if passed(i, LLVM)]
        reg = [i for i in ids if passed(i, LLVM) and not passed(i, OURS)]
        only = [i for i in ids if passed(i, OURS) and (i, LLVM) in verdicts and not passed(i, LLVM)]
        regressions += reg
        failures += [(i, rt, v) for i in ids for rt in (OURS, NONE) for v in verdicts.get((i, rt), [])
                     if v[0] not in ("pass", "xfail", "skip")]
        lines.append("%-8s %6d %10d %10s %11s %10s" % (
            kind, len(ids), len(ours), len(llvm) if on_llvm else "-", len(reg) if on_llvm else "-",
            len(only) if on_llvm else "-"))
    lines.append("")
    best = speed_rows(os.path.join(results_dir, OUT_SPEED))
    if mode == "cpu":
        lines.append("CPU numbers (x86_64 host device, small sizes): they test the table, not the goals")
    lines += metrics_table(best) + [""] + speed_table(best) + [""]
    for i in regressions:
        lines.append("REGRESSION %s: %s" % (i, "; ".join(w for _, w in verdicts.get((i, OURS), []))))
    for i, rt, (v, why) in failures:
        lines.append("%s on %s: %s %s" % (i, rt, v, why))
    skipped = manifest.get("skipped", [])
    lines.append("not built (%d): listed with the reason in .gpucheck/skipped.txt" % len(skipped))
    with open(report_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return lines, verdicts
