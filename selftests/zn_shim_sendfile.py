#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""sendfile() over the LD_PRELOAD shim (selftests/zn_shim.sh).

    zn_shim_sendfile.py server ADDR PORT
    zn_shim_sendfile.py client ADDR PORT FILE

The server accepts one connection, reads it to EOF and prints "received N
SHA256". The client sends FILE through libc's sendfile() (through ctypes,
so the shim's sendfile gets a pointer it can update, as C programs pass
it) in the ways its semantics differ, checks each return value, *offset
and the file position, and prints "sent N SHA256" of the bytes the server
must have received:

 1. with an offset pointer from offset 1000 (not page aligned), in counts
    of 777777 bytes (crossing the shim's 2 MiB file windows at odd
    places): each call returns what it sent, *offset advances by it, the
    file position stays 0;
 2. from the file position (a null offset) at 5, with a count beyond the
    end: all the rest in one call or several, the position at the end;
    then EOF: 0;
 3. an offset beyond the end and a count of 0: both 0, nothing sent;
 4. the socket non-blocking, the whole file from offset 0: partial sends
    and EAGAIN (waiting in poll for POLLOUT) until all of it went.
"""
import ctypes
import hashlib
import os
import select
import socket
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.sendfile.restype = ctypes.c_ssize_t
libc.sendfile.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_long), ctypes.c_size_t]


def sendfile(out, fd, off, count):
    """libc sendfile; off: a ctypes c_long (updated) or None."""
    r = libc.sendfile(out, fd, ctypes.byref(off) if off is not None else None, count)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def server(addr, port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(1)
    c, _ = ls.accept()
    h = hashlib.sha256()
    n = 0
    while True:
        d = c.recv(1 << 20)
        if not d:
            break
        h.update(d)
        n += len(d)
    print("received %d %s" % (n, h.hexdigest()), flush=True)


def client(addr, port, path):
    data = open(path, "rb").read()
    size = len(data)
    fd = os.open(path, os.O_RDONLY)
    s = socket.create_connection((addr, port))
    out = s.fileno()
    h = hashlib.sha256()
    total = 0

    # 1. An offset pointer, not page aligned, odd counts.
    off = ctypes.c_long(1000)
    while off.value < size:
        before = off.value
        k = sendfile(out, fd, off, 777777)
        assert k > 0, "sendfile returned %d at offset %d" % (k, before)
        assert off.value == before + k, "*offset %d after sending %d from %d" % (off.value, k, before)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0, "the file position moved"
    assert off.value == size
    h.update(data[1000:])
    total += size - 1000

    # 2. The file position, a count beyond the end, then EOF.
    os.lseek(fd, 5, os.SEEK_SET)
    while os.lseek(fd, 0, os.SEEK_CUR) < size:
        pos = os.lseek(fd, 0, os.SEEK_CUR)
        k = sendfile(out, fd, None, size * 2)
        assert k > 0 and os.lseek(fd, 0, os.SEEK_CUR) == pos + k, "position %d after %d from %d" % (
            os.lseek(fd, 0, os.SEEK_CUR), k, pos)
    assert sendfile(out, fd, None, 4096) == 0, "no EOF at the end of the file"
    h.update(data[5:])
    total += size - 5

    # 3. Beyond the end, and nothing asked.
    off = ctypes.c_long(size + 100)
    assert sendfile(out, fd, off, 4096) == 0 and off.value == size + 100
    off = ctypes.c_long(0)
    assert sendfile(out, fd, off, 0) == 0 and off.value == 0

    # 4. Non-blocking: partial sends and EAGAIN.
    s.setblocking(False)
    off = ctypes.c_long(0)
    eagain = 0
    p = select.poll()
    p.register(out, select.POLLOUT)
    partial = 0
    while off.value < size:
        try:
            want = size - off.value
            if sendfile(out, fd, off, want) < want:
                partial += 1
        except BlockingIOError:
            eagain += 1
            assert p.poll(10000), "not writable for 10 s"
    s.setblocking(True)
    h.update(data)
    total += size

    s.shutdown(socket.SHUT_WR)
    s.close()
    print("sent %d %s (non-blocking: %d partial sends, EAGAIN %d times)" % (total, h.hexdigest(), partial, eagain), flush=True)


if __name__ == "__main__":
    role, a, p = sys.argv[1], sys.argv[2], int(sys.argv[3])
    server(a, p) if role == "server" else client(a, p, sys.argv[4])
