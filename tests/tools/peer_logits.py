#!/usr/bin/env python3
"""exld against llama.cpp (the peer of ../shared/tools/README.md) on one
model: exld run greedy for N tokens dumping its logits, the peer fed the
same ids (--teacher) dumping its own; prints, per position, max |exld -
peer| over the logit range of the peer's row, then the worst.

  tests/tools/peer_logits.py MODEL.gguf "PROMPT" N [PEER ARGS...]

From the source root with the build in build/ and the peer in /tmp/peer
(EXLD and PEER override the two programs).  Standard library only."""
import array
import json
import os
import subprocess
import sys
import tempfile

EXLD = os.environ.get("EXLD", "build/daemon/exld")
PEER = os.environ.get("PEER", "/tmp/peer/peer-bench-native")


def floats(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    model, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tmp = tempfile.mkdtemp()
    e_bin, p_bin = os.path.join(tmp, "exld.bin"), os.path.join(tmp, "peer.bin")
    r = subprocess.run([EXLD, "run", "--model", model, "--prompt", prompt, "-n", str(n),
                        "--temperature", "0", "--json", "--dump-logits", e_bin,
                        "--threads", "2"], capture_output=True, text=True, errors="replace")
    if r.returncode:
        sys.exit("exld: " + r.stderr)
    ids = json.loads(r.stdout.splitlines()[0])["token_ids"]
    args = [PEER, "--model", model, "--prompt", prompt, "--n", str(n), "--threads", "2",
            "--dump-logits", p_bin]
    if len(ids) > 1:
        args += ["--teacher", ",".join(str(i) for i in ids[:-1])]
    r = subprocess.run(args + sys.argv[4:], capture_output=True, text=True, errors="replace")
    if r.returncode:
        sys.exit("peer: " + r.stderr[-2000:])
    peer = json.loads(r.stdout.strip().splitlines()[-1])
    e, p = floats(e_bin), floats(p_bin)
    nv = len(e) // len(ids)
    rows = min(len(ids), len(p) // nv)
    print("exld ids", ids)
    print("peer ids", peer["token_ids"], "prompt", peer.get("prompt_token_ids"))
    worst = 0.0
    for i in range(rows):
        er, pr = e[i * nv:(i + 1) * nv], p[i * nv:(i + 1) * nv]
        rng = max(pr) - min(pr)
        d = max(abs(a - b) for a, b in zip(er, pr))
        worst = max(worst, d / rng)
        print("position %2d: max |diff| %.3g, range %.3g, %.3g" % (i, d, rng, d / rng))
    print("%d rows, worst max |diff| / range %.3g" % (rows, worst))


main()
