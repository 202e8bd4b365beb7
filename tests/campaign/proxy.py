"""A loopback TCP proxy the campaign controls, one per (daemon, etcd member).

Modes:
  pass       forward both ways
  drop       close every connection (RST) and close new ones at once
  blackhole  keep every connection open but forward nothing, and accept
             new ones without connecting upstream: calls hang until their
             own deadlines, the way a silent network partition looks
heal() returns to pass (blackholed connections are closed then, as a real
network would have timed them out; new ones forward again).

Everything runs on one selector thread; every socket is non-blocking and
the thread wakes at least every 50 ms, so close() is prompt.
"""

import selectors
import socket
import struct
import threading


class Proxy:
    def __init__(self, target_port, host="127.0.0.1"):
        self.target = (host, target_port)
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((host, 0))
        self.lsock.listen(128)
        self.lsock.setblocking(False)
        self.port = self.lsock.getsockname()[1]
        self.mode = "pass"
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.lsock, selectors.EVENT_READ, None)
        self.peer = {}     # socket -> its other end (None: blackholed, no upstream)
        self.pending = {}  # socket -> bytes waiting to be written to it
        self.lock = threading.Lock()
        self.closed = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    # ---- control (any thread) -------------------------------------------
    def set_mode(self, mode):
        assert mode in ("pass", "drop", "blackhole")
        with self.lock:
            old, self.mode = self.mode, mode
            if mode == "drop" or (mode == "pass" and old == "blackhole"):
                self._close_all(rst=(mode == "drop"))

    def heal(self):
        self.set_mode("pass")

    def close(self):
        with self.lock:
            self.closed = True
        self.thread.join(timeout=2)

    # ---- loop -----------------------------------------------------------
    def _close(self, s, rst=False):
        if s not in self.peer:
            return
        other = self.peer.pop(s)
        self.pending.pop(s, None)
        try:
            self.sel.unregister(s)
        except (KeyError, ValueError):
            pass
        if rst:
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        s.close()
        if other is not None:
            self._close(other, rst)

    def _close_all(self, rst=False):
        for s in list(self.peer):
            self._close(s, rst)

    def _events(self, s):
        ev = selectors.EVENT_READ
        if self.pending.get(s):
            ev |= selectors.EVENT_WRITE
        try:
            self.sel.modify(s, ev, None)
        except (KeyError, ValueError):
            pass

    def _accept(self):
        try:
            c, _ = self.lsock.accept()
        except OSError:
            return
        if self.mode == "drop":
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()
            return
        c.setblocking(False)
        if self.mode == "blackhole":
            self.peer[c] = None
            self.sel.register(c, selectors.EVENT_READ, None)
            return
        u = socket.socket()
        u.setblocking(False)
        try:
            u.connect(self.target)
        except BlockingIOError:
            pass
        except OSError:
            c.close()
            u.close()
            return
        self.peer[c], self.peer[u] = u, c
        self.sel.register(c, selectors.EVENT_READ, None)
        self.sel.register(u, selectors.EVENT_READ | selectors.EVENT_WRITE, None)

    def _run(self):
        while True:
            with self.lock:
                if self.closed:
                    self._close_all()
                    self.sel.close()
                    self.lsock.close()
                    return
            for key, ev in self.sel.select(timeout=0.05):
                with self.lock:
                    s = key.fileobj
                    if s is self.lsock:
                        self._accept()
                        continue
                    if s not in self.peer:
                        continue
                    other = self.peer[s]
                    if ev & selectors.EVENT_WRITE:
                        buf = self.pending.get(s, b"")
                        if buf:
                            try:
                                n = s.send(buf)
                                self.pending[s] = buf[n:]
                            except (BlockingIOError, InterruptedError):
                                pass
                            except OSError:
                                self._close(s)
                                continue
                        else:
                            # connect finished (or failed)
                            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                                self._close(s)
                                continue
                        self._events(s)
                    if ev & selectors.EVENT_READ:
                        try:
                            data = s.recv(65536)
                        except (BlockingIOError, InterruptedError):
                            continue
                        except OSError:
                            data = b""
                        if not data:
                            self._close(s)
                            continue
                        if self.mode != "pass" or other is None:
                            continue  # blackholed: swallowed
                        self.pending[other] = self.pending.get(other, b"") + data
                        self._events(other)
