#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""An attached socket's flow follows the CPU its reader runs on
(selftests/zc_follow.sh; docs/driver.md, "Notify queues follow the
application").

    zc_follow.py server ADDR PORT IFACE BYTES CPU...
    zc_follow.py client ADDR PORT BYTES PHASES

The server accepts one connection, pins itself to the first CPU, attaches
the socket with setsockopt(TCP_ULP, "zeronic") (served by TCP) and reads
BYTES per phase, one phase per CPU given, pinning itself to that CPU when
the phase's first data is on its way. The client sends 1 MiB chunks, each
once the server read the one before.
Every byte is checked against the stream's pattern. After each phase it
prints

    [COUNTER=DELTA ...] phase N cpu C rx Q0 Q1 ... ofo K

the growth over the phase of a few of IFACE's counters that explain a gap
TCP may see, of its per-queue rxQ_packets (ethtool -S) and of
TcpExtTCPOFOQueue (the packets TCP had to queue out of order, in its
namespace), then sends one byte so that the client starts the next phase.
It prints "ok" at the end if every byte matched. The client sends BYTES per
phase, in chunks, and waits for that byte after each phase.
"""
import os
import re
import socket
import subprocess
import sys

TCP_ULP = 31
# The stream: byte i is PATTERN[i % P]; P is prime so that no read size
# lines up with it.
P = 65521
# Sent in chunks, each read before the next goes: never more in flight
# than the attached socket's ring holds (4 MiB by default, ring_kib), so
# the NIC places every frame and none takes the normal path
# (hw_rx_fallback), which TCP would get after the receipts of later ones
# in the same poll and count as out of order.
CHUNK = 1 << 20
PATTERN = bytes((i * 131 + (i >> 8)) & 0xFF for i in range(P)) * 2


def expected(off, n):
    """The pattern's n bytes from stream offset off (n <= P)."""
    s = off % P
    return PATTERN[s:s + n]


def port_stats(iface):
    """IFACE's per-queue rxQ_packets, and its other counters by name."""
    out = subprocess.run(["ethtool", "-S", iface], check=True,
                         capture_output=True, text=True).stdout
    q, named = {}, {}
    for m in re.finditer(r"^\s*(\w+):\s*(\d+)", out, re.M):
        named[m.group(1)] = int(m.group(2))
        k = re.fullmatch(r"rx(\d+)_packets", m.group(1))
        if k:
            q[int(k.group(1))] = int(m.group(2))
    return [q[k] for k in sorted(q)], named


def ofo_queued():
    with open("/proc/net/netstat") as f:
        lines = f.read().splitlines()
    for names, values in zip(lines, lines[1:]):
        if names.startswith("TcpExt:") and values.startswith("TcpExt:"):
            d = dict(zip(names.split()[1:], values.split()[1:]))
            return int(d["TCPOFOQueue"])
    raise RuntimeError("no TcpExt in /proc/net/netstat")


def server(addr, port, iface, nbytes, cpus):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(1)
    print("listening", flush=True)
    c, _ = ls.accept()
    os.sched_setaffinity(0, {cpus[0]})
    c.setsockopt(socket.SOL_TCP, TCP_ULP, b"zeronic")
    print("attached", c.getsockopt(socket.SOL_TCP, TCP_ULP, 16).rstrip(b"\0").decode(),
          flush=True)
    buf = bytearray(1 << 16)
    off = 0
    good = True
    (q0, n0), o0 = port_stats(iface), ofo_queued()
    c.sendall(b"g")
    for n, cpu in enumerate(cpus):
        # The client's first chunk of the phase is on its way: the flow
        # moves at the first read, with data in flight.
        os.sched_setaffinity(0, {cpu})
        end = off + nbytes
        while off < end:
            got = c.recv_into(buf, min(len(buf), end - off, P, CHUNK - off % CHUNK))
            if got == 0:
                print("EOF at", off, flush=True)
                return 1
            if buf[:got] != expected(off, got):
                if good:
                    print("mismatch in", off, "..", off + got, flush=True)
                good = False
            off += got
            if off % CHUNK == 0 and off < end:
                c.sendall(b"c")
        (q1, n1), o1 = port_stats(iface), ofo_queued()
        rx = " ".join(str(b - a) for a, b in zip(q0, q1))
        # Why TCP might see a gap: header entries the NIC dropped for a
        # full header queue, frames it sent the normal way.
        why = " ".join(f"{k}={n1.get(k, 0) - n0.get(k, 0)}"
                       for k in ("hw_rx_hdrq_full", "hw_rx_fallback", "hw_rx_ooo_frames",
                                 "hw_rx_dup_frames"))
        print(f"{why} phase {n} cpu {cpu} rx {rx} ofo {o1 - o0}", flush=True)
        (q0, n0), o0 = (q1, n1), o1
        c.sendall(b"k")
    c.close()
    print("ok" if good else "data differed", flush=True)
    return 0 if good else 1


def client(addr, port, nbytes, phases):
    s = socket.create_connection((addr, port))
    if s.recv(1) != b"g":
        print("no go-ahead from the server", flush=True)
        return 1
    off = 0
    for _ in range(phases):
        end = off + nbytes
        while off < end:
            n = min(P, end - off, CHUNK - off % CHUNK)
            s.sendall(expected(off, n))
            off += n
            if off % CHUNK == 0 and off < end and s.recv(1) != b"c":
                print("no go-ahead from the server", flush=True)
                return 1
        if s.recv(1) != b"k":
            print("no go-ahead from the server", flush=True)
            return 1
    s.close()
    return 0


def main():
    if sys.argv[1] == "server":
        return server(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]),
                      [int(c) for c in sys.argv[6:]])
    return client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))


if __name__ == "__main__":
    sys.exit(main())
