"""LLVM 19.1.7's offload suite for nvptx64: its RUN lines expanded as lit.cfg expands them when
the current target is nvptx64-nvidia-cuda, the compile commands run here, the rest run there.

The RUN lines are expanded once, with placeholders (@CC@, @FILECHECK@, @SUITE@, @W@ ...) for
what differs between the two machines, by the shared runner's own lit emulation
(run_llvm_suite.py: parsing, boolean features, substitutions in lit.cfg's order). Then:
- here, every command that starts with a compiler is run with the real compilers, and the
  binaries land in the work tree at the paths %t names;
- there, the same RUN lines run whole, with the compilers replaced by `gc-prebuilt` (the binary
  is already in place) and FileCheck by `gc-capture`, which keeps what FileCheck would read;
- here again, `check` runs the real FileCheck on what was kept (gpucheck check)."""
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from common import CUDA, DEV19, LLVM19, LLVM19_LIB, NVPTX, NVPTX_DEVICERTL, REPO, SM, say

SUITE_DIR = os.environ.get("LLVM_SUITE_DIR") or os.path.join(REPO, "..", "shared", "tools", "llvm-suite")
COMPILERS = ("@CC@", "@CXX@", "@FC@")
# Other commands of the build, run here with the compilers (offloading/static_linking.c: `ar`).
BUILD_TOOLS = ("ar",)
# Splits one expanded RUN command into the commands of its pipelines and lists.
_SEGMENTS = re.compile(r"\s(?:&&|\|\||\||;)\s")


def runner():
    """The shared runner, imported as a module (its parser and substitution code)."""
    if not os.path.isfile(os.path.join(SUITE_DIR, "run_llvm_suite.py")):
        sys.exit("gpu-check: %s/run_llvm_suite.py not found (set LLVM_SUITE_DIR)" % SUITE_DIR)
    sys.path.insert(0, os.path.abspath(SUITE_DIR))
    import run_llvm_suite
    return run_llvm_suite


def fetch_suite():
    """The suite root, fetched by the shared fetch-suite.sh (cached; a second call is instant)."""
    out = subprocess.run([os.path.join(SUITE_DIR, "fetch-suite.sh")], stdout=subprocess.PIPE,
                         text=True)
    root = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if out.returncode != 0 or not os.path.isfile(os.path.join(root, "lit.cfg")):
        sys.exit("gpu-check: %s/fetch-suite.sh did not give a suite root" % SUITE_DIR)
    return root


def nvptx_substitutions(r):
    """lit.cfg's substitutions and features with nvptx64-nvidia-cuda as the current target."""
    cfg = {
        "cc": "@CC@", "cxx": "@CXX@", "fc": "@FC@", "filecheck": "@FILECHECK@", "not": "@NOT@",
        "current_target": NVPTX, "openmp_flags": "-fopenmp -pthread",
        "llvm_library_intdir": "@W@/lib",
        # The Unices branch of lit.cfg for nvptx64: no -nogpulib; rpaths (unused there: the run
        # phase sets LD_LIBRARY_PATH).
        "flags": " -I @SUITE@ -I @INC@ -L @W@/lib -L @LLVMLIB@ -L @LLVMLIB@"
                 " -Wl,-rpath,@W@/lib -Wl,-rpath,@LLVMLIB@ -Wl,-rpath,@LLVMLIB@",
        # lit.cfg names the build tree's DeviceRTL; here, libomp-19-dev's bitcode for sm_90. The
        # architecture: a lit run finds the GPU with nvptx-arch; here there is none to ask.
        "flags_clang": " --libomptarget-nvptx-bc-path=@DEVICERTL_BC@ --offload-arch=" + SM,
        "flags_flang": " --offload-arch=" + SM,
    }
    subs = r.build_config_substitutions(cfg)
    # lit.cfg: "%cuda_flags" is --cuda-path=<CUDA> when the current target is nvptx.
    subs = [(a, "--cuda-path=@CUDA@" if a == "%cuda_flags" else b) for a, b in subs]
    features = ["clang", "clang-19", "clang-19.1", "clang-19.1.7", "ompt", NVPTX,
                "unified_shared_memory",  # sm_90 >= 70
                "gpu", "nvidiagpu", "flang"]
    return subs, features


def expand(r, suite_root, rel, subs, features):
    """One test: ("run", [(line, command)...]) or ("skip", reason)."""
    src = os.path.join(suite_root, rel)
    try:
        parsed = r.parse_test(src)
        missing = [q for q in parsed["requires"] if not r.BooleanExpression.evaluate(q, features)]
        unsup = [u for u in parsed["unsupported"] if r.BooleanExpression.evaluate(u, features)]
        xfail = any(x == "*" or r.BooleanExpression.evaluate(x, features) for x in parsed["xfails"])
    except (r.ParseError, ValueError, UnicodeDecodeError, OSError) as e:
        return "skip", "unresolved: %s" % e, False
    if missing:
        return "skip", "requires " + ", ".join(missing), False
    if unsup:
        return "skip", "unsupported on " + ", ".join(unsup), False
    tmp_dir = "@W@/tests/%s/Output" % os.path.dirname(rel)
    tmp_base = tmp_dir + "/" + os.path.basename(rel)
    local = subs + r.default_substitutions("@SUITE@/" + rel, tmp_dir, tmp_base)
    cond = {f: True for f in features}
    commands = [(line, r.apply_substitutions(c, local, cond)) for line, c in parsed["run"]]
    if not any("@CC@" in c or "@CXX@" in c or "@FC@" in c for _, c in commands):
        return "skip", "no nvptx64 RUN line (every command is another target's)", False
    return "run", commands, xfail


def compile_segments(command):
    """The compiler invocations inside one expanded RUN command, in order."""
    out = []
    for seg in _SEGMENTS.split(command):
        s = seg.strip().lstrip("{( ").strip()
        words = s.split()
        while words and (words[0] == "env" or "=" in words[0]):
            words = words[1:]  # `env VAR=VALUE ... clang`: the compiler still runs here
        if words and (words[0] in COMPILERS or words[0] in BUILD_TOOLS):
            out.append(s)
    return out


def here(text, suite_root, work, inc):
    """Placeholders replaced by this machine's paths (the build)."""
    for a, b in (("@CC@", "/usr/bin/clang-19"), ("@CXX@", "/usr/bin/clang++-19"),
                 ("@FC@", "/usr/bin/flang-new-19"), ("@SUITE@", suite_root), ("@W@", work),
                 ("@INC@", inc), ("@LLVMLIB@", LLVM19_LIB), ("@DEVICERTL_BC@", NVPTX_DEVICERTL),
                 ("@CUDA@", CUDA), ("@FILECHECK@", "FileCheck-19"), ("@NOT@", LLVM19 + "/bin/not")):
        text = text.replace(a, b)
    return text


def there(command):
    """Placeholders replaced for the run there: compilers are done, FileCheck is captured."""
    command = re.sub(r"(^|\s)not\s+@FILECHECK@", r"\1gc-capture --negate", command)
    for tool in BUILD_TOOLS:  # done here already: gc-prebuilt only checks its -o, if any
        command = re.sub(r"(^|&&\s|;\s|\|\|\s|\{\s)%s\s" % tool, r"\1gc-prebuilt %s " % tool, command)
    for a, b in (("@FILECHECK@", "gc-capture"), ("@CC@", "gc-prebuilt"), ("@CXX@", "gc-prebuilt"),
                 ("@FC@", "gc-prebuilt"), ("@NOT@", "gc-llvm-not"), ("@SUITE@", '"$GC_SUITE"'),
                 ("@W@", '"$GC_W"'), ("@INC@", "/nonexistent"), ("@LLVMLIB@", "/nonexistent"),
                 ("@DEVICERTL_BC@", "/nonexistent"), ("@CUDA@", "/nonexistent")):
        command = command.replace(a, b)
    return command


def build_one(r, suite_root, work, inc, rel, commands, log_dir):
    """Compiles one test here; returns (ok, log path)."""
    os.makedirs(os.path.join(work, "tests", os.path.dirname(rel), "Output"), exist_ok=True)
    log = os.path.join(log_dir, rel.replace("/", "__") + ".build.log")
    env = dict(os.environ, PATH=os.path.join(CUDA, "bin") + os.pathsep + os.environ.get("PATH", ""))
    with open(log, "w") as f:
        for line, c in commands:
            for seg in compile_segments(c):
                cmd = here(seg, suite_root, work, inc)
                f.write("$ %s\n" % cmd)
                f.flush()
                rc = subprocess.run(["bash", "-c", cmd], cwd=os.path.join(work, "tests", os.path.dirname(rel)),
                                    stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, timeout=600).returncode
                if rc != 0:
                    f.write("[RUN line %d: compile failed with status %d]\n" % (line, rc))
                    return False, log
    return True, log


def script_there(r, commands):
    """The bash script the run phase executes for one test (lit's preamble, one block a command)."""
    lines = [r.SCRIPT_PREAMBLE]
    for i, (line, c) in enumerate(commands):
        lines.append("export GC_RUN=%d  # RUN line %d" % (i, line))
        lines.append("{ %s\n} || exit $?" % there(c))
    lines.append("exit 0\n")
    return "\n".join(lines)


def build(work, log_dir, jobs, limit):
    """Expands and compiles the nvptx64 half of the suite into `work`. Returns (items, skipped):
    manifest items for the run phase, and (test, reason) for each test not built."""
    r = runner()
    suite_root = fetch_suite()
    inc = os.path.join(DEV19, "lib", "clang", "19", "include")
    os.makedirs(os.path.join(work, "lib"), exist_ok=True)
    for name, target in (("libomptarget.so", LLVM19_LIB + "/libomptarget.so.19.1"),
                         ("libomp.so", LLVM19_LIB + "/libomp.so.5"),
                         ("libomptarget.devicertl.a", DEV19 + "/lib/libomptarget.devicertl.a")):
        dst = os.path.join(work, "lib", name)
        if os.path.lexists(dst):
            os.unlink(dst)
        os.symlink(target, dst)
    subs, features = nvptx_substitutions(r)
    tests = r.discover(suite_root, [])
    if limit:
        tests = [t for t in tests if any(s in t for s in limit)]
    skipped, todo = [], []
    for rel in tests:
        kind, what, xfail = expand(r, suite_root, rel, subs, features)
        if kind == "skip":
            skipped.append((rel, what))
        else:
            todo.append((rel, what, xfail))
    say("suite: %d tests, %d with an nvptx64 RUN line to build (-j%d), %d skipped"
        % (len(tests), len(todo), jobs, len(skipped)))

    def one(t):
        rel, commands, xfail = t
        ok, log = build_one(r, suite_root, work, inc, rel, commands, log_dir)
        return rel, commands, xfail, ok, log

    items, done = [], 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for rel, commands, xfail, ok, log in pool.map(one, todo):
            done += 1
            if done % 10 == 0 or done == len(todo):
                say("suite: built %d/%d" % (done, len(todo)))
            if not ok:
                skipped.append((rel, "build failed here: see %s" % os.path.relpath(log, REPO)))
                continue
            items.append({
                "id": "suite/" + rel, "kind": "suite", "cwd": "w/tests/" + os.path.dirname(rel),
                "script": script_there(r, commands), "timeout": 60, "xfail": xfail,
                "commands": ["line %d: %s" % (l, c) for l, c in commands],
            })
    return items, sorted(skipped), suite_root


def local_filecheck_args(args, suite_root):
    """A captured FileCheck argument list (placeholders as the capture wrote them) made local."""
    return [a.replace("@SUITE@", suite_root) for a in args]
