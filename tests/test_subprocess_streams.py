"""asyncio.create_subprocess_* on swordfish's subprocess transport: streams, signals and
exits, cancellation, no zombies and no descriptor leaks, debug mode, and the exit watching
(pidfd, and the thread fallback)."""

import asyncio
import gc
import os
import signal
import threading
import warnings

import pytest

from conftest import PY
from subprocessutil import DEVNULL, PIPE, assert_reaped, children, fd_count, py, Recorder, spawn


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


async def cancelled_at_its_first_wait(aw):
    """Start ``aw``, cancel it once it waits, and see it end cancelled."""
    task = asyncio.ensure_future(aw)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_cancel_wait(loop, run):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            *py("import sys; sys.stdin.read()"), stdin=PIPE
        )
        await cancelled_at_its_first_wait(proc.wait())
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
        await cancelled_at_its_first_wait(proc.communicate())
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
