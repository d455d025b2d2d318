"""The build phase's packing: the runtimes that travel, the one bundle file, and its size.

The bundle is an uncompressed tar of compressed parts: payload.tar.xz (programs, tools, our
runtime, the manifest) and, when it fits, llvm-rt.tar.xz (LLVM 19's libomptarget.so.19.1, whose
CUDA plugin is built in, and the libraries it needs: libLLVM and its own dependencies, ~44 MB
compressed). The LLVM part is compressed once and cached: it only changes with the system's
packages."""
import hashlib
import os
import shutil
import subprocess
import tarfile

from common import LLVM19_LIB, REPO, mib, say

# Libraries the GPU machine's own (newer) system provides better than a copy from here.
SYSTEM_LIBS = ("libc.so", "libm.so", "libdl.so", "libpthread.so", "librt.so", "ld-linux",
               "libstdc++.so", "libgcc_s.so", "linux-vdso")


def copy_ours(dist_lib, dest):
    """Our runtime as it is installed: every shared library in dist/lib (the CUDA plugin too,
    whatever its file is called) and the isolated devices' worker. Returns the files copied."""
    os.makedirs(dest, exist_ok=True)
    copied = []
    for name in sorted(os.listdir(dist_lib)):
        src = os.path.join(dist_lib, name)
        if ".so" not in name and name != "offload-worker":
            continue  # the device runtimes (.a, .bc) are for building, not for running
        if name.startswith("libomptarget.so.") and name != "libomptarget.so.19.1":
            continue  # the same code under LLVM 22's soname: clang 19's programs load .19.1
        dst = os.path.join(dest, name)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
        copied.append(name)
    return copied


def needed_libs(lib):
    """(soname, resolved path) of every library `lib` loads that the GPU machine may lack."""
    out = subprocess.run(["ldd", lib], stdout=subprocess.PIPE, text=True).stdout
    found = []
    for line in out.splitlines():
        w = line.split()
        if len(w) >= 3 and w[1] == "=>" and not any(w[0].startswith(s) for s in SYSTEM_LIBS):
            found.append((w[0], os.path.realpath(w[2])))
    return found


def llvm_runtime_part(cache_dir):
    """LLVM 19's runtime and its libraries as rt/llvm/ in a cached tar.xz; returns its path."""
    main = os.path.join(LLVM19_LIB, "libomptarget.so.19.1")
    libs = [("libomptarget.so.19.1", main)] + [l for l in needed_libs(main) if l[0] != "libomp.so.5"]
    key = hashlib.sha256(repr([(n, p, os.path.getsize(p), os.path.getmtime(p)) for n, p in libs]).encode())
    part = os.path.join(cache_dir, "llvm-rt-%s.tar.xz" % key.hexdigest()[:16])
    if os.path.exists(part):
        return part, libs
    os.makedirs(cache_dir, exist_ok=True)
    total = sum(os.path.getsize(p) for _, p in libs)
    say("compressing LLVM 19's runtime and %d libraries (%s; once, then cached)" % (len(libs) - 1, mib(total)))
    tmp = part + ".tmp"
    # xz with all cores, outside Python's single-threaded lzma module.
    with open(tmp, "wb") as f:
        tar = subprocess.Popen(["tar", "-c", "-P", "--transform", "s,^.*/,rt/llvm/,", "-h", "-f", "-"]
                               + [p for _, p in libs], stdout=subprocess.PIPE)
        # tar names members by their real file names; the links by soname are added below.
        xz = subprocess.run(["xz", "-T0", "-6", "-c"], stdin=tar.stdout, stdout=f)
        tar.wait()
    if tar.returncode != 0 or xz.returncode != 0:
        os.unlink(tmp)
        raise RuntimeError("could not pack LLVM's runtime")
    os.replace(tmp, part)
    return part, libs


def soname_links(libs, dest):
    """Links by soname for the libraries whose file name differs (libz3.so.4 -> libz3.so.4.8...)."""
    os.makedirs(dest, exist_ok=True)
    for soname, path in libs:
        real = os.path.basename(path)
        if real != soname:
            link = os.path.join(dest, soname)
            if not os.path.lexists(link):
                os.symlink(real, link)


def compress_payload(stage, path):
    """stage/ as a tar.xz (xz on all cores; level 2: it is made on every build, and level 6
    saves only a few percent of it)."""
    with open(path, "wb") as f:
        tar = subprocess.Popen(["tar", "-c", "-C", stage, "-f", "-", "."], stdout=subprocess.PIPE)
        xz = subprocess.run(["xz", "-T0", "-2", "-c"], stdin=tar.stdout, stdout=f)
        tar.wait()
    if tar.returncode != 0 or xz.returncode != 0:
        raise RuntimeError("could not pack %s" % stage)


def outer(bundle, parts):
    """The one bundle file: an uncompressed tar holding the compressed parts."""
    tmp = bundle + ".tmp"
    with tarfile.open(tmp, "w") as t:
        for p in parts:
            t.add(p, arcname=os.path.basename(p))
    os.replace(tmp, bundle)


def tree_size():
    """What else travels with a run: the checkout's tracked and untracked-not-ignored files."""
    out = subprocess.run(["git", "-C", REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         stdout=subprocess.PIPE).stdout
    total = 0
    for name in out.split(b"\0"):
        p = os.path.join(REPO.encode(), name)
        if name and os.path.isfile(p) and not os.path.islink(p):
            total += os.path.getsize(p)
    return total
