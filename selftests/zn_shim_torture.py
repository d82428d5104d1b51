#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Socket semantics over the LD_PRELOAD shim (selftests/zn_shim.sh).

    zn_shim_torture.py server ADDR PORT
    zn_shim_torture.py client ADDR PORT [WORD]

Both ends run under the shim. The server accepts connections and serves
one command per connection (the first line the client sends); the client
runs the cases (those whose name contains WORD, if given) and prints one
"ok NAME" or "not ok NAME: why" per case, exiting 1 if any failed. Python's socket module calls the libc functions
the shim wraps (recv, send, poll, select, epoll, dup, fcntl, ...).
"""
import errno
import fcntl
import os
import select
import signal
import socket
import struct
import sys
import threading
import time

PAYLOAD = bytes(range(256)) * 512  # 128 KiB


def pattern(r):
    """192 KiB no connection but the pool case's round r sends (period 251,
    so no stretch of it equals PAYLOAD's)."""
    return (bytes(range(251)) * 800)[r:r + (192 << 10)]


def handle(c):
    f = b""
    while not f.endswith(b"\n"):
        d = c.recv(1)
        if not d:
            break
        f += d
    cmd = f.strip().decode()
    if cmd == "quit":
        # A normal exit (the shim's exit report), from the main thread.
        c.close()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        return
    if cmd == "echo":
        # Echo until EOF, then say how much, then close.
        n = 0
        while True:
            d = c.recv(65536)
            if not d:
                break
            n += len(d)
            c.sendall(d)
        c.sendall(b"total %d\n" % n)
    elif cmd == "send":
        c.sendall(PAYLOAD)
    elif cmd == "late":
        time.sleep(1.0)
        c.sendall(b"late\n")
    elif cmd == "edges":
        # Two arrivals far apart, then the FIN after another pause: an
        # edge-triggered reader sees exactly one edge per arrival (Linux
        # also reports the FIN's arrival as an edge, so it must not fall
        # into a window where the test expects none).
        time.sleep(1.0)
        c.sendall(b"late\n")
        time.sleep(1.5)
        c.sendall(b"more\n")
        time.sleep(1.5)
    elif cmd == "flood":
        # Send until the client goes away (it closes with bytes unread:
        # a reset).
        try:
            while True:
                c.sendall(PAYLOAD)
        except OSError:
            pass
    elif cmd.startswith("pattern "):
        c.sendall(pattern(int(cmd.split()[1])))
    elif cmd == "short":
        c.sendall(b"short\n")
    elif cmd == "reset":
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    elif cmd == "hold":
        time.sleep(3)
    c.close()


def serve(addr, port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(16)
    # "quit" interrupts the main thread from the handler's thread, which
    # may run before the main thread's Thread.start() has returned: the
    # interrupt may land anywhere in the loop, not only in accept().
    try:
        while True:
            c, _ = ls.accept()

            def run(c=c):
                try:
                    handle(c)
                except OSError as e:
                    print("server: %r" % e, flush=True)

            threading.Thread(target=run, daemon=True).start()
    except KeyboardInterrupt:
        return


failed = 0


def case(name, fn):
    global failed
    try:
        fn()
        print("ok", name, flush=True)
    except Exception as e:  # noqa: BLE001 - report any failure
        failed += 1
        print("not ok %s: %r" % (name, e), flush=True)


def conn(addr, port, cmd):
    s = socket.create_connection((addr, port))
    s.sendall(cmd.encode() + b"\n")
    return s


def recv_all(s, n):
    b = b""
    while len(b) < n:
        d = s.recv(n - len(b))
        if not d:
            break
        b += d
    return b


def client(addr, port, only=None):
    def dup_family():
        s = conn(addr, port, "echo")
        d1 = os.dup(s.fileno())
        d2 = fcntl.fcntl(s.fileno(), fcntl.F_DUPFD, 100)
        os.write(d1, b"abc")
        assert os.read(s.fileno(), 3) == b"abc"
        os.write(d2, b"def")
        assert s.recv(3) == b"def"
        d3 = os.dup2(d1, 200)
        os.close(d1)
        os.close(d2)
        os.write(d3, b"ghi")  # still the same connection
        assert os.read(d3, 3) == b"ghi"
        os.close(d3)
        s.sendall(b"jkl")
        assert s.recv(3) == b"jkl"
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s, 64).startswith(b"total 12")
        s.close()

    def bulk_and_eof():
        s = conn(addr, port, "send")
        b = recv_all(s, len(PAYLOAD) + 1)
        assert b == PAYLOAD, "payload differs (%d bytes)" % len(b)
        assert s.recv(10) == b"", "no EOF"
        assert s.recv(10) == b"", "EOF not repeated"
        s.close()

    def half_close():
        s = conn(addr, port, "echo")
        s.sendall(PAYLOAD)
        s.shutdown(socket.SHUT_WR)
        b = recv_all(s, len(PAYLOAD) + 100)
        assert b.startswith(PAYLOAD) and b[len(PAYLOAD):].startswith(b"total %d" % len(PAYLOAD)), b[-40:]
        s.close()

    def nonblocking():
        s = conn(addr, port, "late")
        s.setblocking(False)
        try:
            s.recv(10)
            raise AssertionError("recv did not fail with EAGAIN")
        except BlockingIOError:
            pass
        # FIONBIO back to blocking through ioctl.
        fcntl.ioctl(s.fileno(), 0x5421, struct.pack("i", 0))  # FIONBIO
        assert recv_all(s, 5) == b"late\n"
        s.close()

    def readiness_select_poll():
        s = conn(addr, port, "late")
        r, _, _ = select.select([s], [], [], 0.1)
        assert not r, "readable before data"
        _, w, _ = select.select([], [s], [], 1)
        assert w, "not writable"
        r, _, _ = select.select([s], [], [], 10)
        assert r, "not readable after data"
        p = select.poll()
        p.register(s, select.POLLIN)
        ev = p.poll(1000)
        assert ev and ev[0][1] & select.POLLIN
        assert s.recv(5) == b"late\n"
        # EOF is readable too.
        ev = p.poll(5000)
        assert ev and ev[0][1] & select.POLLIN, ev
        assert s.recv(5) == b""
        s.close()

    def readiness_epoll():
        s = conn(addr, port, "edges")
        ep = select.epoll()
        ep.register(s.fileno(), select.EPOLLIN | select.EPOLLET)
        assert ep.poll(0.1) == [], "readable before data"
        ev = ep.poll(10)
        assert ev and ev[0][0] == s.fileno() and ev[0][1] & select.EPOLLIN, ev
        # Edge-triggered: no second report without new data, also after a
        # partial read that leaves bytes unread.
        assert ep.poll(0.2) == [], "edge reported twice"
        assert s.recv(2) == b"la"
        assert ep.poll(0.2) == [], "edge reported after a partial read"
        # New bytes are a new edge although unread bytes were waiting.
        ev = ep.poll(10)
        assert ev and ev[0][1] & select.EPOLLIN, "no edge for new data"
        assert ep.poll(0.2) == [], "second edge reported twice"
        ep.modify(s.fileno(), select.EPOLLIN | select.EPOLLONESHOT)
        ev = ep.poll(1)
        assert ev and ev[0][1] & select.EPOLLIN, "level report after MOD"
        assert ep.poll(0.2) == [], "one-shot reported twice"
        ep.modify(s.fileno(), select.EPOLLIN)
        assert ep.poll(1), "not re-armed by MOD"
        assert recv_all(s, 8) == b"te\nmore\n"
        # Level-triggered with nothing to read: quiet.
        assert ep.poll(0.2) == [], "level-triggered report with nothing to read"
        # Nested: the epoll fd in poll().
        ep2 = select.epoll()
        ep2.register(s.fileno(), select.EPOLLIN)
        p = select.poll()
        p.register(ep2.fileno(), select.POLLIN)
        assert p.poll(5000), "nested epoll fd not readable at EOF"
        assert s.recv(5) == b""
        ep.close()
        ep2.close()
        s.close()

    def reset():
        s = conn(addr, port, "reset")
        try:
            while s.recv(10):
                pass
            raise AssertionError("no ECONNRESET")
        except ConnectionResetError:
            pass
        s.close()

    def eintr():
        s = conn(addr, port, "hold")

        class Alarm(Exception):
            pass

        def on_alarm(*_):
            raise Alarm()

        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        try:
            s.recv(10)
            raise AssertionError("recv not interrupted")
        except Alarm:
            pass
        finally:
            signal.signal(signal.SIGALRM, old)
        s.close()

    def reuse():
        # Connection after connection, each closed with its peer still
        # sending into it: the next one sees only its own bytes (each
        # attach gets a fresh, zeroed ring; the old one goes back only once
        # the NIC confirmed it stopped placing).
        for r in range(3):
            a = conn(addr, port, "flood")
            got = recv_all(a, 65536)
            assert got == PAYLOAD[:65536], "flood: first bytes differ"
            a.close()
            b = conn(addr, port, "pattern %d" % r)
            want = pattern(r)
            got = recv_all(b, len(want) + 1)
            assert len(got) == len(want), "round %d: %d bytes, not %d" % (r, len(got), len(want))
            assert got == want, "round %d: bytes differ from offset %d" % (
                r, next(i for i in range(len(want)) if got[i] != want[i]))
            b.close()
        cs = [conn(addr, port, "short") for _ in range(6)]
        for c in cs:
            assert recv_all(c, 7) == b"short\n"
        for c in cs:
            c.close()

    def fork_child_uses_inherited():
        s = conn(addr, port, "echo")
        pid = os.fork()
        if pid == 0:
            rc = 0
            # The inherited socket is the same socket: the child talks
            # over it, then a new connection of its own.
            try:
                s.sendall(b"child")
                if recv_all(s, 5) != b"child":
                    rc = 2
                s.close()
                c = conn(addr, port, "echo")
                c.sendall(b"own")
                if recv_all(c, 3) != b"own":
                    rc = 4
                c.close()
            except OSError:
                rc = 5
            os._exit(rc)
        _, st = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(st) == 0, "child status %d" % os.WEXITSTATUS(st)
        # The parent's copy survived the child's close.
        s.sendall(b"parent")
        assert recv_all(s, 6) == b"parent"
        s.close()

    def scm_rights():
        a, b = socket.socketpair()
        s = conn(addr, port, "echo")
        socket.send_fds(a, [b"x"], [s.fileno()])
        msg, fds, _, _ = socket.recv_fds(b, 10, 1)
        assert msg == b"x" and len(fds) == 1
        # The passed fd is the same socket: it sends, the original reads.
        os.write(fds[0], b"z")
        assert recv_all(s, 1) == b"z"
        os.close(fds[0])
        s.sendall(b"still")
        assert recv_all(s, 5) == b"still"
        s.close()
        a.close()
        b.close()

    def nonblocking_connect():
        # Attached at its first data call once established (the shim's
        # attached_late, which zn_shim.sh checks).
        s = socket.socket()
        s.setblocking(False)
        assert s.connect_ex((addr, port)) in (errno.EINPROGRESS, 0)
        _, w, _ = select.select([], [s], [], 10)
        assert w, "connect did not complete"
        assert s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        s.setblocking(True)
        s.sendall(b"echo\n")
        s.sendall(b"late-attach")
        assert recv_all(s, 11) == b"late-attach"
        s.close()

    for n, f in [
        ("dup, dup2, F_DUPFD, close of one copy", dup_family),
        ("128 KiB, then EOF, twice", bulk_and_eof),
        ("shutdown(SHUT_WR) half-close, reply after it", half_close),
        ("O_NONBLOCK: EAGAIN, then FIONBIO back to blocking", nonblocking),
        ("select and poll readiness (data, writable, EOF)", readiness_select_poll),
        ("epoll: EPOLLET, EPOLLONESHOT, MOD, nested in poll", readiness_epoll),
        ("ECONNRESET from the peer's RST", reset),
        ("a signal interrupts a blocked recv", eintr),
        ("one connection after another: no old bytes, also after a reset", reuse),
        ("fork: the child uses the inherited socket, then its own; parent unaffected", fork_child_uses_inherited),
        ("SCM_RIGHTS: the passed fd is the same socket", scm_rights),
        ("non-blocking connect: attached at its first data call", nonblocking_connect),
    ]:
        if only is None or only in n:
            case(n, f)
    conn(addr, port, "quit").close()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    role, a, p = sys.argv[1], sys.argv[2], int(sys.argv[3])
    serve(a, p) if role == "server" else client(a, p, *sys.argv[4:5])
