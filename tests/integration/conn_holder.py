"""Raw connections to a daemon's unix socket, and whether it closes them.

As a program (run as another user by the tests): `conn_holder.py SOCKET N`
opens N connections and prints "held"; on a line on stdin it opens 2 more
and prints, as JSON, whether the daemon closed each at once; it exits on
the next line.
"""
import json
import socket
import sys
import time


def raw_connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def closed_by_peer(s, timeout):
    """True when the daemon ends the connection within timeout (whatever
    it sent first, e.g. its HTTP/2 settings)."""
    s.settimeout(timeout)
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            if s.recv(65536) == b"":
                return True
    except socket.timeout:
        return False
    except OSError:
        return True
    return False


def main():
    held = [raw_connect(sys.argv[1]) for _ in range(int(sys.argv[2]))]
    print("held", flush=True)
    sys.stdin.readline()
    over = [raw_connect(sys.argv[1]) for _ in range(2)]
    print(json.dumps([closed_by_peer(s, 10.0) for s in over]), flush=True)
    sys.stdin.readline()
    del held


if __name__ == "__main__":
    main()
