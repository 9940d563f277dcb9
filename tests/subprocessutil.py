"""Helpers for the subprocess tests: a child interpreter's argument list, this process's
children and descriptors from /proc, and a protocol that records its callbacks."""

import asyncio
import os
import subprocess
import sys
import textwrap

import pytest


PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL
STDOUT = subprocess.STDOUT


def py(code, *args):
    """The argument list that runs `code` in a child interpreter."""
    return (sys.executable, "-c", textwrap.dedent(code), *map(str, args))


def children(parent=None, zombies=True):
    """The pids whose parent is ``parent`` (this process by default), from /proc; without
    the zombies when ``zombies`` is false."""
    parent = os.getpid() if parent is None else parent
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        if int(ppid) == parent and (zombies or state != "Z"):
            found.add(int(name))
    return found


def fd_count():
    return len(os.listdir("/proc/self/fd"))


def assert_reaped(pid):
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


class Recorder(asyncio.SubprocessProtocol):
    """Records the subprocess protocol's callbacks."""

    def __init__(self, loop):
        self.events = []
        self.data = {1: bytearray(), 2: bytearray()}
        self.transport = None
        self.done = loop.create_future()
        self.lost = {fd: loop.create_future() for fd in (0, 1, 2)}
        self.exited = loop.create_future()

    def connection_made(self, transport):
        self.transport = transport
        self.events.append("connection_made")

    def pipe_data_received(self, fd, data):
        self.data[fd] += data
        if self.events[-1] != ("data", fd):
            self.events.append(("data", fd))

    def pipe_connection_lost(self, fd, exc):
        self.events.append(("pipe_lost", fd, exc))
        self.lost[fd].set_result(exc)

    def process_exited(self):
        self.events.append("process_exited")
        self.exited.set_result(None)

    def connection_lost(self, exc):
        self.events.append(("connection_lost", exc))
        self.done.set_result(exc)


async def spawn(loop, *args, **kwargs):
    proto = Recorder(loop)
    transport, got = await loop.subprocess_exec(lambda: proto, *args, **kwargs)
    assert got is proto
    return transport, proto
