#!/usr/bin/env python3
"""Rewrites a CUDA shared library so that its device code is one real
architecture, compiled here from the PTX it carries.

    fatbin_one_arch.py IN.so OUT.so sm_90 [WORK_DIR]

Why: llama.cpp's prebuilt CUDA library from npm (@node-llama-cpp/
linux-x64-cuda, the GPU peer of tests/bench/bench_cuda.sh) is 159 MB, more
than a lent GPU machine takes in one call, and it holds machine code for
sm_86, sm_89 and sm_120 only, with PTX of ISA 9.1 for the rest, which the
GPU machines' CUDA 13.0 driver cannot JIT-compile.  So each fatbin
container of .nv_fatbin gets its highest PTX at or below the target,
assembled here with this machine's ptxas (the same ptxas -O3 that nvcc
would run for that architecture; the ISA version lowered to what ptxas
takes), written back in place as a one-image fatbin, and the rest of the
container zeroed: every pointer into the section stays valid, and the file
compresses to a fraction.  Nothing is linked or relocated.

The fatbin layout read here (as nvcc writes it): a container is a 16-byte
header (magic 0xBA55ED50, version u16, header size u16, size of the
entries u64), then entries of a header (kind u16: 1 PTX, 2 ELF; header
size u32 at 4; payload size u64 at 8; stored size u32 at 16; arch u32 at
28; flags u64 at 32) and their payload, zstd-compressed when it starts
with zstd's magic.
"""
import concurrent.futures
import os
import re
import struct
import subprocess
import sys

FATBIN_MAGIC = 0xBA55ED50
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def section(data, name):
    """Offset and size of an ELF64 section by name."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    def sh(i):
        return struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
    stroff = sh(shstrndx)[4]
    for i in range(shnum):
        s = sh(i)
        end = data.index(b"\0", stroff + s[0])
        if data[stroff + s[0]:end].decode() == name:
            return s[4], s[5]
    raise SystemExit("no %s section" % name)


def containers(data, off, size):
    """(offset, length) of each fatbin container in the section."""
    p, end = off, off + size
    while p + 16 <= end:
        magic, _ver, hs, fs = struct.unpack_from("<IHHQ", data, p)
        if magic != FATBIN_MAGIC:
            if p % 8:
                p += 8 - p % 8
                continue
            raise SystemExit("bad fatbin magic at 0x%x" % p)
        yield p, hs + fs
        p += hs + fs


def entries(data, p):
    _m, _v, hs, fs = struct.unpack_from("<IHHQ", data, p)
    q, end = p + hs, p + hs + fs
    while q < end:
        kind, _u, ehs, esz = struct.unpack_from("<HHIQ", data, q)
        stored, = struct.unpack_from("<I", data, q + 16)
        arch, = struct.unpack_from("<I", data, q + 28)
        yield kind, arch, data[q + ehs:q + ehs + (stored or esz)]
        q += ehs + esz


def ptx_text(payload):
    if payload.startswith(ZSTD_MAGIC):
        payload = subprocess.run(["zstd", "-d", "-c"], input=payload, capture_output=True,
                                 check=True).stdout
    return payload.rstrip(b"\0") + b"\n"


def ptxas_isa(ptxas):
    """The highest PTX ISA this ptxas takes: CUDA 13.x reads ISA 9.x."""
    out = subprocess.run([ptxas, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"release (\d+)\.(\d+)", out)
    if m and int(m.group(1)) == 13:
        return b"9.%d" % int(m.group(2))
    return None


def main():
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    src, dst, target = sys.argv[1], sys.argv[2], sys.argv[3]
    work = sys.argv[4] if len(sys.argv) > 4 else dst + ".work"
    sm = int(target.removeprefix("sm_"))
    cuda_bin = os.environ.get("CUDA_BIN", "/usr/local/cuda/bin")
    ptxas, fatbinary = os.path.join(cuda_bin, "ptxas"), os.path.join(cuda_bin, "fatbinary")
    isa = ptxas_isa(ptxas)
    os.makedirs(work, exist_ok=True)
    data = bytearray(open(src, "rb").read())
    off, size = section(data, ".nv_fatbin")
    spans = list(containers(data, off, size))

    jobs = []
    for i, (p, _n) in enumerate(spans):
        ptx = [(a, pl) for k, a, pl in entries(data, p) if k == 1 and a <= sm]
        if not ptx:
            raise SystemExit("container %d has no PTX at or below %s" % (i, target))
        _arch, payload = max(ptx, key=lambda e: e[0])
        text = ptx_text(payload)
        if isa:
            text = re.sub(rb"^\.version \d+\.\d+", b".version " + isa, text, count=1, flags=re.M)
        base = os.path.join(work, "%03d" % i)
        if not os.path.exists(base + ".cubin"):
            open(base + ".ptx", "wb").write(text)
            jobs.append(base)

    def assemble(base):
        r = subprocess.run([ptxas, "-arch=" + target, "-O3", base + ".ptx", "-o", base + ".tmp"],
                           capture_output=True, text=True)
        if r.returncode:
            return base, r.stderr
        os.rename(base + ".tmp", base + ".cubin")
        os.remove(base + ".ptx")
        return base, None

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        for base, err in pool.map(assemble, sorted(jobs, key=lambda b: -os.path.getsize(b + ".ptx"))):
            if err:
                raise SystemExit("ptxas failed on %s.ptx:\n%s" % (base, err))

    for i, (p, n) in enumerate(spans):
        base = os.path.join(work, "%03d" % i)
        subprocess.run([fatbinary, "--create=" + base + ".fatbin", "-64", "--compress-all",
                        "--image3=kind=elf,sm=%d,file=%s.cubin" % (sm, base)], check=True)
        fb = open(base + ".fatbin", "rb").read()
        if len(fb) > n:
            raise SystemExit("container %d: %d bytes do not fit in %d" % (i, len(fb), n))
        data[p:p + n] = fb + bytes(n - len(fb))
    open(dst, "wb").write(data)
    os.chmod(dst, 0o755)
    print("%s: %d containers, %s machine code only" % (dst, len(spans), target))


if __name__ == "__main__":
    main()
