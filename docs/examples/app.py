"""The Python example of README.md and docs/guide/python.md: a request handler
that waits, so `argstash bt --pid PID --python` finds it on the stack.

    python3 app.py &     # a copy of docs/examples/app.py
    argstash bt --pid $! --python
"""
import os
import sys
import time


def wait_for_io(fd, timeout):
    print("ready", os.getpid(), flush=True)
    while True:
        time.sleep(timeout)


def handle(user, count, verbose):
    return wait_for_io(3, 0.5)


if __name__ == "__main__":
    handle("alice", 42, True)
    sys.exit(0)
