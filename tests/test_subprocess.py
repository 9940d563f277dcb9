"""loop.subprocess_exec / subprocess_shell and their transport: argument checks, protocol
callbacks, signals, pipes, and the redirections (descriptors, files, environment, sessions,
users)."""

import asyncio
import gc
import os
import signal
import subprocess
import sys
import threading
import warnings

import pytest

from conftest import PY
from subprocessutil import DEVNULL, PIPE, STDOUT, assert_reaped, children, fd_count, py, Recorder, spawn


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
