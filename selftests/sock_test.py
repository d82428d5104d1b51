#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Cases of selftests/sock_test.sh: sock_test.py CASE... runs the cases given
(all of them without arguments) in this one process, and prints per case its
"# " notes, then "PASS name" or "FAIL name" (after "# " lines saying why).

Each case makes its own loopback TCP connections and drives the test module
(/dev/zn_sock_test, selftests/sock_test/zn_sock_test.rs) with ioctls that act
on a socket of this process by file descriptor. Exits 0 on success; prints
what went wrong otherwise.
"""

import ctypes
import errno
import fcntl
import mmap
import os
import random
import select
import signal
import socket
import struct
import sys
import time

DEV = "/dev/zn_sock_test"
ULP = b"zn_sock_test"
SOL_TCP = 6
TCP_ULP = 31
TCP_ZEROCOPY_RECEIVE = 35
MODE_CONSUME = 1

ARG = struct.Struct("=iIQQ32Q")


def _iowr(nr):
    return (3 << 30) | (ARG.size << 16) | (ord("Z") << 8) | nr


IOC_INFO, IOC_ATTACH, IOC_READ, IOC_PEEK, IOC_SEND, IOC_STATS, IOC_SETSOCKOPT, IOC_HOLD = (
    _iowr(0x40 + i) for i in range(8))

STATE = {1: "ESTABLISHED", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 6: "TIME_WAIT", 7: "CLOSE",
         8: "CLOSE_WAIT", 9: "LAST_ACK", 11: "CLOSING"}


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


_dev = None


def ioc(cmd, fd=-1, mode=0, addr=0, length=0):
    """Returns the 32 output words; raises OSError with the ioctl's errno."""
    global _dev
    if _dev is None:
        _dev = os.open(DEV, os.O_RDWR)
    buf = bytearray(ARG.pack(fd, mode, addr, length, *([0] * 32)))
    fcntl.ioctl(_dev, cmd, buf)
    return ARG.unpack(buf)[4:]


def errno_of(fn, *args):
    try:
        fn(*args)
    except OSError as e:
        return e.errno
    return 0


def expect_errno(want, what, fn, *args):
    got = errno_of(fn, *args)
    check(got == want, f"{what}: errno {errno.errorcode.get(got, got)}, want "
          f"{errno.errorcode.get(want, want)}")


def pair(family=socket.AF_INET, addr="127.0.0.1"):
    """A connected (client, server) pair over loopback."""
    ls = socket.socket(family, socket.SOCK_STREAM)
    ls.bind((addr, 0))
    ls.listen(1)
    c = socket.socket(family, socket.SOCK_STREAM)
    c.connect(ls.getsockname()[:2])
    s, _ = ls.accept()
    ls.close()
    return c, s


def fnv(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return h


def info(sock):
    o = ioc(IOC_INFO, sock.fileno())
    return {
        "state": o[0], "saddr": o[1], "sport": o[2], "daddr": o[3], "dport": o[4],
        "bound": o[5], "route": o[6] if o[6] < 1 << 63 else o[6] - (1 << 64),
        "rcv_nxt": o[7], "copied_seq": o[8], "snd_una": o[9], "snd_nxt": o[10],
        "write_seq": o[11], "err": o[12], "shutdown": o[13], "ulp": o[14],
        "user_data": o[15], "md5": o[16], "repair": o[17], "attached": o[18],
        "bh": o[19], "owned": o[20], "process": o[21], "hash": o[22], "data_ready": o[23],
        "family": o[24], "snd_una_lockless": o[25], "state_changes": o[26],
        "last_state": o[27],
    }


STATS = ["inits", "releases", "closes", "completions", "acked", "early", "zerocopy",
         "copied", "completed_bytes", "piece_errors", "page_pieces", "linear_pieces",
         "state_changes", "write_spaces"]


def stats():
    return dict(zip(STATS, ioc(IOC_STATS)))


def wait_for(what, pred, secs=10):
    end = time.time() + secs
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise Fail(f"timed out waiting for {what}")


def consumed(i):
    return i["bh"] + i["owned"] + i["process"]


def payload(n, seed):
    return random.Random(seed).randbytes(n)


def ip32(a):
    return struct.unpack("!I", socket.inet_aton(a))[0]


# ---------------------------------------------------------------------------

def case_info():
    """The locked-socket getters agree with what user space sees."""
    c, s = pair()
    i = info(c)
    check(i["state"] == 1, f"state {i['state']}")
    check(i["family"] == socket.AF_INET, f"family {i['family']}")
    laddr, lport = c.getsockname()
    raddr, rport = c.getpeername()
    check((i["saddr"], i["sport"]) == (ip32(laddr), lport), f"local {i}")
    check((i["daddr"], i["dport"]) == (ip32(raddr), rport), f"remote {i}")
    check(i["route"] == socket.if_nametoindex("lo"), f"route ifindex {i['route']}")
    check(i["bound"] == 0, f"bound {i['bound']}")
    for k in ("ulp", "user_data", "md5", "repair", "attached", "err", "shutdown"):
        check(i[k] == 0, f"{k} = {i[k]}")
    check(i["snd_una"] == i["snd_nxt"] == i["write_seq"] == i["snd_una_lockless"],
          f"send sequence {i}")
    data = payload(3000, 1)
    s.sendall(data)
    wait_for("data queued", lambda: (info(c)["rcv_nxt"] - i["rcv_nxt"]) % 2**32 == 3000)
    j = info(c)
    check(j["copied_seq"] == i["copied_seq"], "copied_seq moved before reading")
    got = b""
    while len(got) < 3000:
        got += c.recv(3000)
    check(got == data, "recv() data")
    j = info(c)
    check(j["copied_seq"] == j["rcv_nxt"], f"copied_seq {j['copied_seq']} rcv_nxt {j['rcv_nxt']}")
    k = info(s)
    wait_for("ack", lambda: info(s)["snd_una"] == k["snd_nxt"])
    check((k["write_seq"] - i["rcv_nxt"]) % 2**32 == 3000, "peer write_seq")
    c.shutdown(socket.SHUT_WR)
    wait_for("peer sees FIN", lambda: info(s)["state"] == 8)
    check(info(s)["shutdown"] & 1, "RCV_SHUTDOWN after FIN")
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    expect_errno(errno.EPROTONOSUPPORT, "info on UDP", ioc, IOC_INFO, u.fileno())
    r, w = os.pipe()
    expect_errno(errno.ENOTSOCK, "info on a pipe", ioc, IOC_INFO, r)
    expect_errno(errno.EBADF, "info on a closed fd", ioc, IOC_INFO, 1000)
    # Kernel setsockopt through sock->ops with a kernel pointer.
    ioc(IOC_SETSOCKOPT, c.fileno(), mode=(socket.SOL_SOCKET << 16) | socket.SO_RCVBUF,
        length=65536)
    check(c.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == 131072, "SO_RCVBUF")
    ioc(IOC_SETSOCKOPT, c.fileno(), mode=(SOL_TCP << 16) | socket.TCP_WINDOW_CLAMP,
        length=40000)
    check(c.getsockopt(SOL_TCP, socket.TCP_WINDOW_CLAMP) == 40000, "TCP_WINDOW_CLAMP")
    for f in (c, s, u):
        f.close()
    os.close(r)
    os.close(w)


def case_attach_errors():
    """Attaching refuses what it must, and only the module can attach."""
    c, s = pair()
    expect_errno(errno.EPERM, "setsockopt(TCP_ULP) by a process",
                 c.setsockopt, SOL_TCP, TCP_ULP, ULP)
    check(info(c)["ulp"] == 0, "ULP set after a refused setsockopt")
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    expect_errno(errno.EPROTONOSUPPORT, "attach UDP", ioc, IOC_ATTACH, u.fileno())
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    expect_errno(errno.ENOTCONN, "attach a listener", ioc, IOC_ATTACH, ls.fileno())
    n = socket.socket()
    expect_errno(errno.ENOTCONN, "attach an unconnected socket", ioc, IOC_ATTACH, n.fileno())
    # IPv6 sockets get the IPv6 copies of TCP's tables (patch 0045): data
    # arriving on one reaches the ULP, and closing it puts TCP's back.
    c6, s6 = pair(socket.AF_INET6, "::1")
    ioc(IOC_ATTACH, c6.fileno(), mode=MODE_CONSUME)
    check(info(c6)["ulp"] == 1, "IPv6 socket attached")
    s6.sendall(payload(64 * 1024, 6))
    wait_for("IPv6 stream consumed", lambda: consumed(info(c6)) == 64 * 1024)
    c6.close()
    s6.close()
    ioc(IOC_ATTACH, c.fileno())
    check(info(c)["ulp"] == 1 and info(c)["attached"] == 1, "attached")
    expect_errno(errno.EEXIST, "attach twice", ioc, IOC_ATTACH, c.fileno())
    expect_errno(errno.EEXIST, "setsockopt(TCP_ULP) on an attached socket",
                 c.setsockopt, SOL_TCP, TCP_ULP, ULP)
    for f in (c, s, u, ls, n):
        f.close()


def case_callback_consume():
    """data_ready consumes everything, in softirq and in the owner's context, in order."""
    c, s = pair()
    ioc(IOC_ATTACH, c.fileno(), mode=MODE_CONSUME)
    data = payload(256 * 1024, 2)
    half = len(data) // 2
    s.sendall(data[:half])
    wait_for("first half consumed", lambda: consumed(info(c)) == half)
    # Hold the socket lock while the rest arrives: it goes to the backlog, and release_sock()
    # runs data_ready in the owner's context.
    pid = os.fork()
    if pid == 0:
        time.sleep(0.1)
        s.sendall(data[half:])
        os._exit(0)
    ioc(IOC_HOLD, c.fileno(), length=600)
    os.waitpid(pid, 0)
    i = wait_for("all consumed", lambda: (lambda i: i if consumed(i) == len(data) else None)(
        info(c)))
    check(i["hash"] == fnv(data), "hash of consumed bytes differs from what was sent")
    check(i["bh"] > 0, f"nothing consumed in softirq: {i}")
    check(i["owned"] > 0, f"nothing consumed in the owner's context: {i}")
    check(i["process"] == 0, "consumed from process context")
    check(i["copied_seq"] == i["rcv_nxt"], "copied_seq != rcv_nxt")
    expect_errno(errno.EOPNOTSUPP, "recv()", c.recv, 10, socket.MSG_DONTWAIT)
    check(stats()["piece_errors"] == 0, "pieces did not add up")
    print(f"# softirq {i['bh']} B, owner {i['owned']} B, {i['data_ready']} data_ready")
    c.close()
    s.close()


def case_no_steal():
    """Plain reads, splice and friends fail and take nothing; the module reads it all."""
    c, s = pair()
    ioc(IOC_ATTACH, c.fileno(), mode=0)
    data = payload(100 * 1024, 3)
    s.sendall(data)
    wait_for("data queued",
             lambda: (info(c)["rcv_nxt"] - info(c)["copied_seq"]) % 2**32 == len(data))
    expect_errno(errno.EOPNOTSUPP, "recv()", c.recv, 100, socket.MSG_DONTWAIT)
    expect_errno(errno.EOPNOTSUPP, "recv(MSG_PEEK)", c.recv, 100, socket.MSG_PEEK)
    expect_errno(errno.EOPNOTSUPP, "read()", os.read, c.fileno(), 100)
    r, w = os.pipe()
    expect_errno(errno.EOPNOTSUPP, "splice()", os.splice, c.fileno(), w, 100)
    expect_errno(errno.EOPNOTSUPP, "send()", c.send, b"x")
    zc = bytearray(64)
    expect_errno(errno.EOPNOTSUPP, "TCP_ZEROCOPY_RECEIVE",
                 lambda: c.getsockopt(SOL_TCP, TCP_ZEROCOPY_RECEIVE, 64))
    libc = ctypes.CDLL(None, use_errno=True)
    unspec = struct.pack("=H14x", socket.AF_UNSPEC)
    rc = libc.connect(c.fileno(), unspec, len(unspec))
    check(rc == -1 and ctypes.get_errno() == errno.EOPNOTSUPP,
          f"connect(AF_UNSPEC): {rc} errno {ctypes.get_errno()}")
    check(select.select([c], [], [], 0)[0] == [c], "poll() does not see queued data")
    i = info(c)
    check(consumed(i) == 0 and i["copied_seq"] != i["rcv_nxt"], "data was taken")
    # Process context: a partial read_sock (stops early), a peek + read_done, then the rest.
    n1 = ioc(IOC_READ, c.fileno(), length=1000)[0]
    check(n1 == 1000, f"read_sock of 1000 consumed {n1}")
    o = ioc(IOC_PEEK, c.fileno(), length=500)
    check(o[3] == 500 and o[0] >= 500, f"peek: {o[:4]}")
    check(o[1] == (i["copied_seq"] + 1000) % 2**32, "peeked chunk's seq")
    rest = ioc(IOC_READ, c.fileno(), length=1 << 40)[0]
    check(1500 + rest == len(data), f"consumed {1500 + rest} of {len(data)}")
    i = info(c)
    check(i["process"] == len(data), f"process {i['process']}")
    check(i["hash"] == fnv(data), "hash of consumed bytes differs from what was sent")
    check(i["copied_seq"] == i["rcv_nxt"], "copied_seq != rcv_nxt")
    check(ioc(IOC_PEEK, c.fileno(), length=10)[0] == 0, "peek on an empty queue")
    # The peer's FIN: a FIN-only chunk, then state CLOSE_WAIT seen by state_change.
    s.shutdown(socket.SHUT_WR)
    wait_for("FIN", lambda: info(c)["last_state"] == 8)
    o = ioc(IOC_PEEK, c.fileno(), length=10)
    check(o[0] == 0 and o[2] == 1, f"FIN chunk: {o[:4]}")
    for f in (c, s):
        f.close()
    os.close(r)
    os.close(w)


def case_zc_send():
    """Zero-copy sends from pinned user pages complete after the peer's ACK only."""
    c, s = pair()
    ioc(IOC_ATTACH, c.fileno(), mode=MODE_CONSUME)
    before = stats()
    size = 192 * 1024
    m = mmap.mmap(-1, size + 4096)
    data = payload(size, 4)
    m[100:100 + size] = data
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m)) + 100
    got = bytearray()
    sends = queued = 0
    while queued < size:
        try:
            o = ioc(IOC_SEND, c.fileno(), addr=addr + queued, length=min(40000, size - queued))
        except OSError as e:
            check(e.errno == errno.EAGAIN, f"send: {e}")
            o = (0,)
        if o[0]:
            sends += 1
            queued += o[0]
        while True:
            r, _, _ = select.select([s], [], [], 0 if o[0] else 0.05)
            if not r:
                break
            got += s.recv(1 << 20)
    while len(got) < size:
        got += s.recv(1 << 20)
    check(bytes(got) == data, "peer received other bytes than were sent")
    after = wait_for("completions", lambda: (lambda a: a if a["completions"] -
                     before["completions"] == sends else None)(stats()))
    d = {k: after[k] - before[k] for k in STATS}
    check(d["acked"] == sends and d["early"] == 0, f"completed before the ACK: {d}")
    check(d["completed_bytes"] == size, f"completed {d['completed_bytes']} of {size} B")
    i = info(c)
    check(i["snd_una"] == i["write_seq"], "unacknowledged data left")
    print(f"# {sends} sends, zerocopy {d['zerocopy']}, copied {d['copied']}")
    # A send on a socket whose connection was reset fails with the connection's error.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    wait_for("RST", lambda: info(c)["state"] == 7)
    got_err = errno_of(ioc, IOC_SEND, c.fileno(), 0, addr, 4096)
    check(got_err in (errno.EPIPE, errno.ECONNRESET), f"send after RST: {got_err}")
    c.close()
    m.close()


def case_release():
    """Every attached socket is released: close, RST, process exit."""
    before = stats()
    # Close by the application, then the peer.
    c, s = pair()
    ioc(IOC_ATTACH, c.fileno(), mode=MODE_CONSUME)
    c.close()
    s.close()
    # Reset by the peer.
    c, s = pair()
    ioc(IOC_ATTACH, c.fileno(), mode=MODE_CONSUME)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    wait_for("RST seen", lambda: info(c)["last_state"] == 7)
    c.close()
    # Reset by the application.
    c, s = pair()
    ioc(IOC_ATTACH, c.fileno(), mode=MODE_CONSUME)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()
    s.close()
    # The attached socket's process is killed.
    c, s = pair()
    pid = os.fork()
    if pid == 0:
        ioc(IOC_ATTACH, c.fileno(), mode=MODE_CONSUME)
        time.sleep(60)
        os._exit(0)
    c.close()
    wait_for("child attached", lambda: stats()["inits"] - before["inits"] == 4)
    s.sendall(b"x" * 1000)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    s.close()
    after = wait_for("releases", lambda: (lambda a: a if a["releases"] - before["releases"] == 4
                                          else None)(stats()), secs=20)
    check(after["closes"] - before["closes"] == 4, "close callbacks")
    a = stats()
    check(a["inits"] == a["releases"], f"{a['inits']} attached, {a['releases']} released")


def main():
    cases = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}
    names = sys.argv[1:] or list(cases)
    bad = [n for n in names if n not in cases]
    if bad:
        sys.exit(f"unknown case(s) {bad}; have {list(cases)}")
    failed = 0
    for name in names:
        t0 = time.time()
        try:
            cases[name]()
        except (Fail, OSError) as e:
            print(f"# {name}: {e}")
            print(f"FAIL {name}", flush=True)
            failed += 1
            continue
        print(f"# {name}: {time.time() - t0:.1f} s")
        print(f"PASS {name}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
