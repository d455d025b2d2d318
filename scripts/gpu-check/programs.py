"""The e2e programs that make sense on a GPU, the speed-table benches and the raw-driver floor:
each built here as an nvptx64-only binary (so the GPU is the default device and a program that
cannot offload fails under OMP_TARGET_OFFLOAD=MANDATORY instead of falling back quietly), plus an
x86_64-only companion from the same source that the dry run executes on this machine.

The expected output of a program on the GPU is its x86_64 companion's output here: on LLVM 19's
runtime for C and C++ (an independent reference), on ours for Fortran (LLVM 19's runtime has no
CPU device runtime for flang 19's device code; docs/devicertl.md). Where a GPU legitimately
prints something else (the device count, thread numbers, the order of device printf against
buffered host output), `normalize` says what is compared instead."""
import os
import shutil
import subprocess

from common import CUDA, DEPS, LLVM19_LIB, NVPTX, NVPTX_DEVICERTL, REPO, SM, run_logged, say, tail_of

PROGRAMS = os.path.join(REPO, "tests", "programs")
OWN_PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")
BENCHES = os.path.join(REPO, "benches", "gpu")
OMPCC = os.path.join(REPO, "dist", "bin", "ompcc")
OURS_LIB = os.path.join(REPO, "dist", "lib")

# (source under tests/programs, or gpu-check/NAME for scripts/gpu-check/programs/NAME, what it
# covers, normalize). normalize: None (stdout compared line
# for line), ("drop", regex) (lines matching it are not compared), ("sub", regex, repl) (applied
# to every line first), or ("words",) (the same words in any order: device printf is written by
# the driver, not through the program's stdout buffer).
E2E = [
    ("runtime/data_regions.c", "mapping: target data, enter/exit, update, refcounts, always", None),
    ("runtime/structs.c", "structs with pointer members, nested members", None),
    ("runtime/declare_target.c", "globals: declare target to/link, update", None),
    ("runtime/nowait_depend.c", "nowait + depend chain", None),
    ("runtime/device_api.c", "device memory API: alloc, memcpy, memcpy_rect, associate",
     ("drop", r"^devices=")),
    ("runtime/mapper.c", "declare mapper", None),  # reference: ours (REFERENCE_OURS)
    ("runtime/cpp_features.cpp", "C++: templates, methods, lambdas, references", None),
    ("gpu-check/device_printf.c", "device printf", ("words",)),
    ("gpu-check/device_memset.c", "omp_target_memset on the device, device-to-device memcpy", None),
    ("driver/saxpy.c", "saxpy, on_device", None),
    ("driver/gpu_kernels.c", "declare target globals and functions (C)", None),
    ("driver/gpu_kernels.cpp", "declare target globals and functions (C++)", None),
    ("driver/vector_sum.cpp", "C++ reduction", None),
    ("driver/gpu_kernels.f90", "Fortran: target parallel do over a module array", None),
    ("fortran/target_parallel_do.f90", "Fortran: target parallel do (omp_lib)",
     ("sub", r"threads=\d+", "threads=N")),
    ("fortran/tdpd_reduction.f90", "Fortran: teams distribute parallel do reduction", None),
    ("fortran/teams_distribute.f90", "Fortran: teams distribute reduction", None),
    ("fortran/target_data.f90", "Fortran: target data / update", None),
    ("fortran/declare_to_array.f90", "Fortran: declare target array", None),
    ("fortran/int8_loop.f90", "Fortran: integer(8) loop", None),
]


# Programs whose expected output comes from our runtime although they are C: LLVM 19's runtime
# copies an already-mapped struct again when a mapper maps it (buf[3]=9 instead of -9;
# crates/e2e/tests/runtime_programs.rs, declare_mapper).
REFERENCE_OURS = {"runtime/mapper.c"}


def is_fortran(src):
    return src.endswith(".f90")


def c_driver(src):
    return "clang++-19" if src.endswith(".cpp") else "clang-19"


def cuda_env():
    # flang 19 has no --cuda-path: it finds ptxas and nvlink on PATH.
    return dict(os.environ, PATH=os.path.join(CUDA, "bin") + os.pathsep + os.environ.get("PATH", ""))


def gpu_command(compiler, src, out):
    """The nvptx64-only build of `src` by `compiler` ("clang": clang-19/flang-new-19; "ompcc")."""
    if compiler == "ompcc":
        return [OMPCC, "--clang=clang-19", "--flang=flang-new-19", "-fopenmp", "-O2",
                "--cuda-path=" + CUDA, "-I" + os.path.join(DEPS, "include19"),
                "-L" + os.path.join(DEPS, "lib19"), "--target-offload=" + NVPTX, "-march=" + SM,
                src, "-o", out]
    if is_fortran(src):
        return ["flang-new-19", "-fopenmp", "-O2", "-L" + os.path.join(DEPS, "lib19"),
                "-fopenmp-targets=" + NVPTX, "--offload-arch=" + SM, src, "-o", out]
    return [c_driver(src), "-fopenmp", "-O2", "-I" + os.path.join(DEPS, "include19"),
            "-L" + os.path.join(DEPS, "lib19"), "--cuda-path=" + CUDA,
            "--libomptarget-nvptx-bc-path=" + NVPTX_DEVICERTL, "-fopenmp-targets=" + NVPTX,
            "--offload-arch=" + SM, src, "-o", out]


def cpu_command(src, out):
    """The x86_64-only companion: clang 19 for C/C++ (LLVM's own flow), ompcc for Fortran."""
    if is_fortran(src):
        if not os.path.exists(OMPCC):
            return None
        return [OMPCC, "--clang=clang-19", "--flang=flang-new-19", "-fopenmp", "-O2",
                "-L" + os.path.join(DEPS, "lib19"), "--target-offload=x86_64-pc-linux-gnu",
                src, "-o", out]
    return [c_driver(src), "-fopenmp", "-O2", "-I" + os.path.join(DEPS, "include19"),
            "-L" + os.path.join(DEPS, "lib19"), "-fopenmp-targets=x86_64-pc-linux-gnu", src,
            "-o", out, os.path.join(DEPS, "lib19", "libomptarget.devicertl.a")]


def first_error(log):
    """The first line naming an error in the last command of a build log (else its last line)."""
    last = tail_of(log, 20000).rsplit("\n$ ", 1)[-1].splitlines()[1:]
    errors = [l.strip() for l in last if "error" in l.lower()]
    return (errors or [l.strip() for l in last if l.strip()] or ["?"])[0][:300]


def run_here(exe, lib, args=(), timeout=120):
    """(status, stdout) of `exe` on the runtime in `lib` here (the x86_64 host device)."""
    env = dict(os.environ, LD_LIBRARY_PATH=lib + os.pathsep + LLVM19_LIB)
    try:
        p = subprocess.run([exe] + list(args), env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        return 124, ""


def build_e2e(bundle, log_dir, limit):
    """Builds every program with each compiler into bundle/p/. Returns (items, skipped)."""
    compilers = ["clang"] + (["ompcc"] if os.path.exists(OMPCC) else [])
    items, skipped = [], []
    chosen = [p for p in E2E if not limit or any(s in p[0] for s in limit)]
    for n, (rel, what, normalize) in enumerate(chosen, 1):
        src = (os.path.join(OWN_PROGRAMS, rel[len("gpu-check/"):]) if rel.startswith("gpu-check/")
               else os.path.join(PROGRAMS, rel))
        name = rel.replace("/", "__")
        d = os.path.join(bundle, "p", name)
        os.makedirs(d, exist_ok=True)
        log = os.path.join(log_dir, "e2e__" + name + ".build.log")
        say("e2e %d/%d: %s" % (n, len(chosen), rel))
        cpu = os.path.join(d, "cpu")
        expected, expected_from = None, None
        cmd = cpu_command(src, cpu)
        if cmd and run_logged(cmd, log, cwd=d) == 0:
            ours = is_fortran(src) or rel in REFERENCE_OURS
            rc, out = run_here(cpu, OURS_LIB if ours else LLVM19_LIB)
            if rc == 0:
                expected = out
                expected_from = "%s, x86_64 host device" % ("ours" if ours else "LLVM 19")
        if os.path.exists(cpu) and expected is None:
            os.unlink(cpu)  # a companion that does not run here checks nothing
        for compiler in compilers:
            gpu = os.path.join(d, "gpu-" + compiler)
            if run_logged(gpu_command(compiler, src, gpu), log, cwd=d, env=cuda_env()) != 0:
                skipped.append(("e2e/%s/%s" % (compiler, rel), "build failed here: " + first_error(log)))
                continue
            items.append({
                "id": "e2e/%s/%s" % (compiler, rel), "kind": "e2e", "what": what, "cwd": "p/" + name,
                "script": 'OMP_TARGET_OFFLOAD=MANDATORY ./gpu-%s' % compiler, "timeout": 60,
                "cpu_script": "./cpu" if os.path.exists(cpu) else None,
                "expected": expected, "expected_from": expected_from, "normalize": normalize,
            })
        for f in os.listdir(d):  # flang's module files and other leftovers do not travel
            if f not in ("cpu",) and not f.startswith("gpu-"):
                os.unlink(os.path.join(d, f))
    return items, skipped


def build_benches(bundle, log_dir):
    """The speed-table bench (clang 19, nvptx64; the same binary on both runtimes) and the floor."""
    d = os.path.join(bundle, "bench")
    os.makedirs(d, exist_ok=True)
    log = os.path.join(log_dir, "bench.build.log")
    items, skipped = [], []
    src = os.path.join(BENCHES, "omp_bench.c")
    say("bench: omp_bench (nvptx64 + x86_64 companion), floor (cc, libcuda opened at run time)")
    gpu_ok = run_logged(gpu_command("clang", src, os.path.join(d, "omp_bench")), log, env=cuda_env()) == 0
    cpu_ok = run_logged(cpu_command(src, os.path.join(d, "omp_bench_cpu")), log) == 0
    if gpu_ok:
        items.append({"id": "bench/omp_bench", "kind": "bench", "cwd": "bench",
                      "script": "OMP_TARGET_OFFLOAD=MANDATORY ./omp_bench 1", "timeout": 120,
                      "cpu_script": "./omp_bench_cpu 0" if cpu_ok else None})
    else:
        skipped.append(("bench/omp_bench", "build failed here: see " + os.path.relpath(log, REPO)))
    cc = shutil.which("cc") or "gcc"
    if run_logged([cc, "-O2", "-o", os.path.join(d, "floor"), os.path.join(BENCHES, "floor.c"), "-ldl"], log) == 0:
        items.append({"id": "bench/floor", "kind": "floor", "cwd": "bench", "script": "./floor 1",
                      "timeout": 120, "cpu_script": "./floor 0"})
    else:
        skipped.append(("bench/floor", "build failed here: see " + os.path.relpath(log, REPO)))
    return items, skipped
