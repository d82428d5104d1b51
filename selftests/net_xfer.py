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
    h = hashlib.sha256()
    got = 0
    while True:
        data = conn.recv(1 << 16)
        if not data:
            break
        h.update(data)
        got += len(data)
    conn.close()
    srv.close()
    want = expected(args.size, args.seed)
    if got != args.size or h.hexdigest() != want:
        print("mismatch: got %d bytes sha256 %s, want %d bytes sha256 %s"
              % (got, h.hexdigest(), args.size, want))
        return 1
    print("ok: %d bytes from %s, sha256 %s" % (got, peer[0], want))
    return 0


def send(args):
    # The receiver may not listen yet: retry refused connections a while.
    deadline = time.monotonic() + 10
    while True:
        try:
            conn = socket.create_connection((args.host, args.port), timeout=15)
            conn.settimeout(args.timeout)
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    off = 0
    for chunk in stream(args.size, args.seed):
        if args.corrupt is not None and off <= args.corrupt < off + len(chunk):
            b = bytearray(chunk)
            b[args.corrupt - off] ^= 0xff
            chunk = bytes(b)
        conn.sendall(chunk)
        off += len(chunk)
    conn.shutdown(socket.SHUT_WR)
    # Wait for the receiver to close: all data was read, not just queued.
    while conn.recv(4096):
        pass
    conn.close()
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    for mode in ("recv", "send"):
        s = sub.add_parser(mode)
        if mode == "recv":
            s.add_argument("--bind", default="0.0.0.0")
        else:
            s.add_argument("--host", required=True)
            s.add_argument("--corrupt", type=int)
        s.add_argument("--port", type=int, required=True)
        s.add_argument("--size", type=int, required=True)
        s.add_argument("--seed", type=int, default=1)
        s.add_argument("--timeout", type=float, default=120)
    args = p.parse_args()
    return recv(args) if args.mode == "recv" else send(args)


if __name__ == "__main__":
    sys.exit(main())
