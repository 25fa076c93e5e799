"""bench/buffering.sh's clients: SLOW readers each ask for PATH and read 1 KB a second (a
small receive buffer, so the kernel holds little for them), while one normal client asks for
/small RATE times a second for SECONDS; prints "p50_ms p99_ms errors requests" of the normal
client. Every socket is closed at the end.
    python3 slow_clients.py PORT SLOW PATH RATE SECONDS"""
import socket
import sys
import threading
import time

port, slow, path, rate, seconds = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                   float(sys.argv[4]), float(sys.argv[5]))
stop = threading.Event()


def slow_reader():
    try:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
        while not stop.wait(1.0):
            if not s.recv(1024):
                break
        s.close()
    except OSError:
        pass


readers = [threading.Thread(target=slow_reader, daemon=True) for _ in range(slow)]
for r in readers:
    r.start()
time.sleep(2)  # the slow readers' requests are in before the measure starts
waits, errors = [], 0
start = time.monotonic()
n = int(rate * seconds)
for i in range(n):
    due = start + i / rate
    time.sleep(max(0.0, due - time.monotonic()))
    t = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"GET /small HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
            got = b""
            while True:
                piece = c.recv(4096)
                if not piece:
                    break
                got += piece
        if not got.startswith(b"HTTP/1.1 200"):
            errors += 1
    except OSError:
        errors += 1
    waits.append((time.monotonic() - t) * 1000)
stop.set()
waits.sort()
print(f"{waits[len(waits) // 2]:.1f} {waits[int(len(waits) * 0.99) - 1]:.1f} {errors} {n}")
