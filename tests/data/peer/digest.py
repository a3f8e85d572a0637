#!/usr/bin/env python3
"""Writes the digest of the peer's logits that test_model_peer checks
exld against (format in README.md), and, as a comment, how far exld's own
full logits (exld run --dump-logits, the same sequence) were from them.

usage: digest.py MKMODEL_OPTS TEACHER_IDS PEER_JSON PEER_LOGITS EXLD_LOGITS"""
import json
import struct
import sys

STRIDE = 16  # every 16th id ...
TOP = 8      # ... and the peer's 8 largest at each position

opts, teacher, peer_json, peer_bin, exld_bin = sys.argv[1:6]
info = json.loads(open(peer_json, "rb").read().decode("utf-8", "replace"))
nv = info["n_vocab"]


def rows(path):
    data = open(path, "rb").read()
    n = len(data) // (4 * nv)
    return [struct.unpack_from("<%df" % nv, data, 4 * nv * r) for r in range(n)]


peer, ours = rows(peer_bin), rows(exld_bin)
assert len(peer) == len(ours) == 16, (len(peer), len(ours))
prompt = info["prompt_token_ids"]
teacher = [int(t) for t in teacher.split(",")]
assert len(teacher) == 15
print("# exld-mkmodel %s" % opts)
print("# peer: llama.cpp %s, %d threads" % (info.get("cpu_backend", "?"), info.get("threads", 0)))
worst = []
for p, e in zip(peer, ours):
    span = max(p) - min(p)
    worst.append(max(abs(a - b) for a, b in zip(p, e)) / span)
print("# max |exld - peer| / range over all %d logits, per position: %s" %
      (nv, " ".join("%.4f" % w for w in worst)))
print("# max %.4f" % max(worst))
print("prompt", " ".join(map(str, prompt)))
print("teacher", " ".join(map(str, teacher)))
for i, p in enumerate(peer):
    ids = set(range(0, nv, STRIDE))
    ids |= set(sorted(range(nv), key=lambda k: -p[k])[:TOP])
    print("pos %d %.6g %.6g %s" % (i, min(p), max(p),
                                   " ".join("%d:%.6g" % (k, p[k]) for k in sorted(ids))))
