#!/usr/bin/env python3
"""Runs the tests of a meson build without meson: on a machine that has the
build's programs but not meson or the build's dependencies (a lent GPU
machine, say), from the list `meson introspect --tests BUILD` wrote.

    run_introspected.py TESTS.json REGEX JOBS LOG

Runs every test whose name REGEX matches, JOBS at a time, each with the
environment and working directory meson would give it (a test with no
working directory runs in the build directory, found from EXLD_BUILDDIR
in its environment); an interpreter path that does not exist there (a
pyenv shim, say) is looked up on PATH by its name.  Prints a line per
test (ok, skip with its reason, FAIL with the end of its output), appends
every output to LOG, and ends with a summary line.  Exit status 1 when a
test failed.  RT_TIMEOUT caps each test's seconds (default: its own).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def resolve(arg):
    if arg.startswith("/") and not os.path.exists(arg):
        found = shutil.which(os.path.basename(arg))
        if found:
            return found
    return arg


def run(t):
    cmd = [resolve(a) for a in t["cmd"]]
    env = dict(os.environ)
    env.update(t.get("env") or {})
    # A test's own library path (meson's, for the build's libraries) comes
    # first; the machine's (where gpu_session.sh put what it lacked) after.
    outer = os.environ.get("LD_LIBRARY_PATH")
    if outer and env.get("LD_LIBRARY_PATH") != outer:
        env["LD_LIBRARY_PATH"] = env["LD_LIBRARY_PATH"] + ":" + outer
    cwd = t.get("workdir") or env.get("EXLD_BUILDDIR") or os.getcwd()
    limit = t.get("timeout") or 300
    if os.environ.get("RT_TIMEOUT"):
        limit = min(limit, int(os.environ["RT_TIMEOUT"]))
    t0 = time.time()
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=limit)
        rc, out = p.returncode, p.stdout.decode(errors="replace")
    except subprocess.TimeoutExpired as e:
        rc, out = "TIMEOUT", (e.stdout or b"").decode(errors="replace")
    except OSError as e:
        rc, out = "EXEC", str(e)
    return t["name"], rc, time.time() - t0, out


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    tests_json, pattern, jobs, log_path = sys.argv[1:]
    pat = re.compile(pattern)
    tests = [t for t in json.load(open(tests_json)) if pat.search(t["name"])]
    counts = {"ok": 0, "skip": 0, "fail": 0}
    with open(log_path, "a") as log, ThreadPoolExecutor(int(jobs)) as ex:
        for name, rc, dt, out in ex.map(run, tests):
            kind = "ok" if rc == 0 else "skip" if rc == 77 else "fail"
            counts[kind] += 1
            shown = kind if kind != "fail" else "FAIL(%s)" % rc
            print("%-40s %-10s %6.1fs" % (name, shown, dt), flush=True)
            log.write("===== %s rc=%s %.1fs\n%s\n" % (name, rc, dt, out))
            lines = out.strip().splitlines()
            if kind == "fail":
                print("\n".join(lines[-25:]), flush=True)
            elif kind == "skip" and lines:
                print("    " + lines[-1][:200], flush=True)
    print("summary %s: %d ok, %d skipped, %d failed" %
          (pattern, counts["ok"], counts["skip"], counts["fail"]), flush=True)
    sys.exit(1 if counts["fail"] else 0)


if __name__ == "__main__":
    main()
