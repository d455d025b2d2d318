"""Shared pieces of the GPU check: where things are, how a tool is run with its output kept,
and the names both sides of the check agree on (the bundle's layout, the output files)."""
import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPS = os.path.join(REPO, ".deps")
CUDA = os.path.join(DEPS, "cuda-13.0")
DEV19 = os.path.join(DEPS, "libomp-19-dev", "usr", "lib", "llvm-19")
SM = "sm_90"
NVPTX = "nvptx64-nvidia-cuda"
NVPTX_DEVICERTL = os.path.join(DEV19, "lib", "libomptarget-nvptx-%s.bc" % SM)
LLVM19 = "/usr/lib/llvm-19"
LLVM19_LIB = os.path.join(LLVM19, "lib")
# The git-ignored folder everything is built in; the bundle is the one file that travels.
WORK = os.environ.get("GPUCHECK_DIR") or os.path.join(REPO, ".gpucheck")
BUNDLE_NAME = "gpucheck-bundle.tar"
# What the run phase writes into $OUT (at most 8 files come back; these are 5).
OUT_RESULTS = "results.tsv"      # one line per (item, runtime): status, rc, seconds
OUT_OUTPUTS = "outputs.tar.xz"   # every item's stdout/stderr and FileCheck inputs
OUT_SPEED = "speed.tsv"          # bench metrics: runtime, metric, value, unit
OUT_LOG = "run.log"              # the run phase's own progress
OUT_ENV = "machine.txt"          # nvidia-smi, uname, the libraries the runtimes resolved to
# Runtimes a program runs on there: our dist/lib, LLVM 19's libomptarget with its CUDA plugin,
# or none (the raw-driver floor links no OpenMP runtime).
OURS, LLVM, NONE = "ours", "llvm", "none"


def say(msg):
    """Progress on stderr, flushed (long steps print as they go)."""
    print("gpu-check: " + msg, file=sys.stderr, flush=True)


def run_logged(argv, log, cwd=None, env=None, timeout=600):
    """Runs argv with stdout+stderr appended to `log`; returns the exit status (124 on timeout)."""
    with open(log, "ab") as f:
        f.write(("$ " + " ".join(argv) + "\n").encode())
        f.flush()
        try:
            return subprocess.run(argv, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            f.write(b"[timed out]\n")
            return 124
        except OSError as e:
            f.write(("[cannot run: %s]\n" % e).encode())
            return 127


def tail_of(path, n=1500):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return ""
    return data[-n:].decode("utf-8", "replace")


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def fresh_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def mib(nbytes):
    return "%.1f MiB" % (nbytes / 1048576.0)


class Clock:
    """Seconds since a start, for progress lines."""

    def __init__(self):
        self.t0 = time.time()

    def __str__(self):
        return "%.0fs" % (time.time() - self.t0)
