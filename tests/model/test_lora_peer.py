#!/usr/bin/env python3
"""exld run --lora against llama.cpp on stories260K: a random rank-8
adapter from exld-mkmodel --lora-for (the same bytes as when the digests
were made), at scales 1 and 0.5.  exld's greedy ids must be the sequence
the peer was fed, and every logit the digest keeps (tests/data/peer/lora/
lora_SCALE.txt, made by its regen.sh with the peer) within 2e-3 of that
position's range of the peer's.  The adapter must also move the logits:
after the prompt, the base model's logits differ from the adapter's by
over 5% of the range.

usage: test_lora_peer.py EXLD MKMODEL DATA_DIR MODELS_DIR"""
import array
import json
import os
import subprocess
import sys
import tempfile

TOL = 2e-3


def read_digest(path):
    head, teacher, rows = {}, None, []
    for line in open(path):
        w = line.split()
        if line.startswith("# exld-mkmodel"):
            head["opts"] = line[len("# exld-mkmodel "):].strip()
        elif w and w[0] == "teacher":
            teacher = [int(x) for x in w[1:]]
        elif w and w[0] == "pos":
            vals = {}
            for kv in w[4:]:
                k, v = kv.split(":")
                vals[int(k)] = float(v)
            rows.append((float(w[2]), float(w[3]), vals))
    return head, teacher, rows


def exld_run(exld, model, lora, out):
    args = [exld, "run", "--model", model, "--prompt", "Once upon a time", "-n", "16",
            "--temperature", "0", "--ignore-eos", "--json", "--threads", "2",
            "--dump-logits", out]
    if lora:
        args += ["--lora", lora]
    r = subprocess.run(args, capture_output=True)
    if r.returncode:
        sys.exit("exld run failed: " + r.stderr.decode("utf-8", "replace"))
    ids = json.loads(r.stdout.decode("utf-8", "replace").splitlines()[0])["token_ids"]
    a = array.array("f")
    with open(out, "rb") as f:
        a.frombytes(f.read())
    return ids, a


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    exld, mkmodel, data, models = sys.argv[1:]
    base = os.path.join(models, "stories260K.gguf")
    if not os.path.exists(base):
        print("no %s; skipping" % base)
        sys.exit(77)
    tmp = tempfile.mkdtemp()
    adapter = os.path.join(tmp, "a.gguf")
    r = subprocess.run([mkmodel, "--lora-for", base, "--rank", "8", "--alpha", "16",
                        "--seed", "1", "-o", adapter], capture_output=True)
    if r.returncode:
        sys.exit("exld-mkmodel: " + r.stderr.decode())
    _, base_logits = exld_run(exld, base, None, os.path.join(tmp, "base.bin"))
    failures = 0
    for scale in ("1", "0.5"):
        head, teacher, rows = read_digest(os.path.join(data, "lora_%s.txt" % scale))
        ids, ours = exld_run(exld, base, "%s:%s" % (adapter, scale),
                             os.path.join(tmp, "lora.bin"))
        if ids[:15] != teacher:
            print("scale %s: exld's greedy ids %s are not the peer's sequence %s" %
                  (scale, ids[:15], teacher))
            failures += 1
            continue
        nv = len(ours) // len(ids)
        worst, moved = 0.0, 0.0
        for p, (lo, hi, vals) in enumerate(rows):
            span = hi - lo
            row = ours[p * nv:(p + 1) * nv]
            brow = base_logits[p * nv:(p + 1) * nv]
            for k, v in vals.items():
                worst = max(worst, abs(row[k] - v) / span)
            if p == 0:  # after the prompt: the same context with and without
                moved = max(abs(a - b) for a, b in zip(row, brow)) / span
        print("scale %s: max |exld - llama.cpp| / range %.5f (limit %g); the adapter moves "
              "the logits after the prompt by up to %.3f of the range" % (scale, worst, TOL, moved))
        if worst > TOL:
            failures += 1
        if moved < 0.05:
            print("scale %s: the adapter hardly changes the logits" % scale)
            failures += 1
    sys.exit(1 if failures else 0)


main()
