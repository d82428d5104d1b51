#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Byte-exact TCP transfer check for the network selftests.

  net_xfer.py recv --bind ADDR --port P --size N --seed S
  net_xfer.py send --host ADDR --port P --size N --seed S [--corrupt OFFSET]

The sender streams N deterministic pseudo-random bytes (seeded with S) over
one TCP connection and closes it. The receiver accepts one connection, reads
to EOF, and regenerates the same stream itself to compare length and sha256:
it exits 0 only if every byte arrived, in order, exactly once. --corrupt
flips one byte at OFFSET before sending, so a test can check that the check
fails.

For a peer in another guest, whose exit status the test cannot see:

  net_xfer.py serve --bind ADDR --port P
  net_xfer.py check --host ADDR --port P --size N --seed S [--corrupt OFFSET]
  net_xfer.py fetch --host ADDR --port P --size N --seed S

serve answers connections until killed. "check" sends the stream there
(after a line "check N S"); the server compares it as recv does and answers
with its verdict line, which check prints, exiting 0 only on "ok". "fetch"
asks for the stream ("gen N S") and checks what arrives itself.
"""

import argparse
import hashlib
import random
import socket
import sys
import time

CHUNK = 1 << 20


def stream(size, seed):
    """Yields the test data in chunks; both ends cut it the same way."""
    rng = random.Random(seed)
    left = size
    while left > 0:
        n = min(CHUNK, left)
        yield rng.randbytes(n)
        left -= n


def expected(size, seed):
    h = hashlib.sha256()
    for chunk in stream(size, seed):
        h.update(chunk)
    return h.hexdigest()


def recv(args):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((args.bind, args.port))
    srv.listen(1)
    srv.settimeout(args.timeout)
    conn, peer = srv.accept()
    conn.settimeout(args.timeout)
    h, got = read_all(conn)
    conn.close()
    srv.close()
    ok, line = verdict(h, got, args.size, args.seed, peer[0])
    print(line)
    return 0 if ok else 1


def verdict(h, got, size, seed, peer):
    """The receiver's verdict line on what it read; True if it is ok."""
    want = expected(size, seed)
    if got != size or h.hexdigest() != want:
        return False, ("mismatch: got %d bytes sha256 %s, want %d bytes sha256 %s"
                       % (got, h.hexdigest(), size, want))
    return True, "ok: %d bytes from %s, sha256 %s" % (got, peer, want)


def read_all(conn):
    h = hashlib.sha256()
    got = 0
    while True:
        data = conn.recv(1 << 16)
        if not data:
            return h, got
        h.update(data)
        got += len(data)


def connect(args):
    # The receiver may not listen yet: retry refused connections a while.
    deadline = time.monotonic() + 10
    while True:
        try:
            conn = socket.create_connection((args.host, args.port), timeout=15)
            conn.settimeout(args.timeout)
            return conn
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def send_stream(conn, size, seed, corrupt):
    off = 0
    for chunk in stream(size, seed):
        if corrupt is not None and off <= corrupt < off + len(chunk):
            b = bytearray(chunk)
            b[corrupt - off] ^= 0xff
            chunk = bytes(b)
        conn.sendall(chunk)
        off += len(chunk)
    conn.shutdown(socket.SHUT_WR)


def send(args):
    conn = connect(args)
    send_stream(conn, args.size, args.seed, args.corrupt)
    # Wait for the receiver to close: all data was read, not just queued.
    while conn.recv(4096):
        pass
    conn.close()
    return 0


def read_line(conn):
    line = b""
    while not line.endswith(b"\n"):
        c = conn.recv(1)
        if not c:
            break
        line += c
    return line.decode(errors="replace").strip()


def serve(args):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((args.bind, args.port))
    srv.listen(4)
    while True:
        conn, peer = srv.accept()
        conn.settimeout(args.timeout)
        try:
            req = read_line(conn).split()
            if len(req) == 3 and req[0] == "check":
                h, got = read_all(conn)
                _, line = verdict(h, got, int(req[1]), int(req[2]), peer[0])
                conn.sendall((line + "\n").encode())
            elif len(req) == 3 and req[0] == "gen":
                send_stream(conn, int(req[1]), int(req[2]), None)
            else:
                conn.sendall(b"error: bad request\n")
        except OSError as e:
            print("serve: %s: %s" % (peer[0], e), file=sys.stderr)
        conn.close()


def check(args):
    conn = connect(args)
    conn.sendall(b"check %d %d\n" % (args.size, args.seed))
    send_stream(conn, args.size, args.seed, args.corrupt)
    line = read_line(conn)
    conn.close()
    print("peer: %s" % (line or "no verdict (connection closed)"))
    return 0 if line.startswith("ok:") else 1


def fetch(args):
    conn = connect(args)
    conn.sendall(b"gen %d %d\n" % (args.size, args.seed))
    h, got = read_all(conn)
    conn.close()
    ok, line = verdict(h, got, args.size, args.seed, args.host)
    print(line)
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    modes = {"recv": recv, "send": send, "serve": serve, "check": check, "fetch": fetch}
    for mode in modes:
        s = sub.add_parser(mode)
        if mode in ("recv", "serve"):
            s.add_argument("--bind", default="0.0.0.0")
        else:
            s.add_argument("--host", required=True)
        if mode in ("send", "check"):
            s.add_argument("--corrupt", type=int)
        s.add_argument("--port", type=int, required=True)
        if mode != "serve":
            s.add_argument("--size", type=int, required=True)
            s.add_argument("--seed", type=int, default=1)
        s.add_argument("--timeout", type=float, default=120)
    args = p.parse_args()
    return modes[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
