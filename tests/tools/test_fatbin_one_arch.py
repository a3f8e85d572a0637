#!/usr/bin/env python3
"""fatbin_one_arch.py on the build's own CUDA module (no GPU needed).

    test_fatbin_one_arch.py MODULE.so NVCC

(NVCC: the nvcc the module was built with; ptxas and fatbinary beside it.)

Rewrites MODULE to sm_90 machine code alone and checks what the GPU peer
relies on: the file keeps its size and every byte outside .nv_fatbin;
each container, at its old offset, holds one sm_90 ELF image, a CUDA
cubin (e_machine 190) that defines every kernel the container's PTX
enters, and zeros after it; and an architecture with no PTX at or below
it is refused with a message.  Exits 77 (skipped) without ptxas,
fatbinary or zstd.
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fatbin_one_arch as fb  # noqa: E402

failed = 0


def check(ok, what):
    global failed
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failed += 1


def unzstd(payload):
    if not payload.startswith(fb.ZSTD_MAGIC):
        return payload
    return subprocess.run(["zstd", "-d", "-c"], input=payload, capture_output=True, check=True).stdout


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    module, cuda_bin = sys.argv[1], os.path.dirname(os.path.realpath(sys.argv[2]))
    for tool in (os.path.join(cuda_bin, "ptxas"), os.path.join(cuda_bin, "fatbinary")):
        if not os.access(tool, os.X_OK):
            print("skipped: no %s" % tool)
            return 77
    if not shutil.which("zstd"):
        print("skipped: no zstd (Debian's zstd) to read compressed images")
        return 77
    env = dict(os.environ, CUDA_BIN=cuda_bin)
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fatbin_one_arch.py")
    src = open(module, "rb").read()
    off, size = fb.section(src, ".nv_fatbin")
    spans = list(fb.containers(src, off, size))
    check(len(spans) > 0, "%s has %d fatbin containers" % (module, len(spans)))

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.so")
        r = subprocess.run([sys.executable, tool, module, out, "sm_90", os.path.join(tmp, "work")],
                           env=env, capture_output=True, text=True)
        check(r.returncode == 0, "rewritten to sm_90: %s" % (r.stdout + r.stderr).strip())
        if r.returncode:
            return 1
        dst = open(out, "rb").read()
        check(len(dst) == len(src), "the same size (%d bytes)" % len(src))
        check(dst[:off] == src[:off] and dst[off + size:] == src[off + size:],
              "every byte outside .nv_fatbin unchanged")
        kernels = 0
        for i, (p, n) in enumerate(spans):
            ptx = [fb.ptx_text(pl) for k, a, pl in fb.entries(src, p) if k == 1 and a <= 90]
            got = list(fb.entries(dst, p))
            check(len(got) == 1 and got[0][0] == 2 and got[0][1] == 90,
                  "container %d: one sm_90 ELF image (%s)" % (i, [(k, a) for k, a, _ in got]))
            if len(got) != 1:
                continue
            elf = unzstd(got[0][2])
            check(elf[:4] == b"\x7fELF" and int.from_bytes(elf[18:20], "little") == 190,
                  "container %d: a CUDA cubin" % i)
            names = re.findall(rb"^\s*(?:\.(?:visible|weak)\s+)?\.entry\s+(\w+)", max(ptx, key=len), re.M) if ptx else []
            missing = [x for x in names if b"\0" + x + b"\0" not in elf]
            kernels += len(names)
            check(not missing, "container %d: all %d kernels of its PTX defined%s"
                  % (i, len(names), " (missing %s)" % missing[:3] if missing else ""))
            _m, _v, hs, fs = struct.unpack_from("<IHHQ", dst, p)
            check(dst[p + hs + fs:p + n] == bytes(n - hs - fs), "container %d: zeros after it" % i)

        check(kernels > 0, "%d kernels in all, each in its cubin" % kernels)
        r = subprocess.run([sys.executable, tool, module, os.path.join(tmp, "bad.so"), "sm_50",
                            os.path.join(tmp, "work50")], env=env, capture_output=True, text=True)
        check(r.returncode != 0 and "no PTX at or below sm_50" in r.stderr + r.stdout
              and not os.path.exists(os.path.join(tmp, "bad.so")),
              "sm_50, below every PTX: refused (%s)" % (r.stdout + r.stderr).strip()[:120])
    print("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
