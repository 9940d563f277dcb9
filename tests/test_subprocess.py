"""loop.subprocess_exec / subprocess_shell, their transport, and asyncio.create_subprocess_*
on top of them: arguments, redirections, protocol callbacks, signals, cancellation, exit
watching (pidfd, and the thread fallback), no zombies and no descriptor leaks."""

import asyncio
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest

from conftest import PY

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL
STDOUT = subprocess.STDOUT


def py(code, *args):
    """The argument list that runs `code` in a child interpreter."""
    return (sys.executable, "-c", textwrap.dedent(code), *map(str, args))


def children():
    """The pids whose parent is this process (running or zombie)."""
    me = os.getpid()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me:
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


# ------------------------------------------------------------------ argument checks


EXEC_ERRORS = [
    ({"universal_newlines": True}, "universal_newlines must be False"),
    ({"shell": True}, "shell must be False"),
    ({"bufsize": 1}, "bufsize must be 0"),
    ({"text": True}, "text must be False"),
    ({"encoding": "utf-8"}, "encoding must be None"),
    ({"errors": "strict"}, "errors must be None"),
]

SHELL_ERRORS = [
    ({"universal_newlines": True}, "universal_newlines must be False"),
    ({"shell": False}, "shell must be True"),
    ({"bufsize": -1}, "bufsize must be 0"),
    ({"text": True}, "text must be False"),
    ({"encoding": "utf-8"}, "encoding must be None"),
    ({"errors": "strict"}, "errors must be None"),
]


@pytest.mark.parametrize("kwargs,message", EXEC_ERRORS)
def test_subprocess_exec_rejects_text_mode_arguments(loop, run, kwargs, message):
    made = []

    async def main():
        with pytest.raises(ValueError) as info:
            await loop.subprocess_exec(lambda: made.append(1), "true", **kwargs)
        return str(info.value)

    before = children()
    assert run(main()) == message
    assert made == []  # checked before the protocol is created
    assert children() == before


@pytest.mark.parametrize("kwargs,message", SHELL_ERRORS)
def test_subprocess_shell_rejects_text_mode_arguments(loop, run, kwargs, message):
    async def main():
        with pytest.raises(ValueError) as info:
            await loop.subprocess_shell(asyncio.SubprocessProtocol, "true", **kwargs)
        return str(info.value)

    assert run(main()) == message


@pytest.mark.parametrize("cmd", [["true"], 42, None])
def test_subprocess_shell_cmd_must_be_a_string(loop, run, cmd):
    async def main():
        with pytest.raises(ValueError, match="^cmd must be a string$"):
            await loop.subprocess_shell(asyncio.SubprocessProtocol, cmd)
        with pytest.raises(ValueError, match="^cmd must be a string$"):
            await asyncio.create_subprocess_shell(cmd)

    run(main())


def test_subprocess_exec_program_must_be_a_string(loop, run):
    async def main():
        with pytest.raises(TypeError, match="not int"):
            await loop.subprocess_exec(asyncio.SubprocessProtocol, 42)
        with pytest.raises(TypeError, match="not int"):
            await asyncio.create_subprocess_exec(sys.executable, "-c", "pass", 42)

    gc.collect()
    before = fd_count()
    run(main())
    gc.collect()
    assert fd_count() == before


def test_missing_program_raises_from_popen(loop, run):
    async def main():
        with pytest.raises(FileNotFoundError):
            await loop.subprocess_exec(asyncio.SubprocessProtocol, "/nonexistent/swordfish-x")
        with pytest.raises(FileNotFoundError):
            await asyncio.create_subprocess_exec("/nonexistent/swordfish-x", stdout=PIPE)

    gc.collect()
    before = fd_count()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(main())
        gc.collect()
    assert [str(w.message) for w in caught] == []
    assert fd_count() == before


def test_unknown_popen_keyword_raises_type_error(loop, run):
    async def main():
        with pytest.raises(TypeError, match="no_such_option"):
            await loop.subprocess_exec(asyncio.SubprocessProtocol, "true", no_such_option=1)

    run(main())


# ------------------------------------------------------------------ the transport


def test_protocol_callbacks_in_order(loop, run):
    async def main():
        transport, proto = await spawn(
            loop, *py("import sys; sys.stdout.write('out'); sys.stderr.write('err')")
        )
        proto.events.append("returned")
        assert proto.events[0] == "connection_made"
        assert proto.transport is transport
        await proto.done
        return transport, proto

    transport, proto = run(main())
    ev = proto.events
    assert "returned" in ev
    assert ev[-1] == ("connection_lost", None)
    assert ev.count("process_exited") == 1
    lost = {e[1]: i for i, e in enumerate(ev) if e[0] == "pipe_lost"}
    assert sorted(lost) == [0, 1, 2]
    assert all(e[2] is None for e in ev if e[0] == "pipe_lost")
    assert max(lost.values()) < len(ev) - 1 and ev.index("process_exited") < len(ev) - 1
    for fd in (1, 2):
        assert all(i < lost[fd] for i, e in enumerate(ev) if e == ("data", fd))
    assert bytes(proto.data[1]) == b"out" and bytes(proto.data[2]) == b"err"
    assert transport.get_returncode() == 0
    assert transport.is_closing() is False  # connection_lost does not close it
    transport.close()
    assert transport.is_closing() is True
    assert_reaped(transport.get_pid())


def test_transport_accessors(loop, run):
    async def main():
        transport, proto = await spawn(loop, *py("import sys; sys.stdin.read()"))
        assert isinstance(transport, asyncio.SubprocessTransport)
        pid = transport.get_pid()
        assert isinstance(pid, int) and pid > 0
        assert transport.get_returncode() is None
        popen = transport.get_extra_info("subprocess")
        assert isinstance(popen, subprocess.Popen) and popen.pid == pid
        assert transport.get_extra_info("nothing", "dflt") == "dflt"
        assert transport.get_protocol() is proto
        stdin = transport.get_pipe_transport(0)
        assert isinstance(stdin, asyncio.WriteTransport)
        assert isinstance(transport.get_pipe_transport(1), asyncio.ReadTransport)
        assert isinstance(transport.get_pipe_transport(2), asyncio.ReadTransport)
        assert transport.get_pipe_transport(3) is None
        assert f"pid={pid}" in repr(transport) and "running" in repr(transport)
        assert transport.is_closing() is False
        stdin.close()
        await proto.done
        assert transport.get_returncode() == 0
        assert popen.returncode == 0  # copied into the Popen object
        assert "returncode=0" in repr(transport)
        transport.close()
        return pid

    assert_reaped(run(main()))


def test_set_protocol(loop, run):
    async def main():
        transport, first = await spawn(loop, *py("import sys; sys.stdin.read(); print('x')"))
        second = Recorder(loop)
        second.events.append("swapped")
        transport.set_protocol(second)
        assert transport.get_protocol() is second
        transport.get_pipe_transport(0).close()
        await second.done
        transport.close()
        return first, second

    first, second = run(main())
    assert "process_exited" not in first.events
    assert "process_exited" in second.events
    assert bytes(second.data[1]).strip() == b"x"


def test_close_kills_running_child(loop, run):
    async def main():
        transport, proto = await spawn(loop, *py("import time; time.sleep(60)"))
        transport.close()
        assert transport.is_closing()
        await proto.done
        return transport, proto

    transport, proto = run(main())
    assert transport.get_returncode() == -signal.SIGKILL
    assert proto.events[-1] == ("connection_lost", None)
    assert sorted(e[1] for e in proto.events if e[0] == "pipe_lost") == [0, 1, 2]
    assert_reaped(transport.get_pid())


def test_close_after_exit_does_not_signal(loop, run):
    async def main():
        transport, proto = await spawn(loop, *py("pass"), stdin=DEVNULL)
        await proto.exited
        transport.close()
        transport.close()  # idempotent
        await proto.done
        return transport

    transport = run(main())
    assert transport.get_returncode() == 0


def test_signals_after_the_transport_finished(loop, run):
    async def main():
        transport, proto = await spawn(loop, *py("pass"))
        await proto.done
        for call in (transport.kill, transport.terminate, lambda: transport.send_signal(signal.SIGINT)):
            with pytest.raises(ProcessLookupError):
                call()
        transport.close()

    run(main())


def test_kill_and_terminate_report_negative_signal(loop, run):
    async def main():
        codes = []
        for method in ("kill", "terminate"):
            transport, proto = await spawn(loop, *py("import time; time.sleep(60)"))
            getattr(transport, method)()
            await proto.done
            codes.append(transport.get_returncode())
            transport.close()
        return codes

    assert run(main()) == [-signal.SIGKILL, -signal.SIGTERM]


def test_unclosed_transport_warns(loop, run):
    async def main():
        transport, proto = await spawn(loop, *py("pass"))
        await proto.done
        proto.transport = None
        return transport

    transport = run(main())
    pid = transport.get_pid()
    for t in threading.enumerate():
        # The stdlib's ThreadedChildWatcher (3.10, 3.11): its thread holds the transport
        # until it ends.
        if t.name.startswith("asyncio-waitpid-"):
            t.join(5)
    with pytest.warns(ResourceWarning, match="unclosed transport"):
        del transport
        gc.collect()
    assert_reaped(pid)


def test_pipe_flow_control_reaches_the_protocol(loop, run):
    class Flow(Recorder):
        def pause_writing(self):
            self.events.append("pause")

        def resume_writing(self):
            self.events.append("resume")
            self.resumed.set_result(None)

    async def main():
        proto = Flow(loop)
        proto.resumed = loop.create_future()
        transport, _ = await loop.subprocess_exec(
            lambda: proto, *py("import sys; print(len(sys.stdin.buffer.read()))")
        )
        stdin = transport.get_pipe_transport(0)
        stdin.write(b"p" * (4 << 20))
        assert "pause" in proto.events
        assert stdin.get_write_buffer_size() > 0
        await proto.resumed
        stdin.close()
        await proto.done
        transport.close()
        return proto

    proto = run(main())
    assert proto.events.index("pause") < proto.events.index("resume")
    assert bytes(proto.data[1]).strip() == str(4 << 20).encode()


def test_pipes_are_connected_through_the_loop_methods(loop, run):
    """The child's pipes go through loop.connect_write_pipe / connect_read_pipe, so code
    that wraps them sees them (the stdlib's own tests do)."""
    seen = []

    def spy(name):
        original = getattr(loop, name)

        async def wrapper(factory, pipe):
            transport, protocol = await original(factory, pipe)
            seen.append((name, pipe.fileno()))
            return transport, protocol

        return wrapper

    loop.connect_read_pipe = spy("connect_read_pipe")
    loop.connect_write_pipe = spy("connect_write_pipe")

    async def main():
        transport, proto = await spawn(loop, *py("import sys; sys.stdin.read()"))
        popen = transport.get_extra_info("subprocess")
        fds = [(n, f.fileno()) for n, f in (
            ("connect_write_pipe", popen.stdin),
            ("connect_read_pipe", popen.stdout),
            ("connect_read_pipe", popen.stderr),
        )]
        transport.get_pipe_transport(0).close()
        await proto.done
        transport.close()
        return fds

    assert run(main()) == seen


def test_close_kills_through_popen(loop, run):
    async def main():
        transport, proto = await spawn(loop, *py("import time; time.sleep(60)"))
        popen = transport.get_extra_info("subprocess")
        calls = []
        kill = popen.kill
        popen.kill = lambda: (calls.append("kill"), kill())
        transport.close()
        await proto.done
        return calls, transport.get_returncode()

    assert run(main()) == (["kill"], -signal.SIGKILL)


def test_subprocess_shell_low_level(loop, run):
    async def main():
        proto = Recorder(loop)
        transport, _ = await loop.subprocess_shell(
            lambda: proto, "echo $SWORDFISH_T; echo oops >&2; exit 3",
            env={"SWORDFISH_T": "shell ok", "PATH": os.environ["PATH"]},
        )
        await proto.done
        transport.close()
        return transport, proto

    transport, proto = run(main())
    assert transport.get_returncode() == 3
    assert bytes(proto.data[1]) == b"shell ok\n"
    assert bytes(proto.data[2]) == b"oops\n"


def test_bytes_command_and_program(loop, run):
    async def main():
        p1 = await asyncio.create_subprocess_shell(b"echo bytes", stdout=PIPE)
        p2 = await asyncio.create_subprocess_exec(b"echo", b"too", stdout=PIPE)
        return (await p1.communicate())[0], (await p2.communicate())[0]

    assert run(main()) == (b"bytes\n", b"too\n")


# ------------------------------------------------------------------ redirections


def test_devnull_everywhere(loop, run):
    async def main():
        transport, proto = await spawn(
            loop, *py("import sys; print(repr(sys.stdin.read()))"),
            stdin=DEVNULL, stdout=DEVNULL, stderr=DEVNULL,
        )
        assert [transport.get_pipe_transport(fd) for fd in (0, 1, 2)] == [None, None, None]
        await proto.done
        transport.close()
        return transport, proto

    transport, proto = run(main())
    assert transport.get_returncode() == 0
    assert proto.events == ["connection_made", "process_exited", ("connection_lost", None)]


def test_stderr_to_stdout(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            *py("import sys; sys.stdout.write('a'); sys.stdout.flush(); sys.stderr.write('b')"),
            stdout=PIPE, stderr=STDOUT,
        )
        assert proc.stderr is None
        out, err = await proc.communicate()
        return out, err

    assert run(main()) == (b"ab", None)


def test_file_objects_and_descriptors(loop, run, tmp_path):
    src = tmp_path / "in.txt"
    src.write_bytes(b"from a file\n")
    dst = tmp_path / "out.txt"
    r, w = os.pipe()

    async def main():
        with open(src, "rb") as fin, open(dst, "wb") as fout:
            proc = await asyncio.create_subprocess_exec(
                *py("import sys; d = sys.stdin.read(); print(d.upper(), end=''); "
                    "print('to fd', file=sys.stderr, end='')"),
                stdin=fin, stdout=fout, stderr=w,
            )
            assert (proc.stdin, proc.stdout, proc.stderr) == (None, None, None)
            os.close(w)
            return await proc.wait()

    try:
        assert run(main()) == 0
        assert os.read(r, 100) == b"to fd"
    finally:
        os.close(r)
    assert dst.read_bytes() == b"FROM A FILE\n"


def test_env_and_cwd(loop, run, tmp_path):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            *py("import os; print(os.environ.get('SWORDFISH_T'), os.getcwd())"),
            stdout=PIPE, env={"SWORDFISH_T": "env ok"}, cwd=str(tmp_path),
        )
        return (await proc.communicate())[0].decode().split()

    assert run(main()) == ["env", "ok", os.path.realpath(tmp_path)]


def test_pass_fds(loop, run):
    r, w = os.pipe()

    async def main():
        code = "import os, sys; os.write(int(sys.argv[1]), b'passed')"
        passed = await asyncio.create_subprocess_exec(*py(code, w), pass_fds=(w,), stderr=DEVNULL)
        closed = await asyncio.create_subprocess_exec(*py(code, w), stderr=DEVNULL)
        return await passed.wait(), await closed.wait()

    try:
        assert run(main()) == (0, 1)  # without pass_fds the descriptor is closed in the child
        os.close(w)
        w = None
        assert os.read(r, 100) == b"passed"
    finally:
        os.close(r)
        if w is not None:
            os.close(w)


def test_start_new_session_and_preexec_fn(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            *py("import os; print(os.getsid(0) == os.getpid(), oct(os.umask(0)))"),
            stdout=PIPE, start_new_session=True, preexec_fn=lambda: os.umask(0o027),
        )
        return (await proc.communicate())[0].split()

    assert run(main()) == [b"True", b"0o27"]


@pytest.mark.skipif(PY < (3, 11), reason="Popen(process_group=) needs Python 3.11+")
def test_process_group(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            *py("import os; print(os.getpgid(0) == os.getpid())"),
            stdout=PIPE, process_group=0,
        )
        return (await proc.communicate())[0]

    assert run(main()) == b"True\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="changing user needs root")
def test_user_and_group(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            "sh", "-c", "id -u; id -g", stdout=PIPE, user=65534, group=65534
        )
        return (await proc.communicate())[0].split()

    assert run(main()) == [b"65534", b"65534"]


# ------------------------------------------------------------------ create_subprocess_*


def test_communicate_several_megabytes(loop, run):
    data = os.urandom(3 << 20)

    async def main():
        proc = await asyncio.create_subprocess_exec(
            *py("import sys; d = sys.stdin.buffer.read(); sys.stdout.buffer.write(d); "
                "sys.stderr.buffer.write(d[:1000]); sys.exit(4)"),
            stdin=PIPE, stdout=PIPE, stderr=PIPE,
        )
        out, err = await proc.communicate(data)
        assert proc.returncode == 4
        assert_reaped(proc.pid)
        return out, err

    out, err = run(main(), timeout=30)
    assert out == data
    assert err == data[:1000]


def test_large_output_read(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            *py("import sys; sys.stdout.buffer.write(b'z' * (8 << 20))"), stdout=PIPE
        )
        out = await proc.stdout.read()
        return len(out), out.count(b"z"), await proc.wait()

    assert run(main(), timeout=30) == (8 << 20, 8 << 20, 0)


def test_interactive_stdin_stdout(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            *py("import sys\nfor line in sys.stdin:\n    print(line.upper(), end='', flush=True)"),
            stdin=PIPE, stdout=PIPE,
        )
        got = []
        for word in (b"hello\n", b"swordfish\n", b"pipes\n"):
            proc.stdin.write(word)
            await proc.stdin.drain()
            got.append(await proc.stdout.readline())
        proc.stdin.close()
        if PY >= (3, 11):  # StreamWriter.wait_closed() on a pipe waits for the pipe's end
            await proc.stdin.wait_closed()
        assert await proc.stdout.read() == b""
        return got, await proc.wait()

    assert run(main()) == ([b"HELLO\n", b"SWORDFISH\n", b"PIPES\n"], 0)


def test_stream_limit(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            *py("print('a' * 100); print('short')"), stdout=PIPE, limit=10
        )
        with pytest.raises(ValueError):
            await proc.stdout.readline()
        await proc.wait()

    run(main())


def test_create_subprocess_shell(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_shell(
            "read x; echo got $x; exit 9", stdin=PIPE, stdout=PIPE
        )
        out, _ = await proc.communicate(b"it\n")
        return out, proc.returncode

    assert run(main()) == (b"got it\n", 9)


def test_child_killed_by_signal(loop, run):
    async def main():
        own = await asyncio.create_subprocess_exec(*py("import os; os.kill(os.getpid(), 9)"))
        killed = await asyncio.create_subprocess_exec(
            *py("import sys; sys.stdin.read()"), stdin=PIPE
        )
        killed.kill()
        codes = await own.wait(), await killed.wait()
        assert_reaped(own.pid)
        assert_reaped(killed.pid)
        return codes

    assert run(main()) == (-9, -9)


def test_send_signal_to_child(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            *py("""
                import signal, sys, time
                signal.signal(signal.SIGUSR1, lambda *a: sys.exit(5))
                print('ready', flush=True)
                while True:
                    time.sleep(1)
            """),
            stdout=PIPE,
        )
        assert await proc.stdout.readline() == b"ready\n"
        proc.send_signal(signal.SIGUSR1)
        return await proc.wait()

    assert run(main()) == 5


def test_kill_after_wait(loop, run, monkeypatch):
    sent = []
    real_kill = os.kill

    def recording_kill(pid, sig):
        sent.append((pid, sig))
        real_kill(pid, sig)

    async def main():
        proc = await asyncio.create_subprocess_exec(*py("pass"), stdout=PIPE, stderr=PIPE)
        await proc.communicate()
        assert proc.returncode == 0
        # The child is reaped: its pid may belong to another process by now, so no signal may
        # be sent. wait() can return before the transport forgets the process (the exit may
        # be seen after the pipes closed), so a call then is a silent no-op rather than
        # ProcessLookupError, in asyncio as here; test_signals_after_the_transport_finished
        # covers the state after connection_lost.
        monkeypatch.setattr(os, "kill", recording_kill)
        for call in (proc.kill, proc.terminate, lambda: proc.send_signal(signal.SIGINT)):
            try:
                call()
            except ProcessLookupError:
                pass
        monkeypatch.setattr(os, "kill", real_kill)
        assert sent == []
        assert await proc.wait() == 0

    run(main())


def test_child_closes_stdout_early(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            *py("import os, sys; os.close(1); sys.stdin.buffer.read(); sys.exit(7)"),
            stdin=PIPE, stdout=PIPE,
        )
        assert await proc.stdout.read() == b""
        assert proc.returncode is None  # still blocked on its stdin
        proc.stdin.close()
        return await proc.wait()

    assert run(main()) == 7


def test_child_closes_stdout_early_low_level(loop, run):
    async def main():
        transport, proto = await spawn(
            loop, *py("import os, sys; os.close(1); sys.stdin.buffer.read()")
        )
        assert await proto.lost[1] is None
        assert "process_exited" not in proto.events
        transport.get_pipe_transport(0).close()
        await proto.done
        transport.close()
        return proto.events

    events = run(main())
    assert events.index(("pipe_lost", 1, None)) < events.index("process_exited")


def test_write_to_exited_child(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(*py("pass"), stdin=PIPE)
        assert await proc.wait() == 0
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            proc.stdin.write(b"x" * (1 << 20))
            await proc.stdin.drain()
        # communicate() ignores the broken pipe
        assert await proc.communicate(b"more") == (None, None)

    run(main())


def test_communicate_input_to_child_that_does_not_read(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            *py("print('no reading')"), stdin=PIPE, stdout=PIPE
        )
        return await proc.communicate(b"i" * (2 << 20)), proc.returncode

    assert run(main()) == ((b"no reading\n", None), 0)


@pytest.mark.skipif(PY < (3, 11), reason="Python 3.10's wait() returns at exit")
def test_wait_waits_for_the_pipes(loop, run):
    """Since 3.11, Process.wait() returns once the child has exited and its pipes are
    closed: here a grandchild keeps stdout open after the child exits."""
    r, w = os.pipe()

    class Proto(asyncio.subprocess.SubprocessStreamProtocol):
        def process_exited(self):
            super().process_exited()
            exited.set_result(None)

    async def main():
        nonlocal exited
        exited = loop.create_future()
        grandchild = "import os, sys; os.read(int(sys.argv[1]), 1)"
        transport, proto = await loop.subprocess_exec(
            lambda: Proto(limit=2**16, loop=loop),
            *py("import subprocess, sys; subprocess.Popen([sys.executable, '-c', sys.argv[1], "
                "sys.argv[2]], pass_fds=(int(sys.argv[2]),))", grandchild, r),
            stdin=DEVNULL, stderr=DEVNULL, pass_fds=(r,),
        )
        proc = asyncio.subprocess.Process(transport, proto, loop)
        waiting = loop.create_task(proc.wait())
        await exited
        for _ in range(20):
            await asyncio.sleep(0)
        assert not waiting.done()
        os.write(w, b"x")  # the grandchild exits, closing the pipe
        return await waiting

    exited = None
    try:
        assert run(main()) == 0
    finally:
        os.close(r)
        os.close(w)


# ------------------------------------------------------------------ cancellation


def test_cancel_wait(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            *py("import sys; sys.stdin.read()"), stdin=PIPE
        )
        waiting = asyncio.ensure_future(proc.wait())
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert proc.returncode is None
        proc.stdin.close()
        return await proc.wait()

    assert run(main()) == 0


def test_cancel_communicate(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            *py("import time; print('started', flush=True); time.sleep(60)"), stdout=PIPE
        )
        assert await proc.stdout.readline() == b"started\n"
        talking = asyncio.ensure_future(proc.communicate())
        await asyncio.sleep(0)
        talking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await talking
        assert proc.returncode is None
        proc.kill()
        return await proc.wait()

    assert run(main()) == -9


def test_cancel_while_creating(loop, run):
    before = children()

    async def main():
        creating = asyncio.ensure_future(
            asyncio.create_subprocess_exec(
                *py("import time; time.sleep(60)"), stdin=PIPE, stdout=PIPE, stderr=PIPE
            )
        )
        await asyncio.sleep(0)  # creating has spawned the child and waits for its pipes
        assert children() - before
        creating.cancel()
        with pytest.raises(asyncio.CancelledError):
            await creating

    gc.collect()
    fds = fd_count()
    run(main())
    assert children() == before  # killed and reaped before the cancellation came through
    gc.collect()
    assert fd_count() == fds


def test_wait_for_timeout_then_kill(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(*py("import time; time.sleep(60)"))
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), 0.05)
        proc.kill()
        return await proc.wait()

    assert run(main()) == -9


# ------------------------------------------------------------------ no leaks


def test_no_zombies_and_no_fd_leaks(loop, run):
    async def one_of_each():
        p = await asyncio.create_subprocess_exec(
            *py("import sys; sys.stdout.write(sys.stdin.read())"),
            stdin=PIPE, stdout=PIPE, stderr=PIPE,
        )
        assert (await p.communicate(b"abc"))[0] == b"abc"
        pids = [p.pid]
        # exec: a shell may run a command in a child of its own, which kill() would miss
        p = await asyncio.create_subprocess_shell("exec sleep 60", stdout=PIPE)
        p.kill()
        await p.wait()
        pids.append(p.pid)
        transport, proto = await spawn(loop, *py("import time; time.sleep(60)"))
        transport.close()
        await proto.done
        pids.append(transport.get_pid())
        transport, proto = await spawn(loop, *py("pass"), stdin=DEVNULL, stdout=DEVNULL)
        await proto.done
        transport.close()
        pids.append(transport.get_pid())
        return pids

    async def main():
        await one_of_each()  # first use may open lasting descriptors (the stdlib's watcher)
        gc.collect()
        before = fd_count()
        pids = []
        for _ in range(3):
            pids += await one_of_each()
        gc.collect()
        return before, fd_count(), pids

    kids = children()
    before, after, pids = run(main(), timeout=30)
    assert after == before
    for pid in pids:
        assert_reaped(pid)
    assert children() == kids


# ------------------------------------------------------------------ debug mode


def test_debug_mode_logs(loop, run, caplog):
    loop.set_debug(True)

    async def main():
        proc = await asyncio.create_subprocess_exec(*py("pass"), stdout=PIPE)
        await proc.communicate()
        return proc.returncode

    with caplog.at_level("DEBUG", logger="asyncio"):
        assert run(main()) == 0
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "execute program" in text
    assert "stdout=<pipe>" in text
    assert "exited with return code 0" in text


# ------------------------------------------------------------------ swordfish: exit watching


@pytest.fixture(params=["pidfd", "thread"])
def exit_watch(request, sf, monkeypatch):
    from swordfish import _subprocess

    if request.param == "pidfd":
        if not _subprocess._pidfd_available():
            pytest.skip("no pidfd on this system")
    else:
        monkeypatch.setattr(_subprocess, "_pidfd_available", lambda: False)
    return request.param


def test_swordfish_transport_class(sf_loop, sf_run):
    from swordfish._subprocess import SubprocessTransport

    async def main():
        transport, proto = await spawn(sf_loop, *py("pass"))
        assert type(transport) is SubprocessTransport
        await proto.done
        transport.close()

    sf_run(main())


def test_swordfish_pipe_connection_fails(sf_loop, sf_run, exit_watch):
    """A pipe that cannot be connected: the error comes out of subprocess_exec, the child is
    killed and reaped, nothing is left open. (The stdlib's 3.11+ transport waits forever
    here for the pipe that never connected.)"""
    original = sf_loop.connect_read_pipe
    calls = []

    async def refuse_stderr(factory, pipe):
        calls.append(pipe)
        if len(calls) == 2:  # stdout first, then stderr
            raise OSError(24, "no stderr for you")
        return await original(factory, pipe)

    sf_loop.connect_read_pipe = refuse_stderr
    kids = children()

    async def main():
        gc.collect()
        fds = fd_count()
        with pytest.raises(OSError, match="no stderr for you"):
            await sf_loop.subprocess_exec(
                lambda: Recorder(sf_loop), *py("import time; time.sleep(60)")
            )
        gc.collect()
        return fds, fd_count()

    before, after = sf_run(main())
    assert after == before
    assert children() == kids
    assert len(calls) == 2 and all(pipe.closed for pipe in calls)


def test_swordfish_pidfd_watch_uses_no_thread(sf_loop, sf_run, exit_watch):
    if exit_watch != "pidfd":
        pytest.skip("pidfd only")

    async def main():
        threads = set(threading.enumerate())
        proc = await asyncio.create_subprocess_exec(
            *py("import sys; sys.stdin.read()"), stdin=PIPE
        )
        assert set(threading.enumerate()) == threads
        proc.stdin.close()
        return await proc.wait(), proc.pid

    code, pid = sf_run(main())
    assert code == 0
    assert_reaped(pid)


def test_swordfish_exit_watch_basics(sf_loop, sf_run, exit_watch):
    async def main():
        gc.collect()
        fds = fd_count()
        proc = await asyncio.create_subprocess_exec(
            *py("import sys; sys.stdout.write(sys.stdin.read()); sys.exit(2)"),
            stdin=PIPE, stdout=PIPE,
        )
        out = await proc.communicate(b"watched")
        killed = await asyncio.create_subprocess_exec(*py("import time; time.sleep(60)"))
        killed.kill()
        results = out, proc.returncode, await killed.wait()
        assert_reaped(proc.pid)
        assert_reaped(killed.pid)
        transport, proto = await spawn(sf_loop, *py("import time; time.sleep(60)"))
        transport.close()
        await proto.done
        assert transport.get_returncode() == -9
        assert_reaped(transport.get_pid())
        gc.collect()
        assert fd_count() == fds
        return results

    assert sf_run(main()) == ((b"watched", None), 2, -9)
    if exit_watch == "thread":
        for t in threading.enumerate():
            if t.name.startswith("swordfish-waitpid-"):
                t.join(5)
                assert not t.is_alive()


def test_swordfish_child_reaped_through_popen(sf_loop, sf_run, exit_watch):
    """A child reaped by someone else (here its Popen object) reports the status that
    Popen read, not an unknown one."""

    async def main():
        transport, proto = await spawn(sf_loop, *py("import sys; sys.stdin.read(); sys.exit(6)"))
        popen = transport.get_extra_info("subprocess")
        transport.get_pipe_transport(0).close()
        await proto.lost[0]
        # Reaps it, unless the watcher's thread was first (Popen then says 0: it cannot
        # know the status).
        code = popen.wait(5)
        assert code in ((6,) if exit_watch == "pidfd" else (6, 0))
        await proto.done
        transport.close()
        return transport.get_returncode()

    assert sf_run(main()) == 6


def test_swordfish_loop_closed_before_child_exits(sf, exit_watch):
    """The loop goes away while the child runs: the watcher's descriptor is released, and
    nothing is left behind once the child exits (the thread reaps it; the pidfd watcher
    leaves it to Popen, as the stdlib does)."""
    gc.collect()
    fds = fd_count()
    loop = sf.new_event_loop()
    r, w = os.pipe()
    holder = {}

    async def main():
        transport, proto = await spawn(
            loop, *py("import os, sys; os.read(int(sys.argv[1]), 1)", r), pass_fds=(r,),
            stdin=DEVNULL, stdout=DEVNULL, stderr=DEVNULL,
        )
        holder["pid"] = transport.get_pid()
        holder["popen"] = transport.get_extra_info("subprocess")
        transport.close = lambda: None  # keep it running past the loop
        return transport

    transport = loop.run_until_complete(main())
    loop.close()
    del loop  # (a closed swordfish loop keeps its own descriptors until it is freed)
    pid, popen = holder["pid"], holder.pop("popen")
    os.write(w, b"x")
    os.close(r)
    os.close(w)
    del transport
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
        if exit_watch == "pidfd":
            popen.wait(5)
        else:
            for t in threading.enumerate():
                if t.name == f"swordfish-waitpid-{pid}":
                    t.join(5)
        del popen
        gc.collect()
    assert_reaped(pid)
    assert fd_count() == fds
