#!/usr/bin/env python3
"""A stand-in for exld for exl's tests: speaks just enough of the protocol
(docs/protocol.md) to play an older daemon, or a daemon in a state the
real one is hard to bring about from a test.

    fake_exld.py SOCKET LOG [--features a,b,...] [--hang]

Serves SOCKET until killed; writes each request's op to LOG, one per line,
so a test can tell what reached the daemon.  Its replies:

  hello       version 1, no ring; "features" only with --features (without
              it, a daemon from before the features list)
  models      one loaded model, stories260K
  load        forbidden, as to a uid that is not an admin
  generate    accepted (a job id) and ended at once (reason max_new_tokens,
              no tokens); with --hang nothing more: the job "runs" until it
              is cancelled, and cancel ends it with reason cancelled
  other ops   unknown_op

Standard library only: msgpack's few types are coded here.
"""
import os
import socket
import struct
import sys
import threading


def pack(o):
    if o is None:
        return b"\xc0"
    if o is True:
        return b"\xc3"
    if o is False:
        return b"\xc2"
    if isinstance(o, int):
        if 0 <= o < 128:
            return bytes([o])
        if o >= 0:
            return b"\xcf" + struct.pack(">Q", o)
        return b"\xd3" + struct.pack(">q", o)
    if isinstance(o, float):
        return b"\xcb" + struct.pack(">d", o)
    if isinstance(o, str):
        b = o.encode()
        return b"\xdb" + struct.pack(">I", len(b)) + b
    if isinstance(o, (list, tuple)):
        return b"\xdd" + struct.pack(">I", len(o)) + b"".join(pack(x) for x in o)
    if isinstance(o, dict):
        return b"\xdf" + struct.pack(">I", len(o)) + b"".join(
            pack(k) + pack(v) for k, v in o.items())
    raise TypeError(type(o))


class Short(Exception):
    pass


def unpack(b, i):
    """The value at b[i:] and the offset after it; Short when incomplete."""
    def take(n):
        nonlocal i
        if i + n > len(b):
            raise Short()
        r = b[i:i + n]
        i += n
        return r

    c = take(1)[0]
    if c <= 0x7f:
        return c, i
    if c >= 0xe0:
        return c - 256, i
    if 0x80 <= c <= 0x8f or c in (0xde, 0xdf):
        n = c & 0x0f if c <= 0x8f else struct.unpack(">H" if c == 0xde else ">I",
                                                     take(2 if c == 0xde else 4))[0]
        d = {}
        for _ in range(n):
            k, i = unpack(b, i)
            v, i = unpack(b, i)
            d[k] = v
        return d, i
    if 0x90 <= c <= 0x9f or c in (0xdc, 0xdd):
        n = c & 0x0f if c <= 0x9f else struct.unpack(">H" if c == 0xdc else ">I",
                                                     take(2 if c == 0xdc else 4))[0]
        a = []
        for _ in range(n):
            v, i = unpack(b, i)
            a.append(v)
        return a, i
    if 0xa0 <= c <= 0xbf:
        return take(c & 0x1f).decode("utf-8", "replace"), i
    if c in (0xd9, 0xda, 0xdb, 0xc4, 0xc5, 0xc6):
        w = {0xd9: 1, 0xda: 2, 0xdb: 4, 0xc4: 1, 0xc5: 2, 0xc6: 4}[c]
        n = int.from_bytes(take(w), "big")
        raw = take(n)
        return (raw.decode("utf-8", "replace") if c >= 0xd9 else raw), i
    fixed = {0xc0: None, 0xc2: False, 0xc3: True}
    if c in fixed:
        return fixed[c], i
    fmt = {0xcc: ">B", 0xcd: ">H", 0xce: ">I", 0xcf: ">Q", 0xd0: ">b", 0xd1: ">h",
           0xd2: ">i", 0xd3: ">q", 0xca: ">f", 0xcb: ">d"}
    if c in fmt:
        return struct.unpack(fmt[c], take(struct.calcsize(fmt[c])))[0], i
    raise ValueError("msgpack byte 0x%02x" % c)


class Conn:
    next_job = [100]
    lock = threading.Lock()

    def __init__(self, sock, log, features, hang):
        self.sock = sock
        self.log = log
        self.features = features
        self.hang = hang
        self.jobs = {}  # job -> the generate request's id

    def send(self, m):
        self.sock.sendall(pack(m))

    def reply(self, req, op, **fields):
        m = {"op": op}
        if "id" in req:
            m["id"] = req["id"]
        m.update(fields)
        self.send(m)

    def handle(self, req):
        op = req.get("op")
        with Conn.lock:
            with open(self.log, "a") as f:
                f.write("%s\n" % op)
        if op == "hello":
            f = dict(version=1, server="fake-exld 0.0.1", max_message=16 << 20,
                     uid=os.getuid(), pid=os.getpid(), ring=False)
            if self.features is not None:
                f["features"] = self.features
            self.reply(req, "hello", **f)
        elif op == "models":
            self.reply(req, "models", models=[dict(
                name="stories260K", state="loaded", size=1185376, arch="llama",
                n_vocab=512, n_ctx_train=512, kv_tokens=8192, jobs=len(self.jobs),
                weight_bytes=1080000)])
        elif op == "load":
            self.reply(req, "error", code="forbidden",
                       message="load: uid %d is not an admin" % os.getuid())
        elif op == "generate":
            with Conn.lock:
                Conn.next_job[0] += 1
                job = Conn.next_job[0]
            self.jobs[job] = req.get("id")
            self.reply(req, "generate", job=job, model="stories260K", prompt_tokens=1)
            if not self.hang:
                self.end(job, "max_new_tokens")
        elif op == "cancel":
            job = req.get("job")
            if job not in self.jobs:
                self.reply(req, "error", code="unknown_job",
                           message="cancel: this connection has no running job %s" % job)
                return
            self.reply(req, "cancel", job=job)
            self.end(job, "cancelled")
        elif op in ("resume", "wake"):
            pass
        else:
            self.reply(req, "error", code="unknown_op", message="unknown op \"%s\"" % op)

    def end(self, job, reason):
        gen_id = self.jobs.pop(job)
        done = {"op": "done"}
        if gen_id is not None:
            done["id"] = gen_id
        done.update(job=job, stop_reason=reason, prompt_tokens=1, new_tokens=0,
                    cached_tokens=0, seed=1, time_queued=0.0, time_to_first=0.0,
                    time_total=0.0, model="stories260K", text="", ids=[])
        self.send(done)

    def serve(self):
        buf = b""
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return
                buf += data
                while buf:
                    try:
                        req, n = unpack(buf, 0)
                    except Short:
                        break
                    buf = buf[n:]
                    if isinstance(req, dict):
                        self.handle(req)
        except (ConnectionError, ValueError):
            return
        finally:
            self.sock.close()


def main():
    usage = "usage: fake_exld.py SOCKET LOG [--features a,b,...] [--hang]"
    if len(sys.argv) < 3:
        sys.exit(usage)
    path, log = sys.argv[1], sys.argv[2]
    features = None
    hang = False
    args = sys.argv[3:]
    while args:
        a = args.pop(0)
        if a == "--features" and args:
            features = [f for f in args.pop(0).split(",") if f]
        elif a == "--hang":
            hang = True
        else:
            sys.exit(usage)
    if os.path.exists(path):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(16)
    while True:
        s, _ = srv.accept()
        threading.Thread(target=Conn(s, log, features, hang).serve, daemon=True).start()


if __name__ == "__main__":
    main()
