#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Connections of a namespace with net.ipv4.tcp_auto_ulp set
(selftests/auto_ulp.sh): no setsockopt(TCP_ULP) anywhere in this program.

    auto_ulp.py server ADDR PORT N
    auto_ulp.py client ADDR PORT MODE BYTES

The server accepts N connections; on each it prints "accepted ULP" (the
socket's TCP_ULP, "-" for none), then echoes what it reads until EOF. The
client connects (MODE: "blocking", "nonblock-reconnect": non-blocking,
then connect() again once writable, as hiredis does, or "nonblock": no
second connect), prints "connected ULP", sends BYTES random bytes while
reading the echo, and prints "echo ok" if every byte came back in order.
"""
import errno
import os
import select
import socket
import sys
import threading

TCP_ULP = 31


def ulp(s):
    name = s.getsockopt(socket.SOL_TCP, TCP_ULP, 16).rstrip(b"\0").decode()
    return name or "-"


def server(addr, port, n):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(8)
    print("listening", flush=True)
    for _ in range(n):
        c, _ = ls.accept()
        print("accepted", ulp(c), flush=True)
        while True:
            d = c.recv(1 << 16)
            if not d:
                break
            c.sendall(d)
        c.close()


def client(addr, port, mode, nbytes):
    s = socket.socket()
    if mode == "blocking":
        s.connect((addr, port))
    else:
        s.setblocking(False)
        assert s.connect_ex((addr, port)) in (0, errno.EINPROGRESS)
        _, w, _ = select.select([], [s], [], 10)
        assert w, "connect did not complete"
        assert s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        if mode == "nonblock-reconnect":
            assert s.connect_ex((addr, port)) == 0
        s.setblocking(True)
    print("connected", ulp(s), flush=True)
    data = os.urandom(nbytes)
    got = bytearray()

    def rd():
        while len(got) < nbytes:
            d = s.recv(1 << 16)
            if not d:
                break
            got.extend(d)

    t = threading.Thread(target=rd)
    t.start()
    s.sendall(data)
    t.join()
    s.close()
    print("echo ok" if bytes(got) == data else "echo differs: %d of %d bytes" % (len(got), nbytes), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        client(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
