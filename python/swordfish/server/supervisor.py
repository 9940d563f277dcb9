"""`--workers N`: a supervisor process that runs N worker processes on one listening socket.

The supervisor binds the socket itself (or takes `--fd`) and every worker inherits it: the
workers share one accept queue. `SO_REUSEPORT` (one socket per worker) was not chosen
because each of those sockets has its own accept queue, filled by the kernel's hash of the
connection: when a worker closes its socket to retire, the connections queued on it are
reset. With one shared queue a retiring worker just stops calling accept() and the others
take what is queued, so recycling drops nothing; it also works for Unix sockets and `--fd`.

Each worker is a fresh `python -m swordfish serve ... --fd N` process (the single-process
server, so a worker is exactly what one process runs; its command line spells out the
whole config) with a pipe back to the supervisor on which it writes `R` once it listens
and `M` once it has served `--max-requests`.

- A worker that exits unexpectedly is replaced. One that exits before it ever listened
  (the app does not import, lifespan startup fails) stops everything: the supervisor exits
  with that worker's code, instead of restarting a worker that cannot start forever.
- `M`: a replacement is started first; once it listens the old worker gets SIGUSR2 and
  retires: it stops accepting, finishes in-flight requests, and drains its kept-alive
  connections (each closes after a response that says `connection: close`, so a request
  sent meanwhile is answered, never dropped; WebSockets close with 1012, service restart).
- SIGTERM/SIGINT: the supervisor closes its copy of the listening socket at once and starts
  no more workers; every worker gets SIGTERM, closes its copy (from then on new connections
  are refused) and has `--timeout-graceful-shutdown` seconds (it aborts its remaining
  connections itself then); a worker still alive `KILL_MARGIN` seconds after that (a
  blocked loop, a slow lifespan shutdown) is killed.
  A second SIGTERM/SIGINT kills the workers at once.
- SIGHUP: every worker is replaced as at `M`, all at once, each new worker loading the app
  afresh (new code); one that exits before it listens (the new code is broken) stops
  nothing, and the workers it was to replace serve on. SIGTTIN adds a worker, SIGTTOU
  retires the oldest (never the last). SIGUSR1 reopens the log files, here and in every
  worker (after logrotate).
- Health: a worker's loop writes `H` every quarter of `--timeout-worker-healthcheck`; a
  worker that listens and has written nothing for that long (its loop is stuck in a
  blocking call) is killed and replaced. With `--workers-max-rss`, a worker whose resident
  memory passes the limit (looked at every second) is replaced as at `M`.
- `--reload` (also with one worker): when a watched file changes (see reload.py), every
  serving worker is replaced as at SIGHUP, so the port never stops answering; after a
  broken change the next change tries again.
- `--metrics`: each worker gets a slot of the shared counters (`--worker-metrics FD:SLOT`),
  taken back when it is reaped; the endpoint (metrics.py) runs on a thread of its own.
- `--worker-cpu-affinity` (affinity.py): each worker holds a place, 0 to N-1, that its
  replacement takes over; the place picks its CPU, set in the child before it runs Python.
- Connections: each worker gets a slot of the board of open-connection counts
  (`--worker-board FD:SLOT`, balance.py), by which the workers share the accepted
  connections evenly; a slot is cleared and taken back when its worker is reaped.
"""

import logging
import os
import selectors
import signal
import socket
import stat
import subprocess
import sys
import time

from .balance import NOT_ACCEPTING, ConnectionBoard
from .cli import worker_argv, worker_env
from .logs import reopen_files
from .metrics import MetricsEndpoint, WorkerCounters, render
from .reload import FileWatch

logger = logging.getLogger("swordfish.error")

KILL_MARGIN = 2.0  # seconds past the graceful timeout before a worker is killed
RSS_PERIOD = 1.0  # seconds between two looks at the workers' memory (--workers-max-rss)
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def resident_mib(pid):
    """A process's resident memory in MiB (Linux: /proc/PID/statm), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE_SIZE / (1024 * 1024)
    except (OSError, ValueError, IndexError):
        return None


def bind_socket(config):
    """The listening socket the workers share, as the single-process server would bind it."""
    if config.fd is not None:
        return socket.socket(fileno=config.fd)
    if config.uds:
        try:
            if stat.S_ISSOCK(os.stat(config.uds).st_mode):
                os.unlink(config.uds)  # a stale socket from an earlier run
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(config.uds)
    else:
        family, kind, proto, _, addr = socket.getaddrinfo(
            config.host or None, config.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            sock.bind(addr)
        except OSError as exc:  # worded as the event loops word it
            sock.close()
            raise OSError(exc.errno, f"error while attempting to bind on address {addr!r}: "
                                     f"{exc.strerror.lower()}") from None
    sock.listen(config.backlog)
    return sock


def _prctl():
    """Linux's prctl, looked up here in the parent (nothing is imported after fork), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except Exception:
        return None


def _preexec(prctl, cpu):
    """A worker's preexec_fn: SIGTERM to it if the supervisor dies without stopping it, and
    its CPU (inherited by every thread it starts); None if there is nothing to do."""
    if prctl is None and cpu is None:
        return None

    def preexec():
        if prctl is not None:
            prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if cpu is not None:
            try:
                os.sched_setaffinity(0, {cpu})
            except OSError:  # the CPU went offline since the supervisor looked: unpinned
                pass

    return preexec


class Worker:
    def __init__(self, proc, rfd, predecessor):
        self.proc = proc
        self.pid = proc.pid
        self.rfd = rfd
        self.predecessor = predecessor  # the retiring worker this one replaces
        self.ready = False
        self.retiring = False
        self.stopping = False
        self.kill_at = None
        self.last_beat = None  # when it last wrote to its pipe (set once it listens)
        self.slot = None  # its slot of the shared counters (--metrics)
        self.board_slot = None  # its slot of the connection board (balance.py)
        self.place = None  # 0..N-1, passed on to its replacement (--worker-cpu-affinity)
        # Started by a reload or SIGTTIN: if it exits before it listens, nothing stops (the
        # workers it was to replace serve on; SIGTTIN's count goes back down).
        self.optional = False
        self.added = False  # started by SIGTTIN


class Supervisor:
    def __init__(self, config, cpus=None):
        self.config = config
        self.cpus = cpus  # the CPU of each worker place, or None (affinity.worker_cpus)
        self.argv = worker_argv(config)  # each worker runs it with `--fd` and `--workers 1` added
        self.workers = []
        self.target = config.workers  # how many should serve (SIGTTIN / SIGTTOU change it)
        self.stopping = False
        self.exit_code = 0
        self.sock = None
        self.sel = None
        self.prctl = _prctl()
        self.watch = None
        self.next_look = None  # when the watched files are looked at next (--reload)
        self.next_rss = None  # when the workers' memory is looked at next (--workers-max-rss)
        self.counters = WorkerCounters() if config.metrics else None
        # Room for every worker and a replacement of each (a reload replaces them all).
        self.board = ConnectionBoard.create(2 * config.workers)
        self.board_free = list(range(self.board.slots))
        self.endpoint = None
        if config.reload:
            dirs = config.reload_dirs or [config.app_dir or "."]
            self.watch = FileWatch(dirs, config.reload_includes, config.reload_excludes)
            for d in self.watch.dirs:
                if not os.path.isdir(d):
                    logger.warning("reload: %s is not a directory: nothing in it is watched", d)

    def run(self):
        config = self.config
        try:
            self.sock = bind_socket(config)
        except OSError as exc:
            logger.error("%s", exc)
            return 1
        self.sock.set_inheritable(True)
        if self.counters is not None:
            try:
                self.endpoint = MetricsEndpoint(config.metrics_address, config.metrics_port, self._metrics_text)
            except OSError as exc:
                logger.error("metrics: cannot listen on %s:%d: %s", config.metrics_address, config.metrics_port, exc)
                self.sock.close()
                self.counters.close()
                return 1
            self.endpoint.start()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signals = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU,
                   signal.SIGUSR1)
        old = {sig: signal.signal(sig, lambda *_: None) for sig in signals}
        old_wakeup = signal.set_wakeup_fd(wake_w)
        self.sel = selectors.DefaultSelector()
        self.sel.register(wake_r, selectors.EVENT_READ, None)
        try:
            # Only now that the signals are caught: whoever reads this line may signal us.
            name = self.sock.getsockname()
            where = f"unix:{name}" if isinstance(name, str) else f"{name[0]}:{name[1]}"
            logger.info("swordfish supervisor (pid %d): %d workers on %s", os.getpid(), config.workers, where)
            if self.watch is not None:
                logger.info("watching %s for changes (%d files)", ", ".join(self.watch.dirs), len(self.watch.files))
                self.next_look = time.monotonic() + config.reload_delay
            if config.workers_max_rss is not None:
                self.next_rss = time.monotonic() + RSS_PERIOD
            for _ in range(config.workers):
                self._spawn()
            while self.workers or not self.stopping:
                self._step(wake_r)
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in old.items():
                signal.signal(sig, handler)
            for w in self.workers:  # only on an error in the loop itself
                w.proc.kill()
                w.proc.wait()
            self.sel.close()
            os.close(wake_r)
            os.close(wake_w)
            self.sock.close()
            if self.endpoint is not None:
                self.endpoint.stop()
            if self.counters is not None:
                self.counters.close()
            if config.uds and config.fd is None:
                try:
                    os.unlink(config.uds)
                except OSError:
                    pass
        logger.info("swordfish supervisor: stopped")
        return self.exit_code

    def _step(self, wake_r):
        deadlines = [w.kill_at for w in self.workers if w.kill_at is not None]
        health = self.config.timeout_worker_healthcheck
        if health is not None:
            deadlines += [w.last_beat + health for w in self.workers if w.last_beat is not None and not w.stopping]
        if self.next_look is not None and not self.stopping:
            deadlines.append(self.next_look)
        if self.next_rss is not None and not self.stopping:
            deadlines.append(self.next_rss)
        timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
        for key, _ in self.sel.select(timeout):
            if key.data is None:
                try:
                    received = os.read(wake_r, 512)
                except BlockingIOError:
                    received = b""
                for signum in received:
                    self._signal(signum)
            else:
                self._message(key.data)
        self._reap()
        now = time.monotonic()
        if self.next_look is not None and now >= self.next_look and not self.stopping:
            changed = self.watch.changes()
            if changed:
                shown = ", ".join(os.path.relpath(p) for p in changed[:3]) + (", ..." if len(changed) > 3 else "")
                logger.warning("changed: %s: reloading", shown)
                self._reload()
            self.next_look = time.monotonic() + self.config.reload_delay
        if self.next_rss is not None and now >= self.next_rss and not self.stopping:
            self._check_memory()
            self.next_rss = time.monotonic() + RSS_PERIOD
        for w in self.workers:
            if w.kill_at is not None and now >= w.kill_at:
                logger.warning("worker %d did not stop in time: killing it", w.pid)
                w.kill_at = None
                w.proc.kill()
            elif (health is not None and w.last_beat is not None and not w.stopping
                  and now >= w.last_beat + health):
                # Killed, not stopped: a stuck loop would not see SIGTERM. _reap replaces it.
                logger.error("worker %d has not answered for %.1f s (its loop is blocked): killing it",
                             w.pid, now - w.last_beat)
                w.last_beat = None
                w.proc.kill()

    def _check_memory(self):
        limit = self.config.workers_max_rss
        for w in list(self.workers):
            if not w.ready or w.retiring or w.stopping:
                continue
            rss = resident_mib(w.pid)
            if rss is not None and rss > limit:
                w.retiring = True
                logger.warning("worker %d uses %.0f MiB, over --workers-max-rss %d: starting its replacement",
                               w.pid, rss, limit)
                self._spawn(predecessor=w)

    def _metrics_text(self):
        """The endpoint's answer (on its thread: it reads the list of workers, never changes it)."""
        serving = sum(1 for w in list(self.workers) if w.ready and not w.stopping)
        restarts = max(0, self.counters.started - self.target)
        return render(self.counters.totals(), serving, restarts)

    def _release_board_slot(self, slot):
        """A slot of the board is free again: its worker exited (or never started)."""
        if slot is not None:
            self.board[slot] = NOT_ACCEPTING
            self.board_free.append(slot)

    def _free_place(self):
        taken = {w.place for w in self.workers if not w.stopping}
        return next(p for p in range(len(self.workers) + 1) if p not in taken)

    def _spawn(self, predecessor=None, optional=False):
        place = predecessor.place if predecessor is not None else self._free_place()
        cpu = self.cpus[place % len(self.cpus)] if self.cpus else None
        rfd, wfd = os.pipe()
        cmd = [sys.executable, "-m", "swordfish", *self.argv,
               "--fd", str(self.sock.fileno()), "--workers", "1", "--worker-notify-fd", str(wfd)]
        fds = [self.sock.fileno(), wfd]
        slot = None
        if self.counters is not None:
            slot = self.counters.allocate()
            cmd += ["--worker-metrics", f"{self.counters.fd}:{slot}"]
            fds.append(self.counters.fd)
        # With every slot taken (workers not reaped yet), a worker goes without: it accepts
        # as a worker without the board would, one connection per wake-up.
        board_slot = self.board_free.pop(0) if self.board_free else None
        if board_slot is not None:
            cmd += ["--worker-board", f"{self.board.fd}:{board_slot}"]
            fds.append(self.board.fd)
        # argv says it all, but for the secrets (worker_env), which stay out of the process list.
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWORDFISH_")}
        env.update(worker_env(self.config))
        try:
            proc = subprocess.Popen(cmd, env=env, pass_fds=fds, preexec_fn=_preexec(self.prctl, cpu))
        except BaseException:
            if slot is not None:
                self.counters.release(slot)
            self._release_board_slot(board_slot)
            os.close(rfd)
            raise
        finally:
            os.close(wfd)
        os.set_blocking(rfd, False)  # a grandchild may hold the write end after the worker exits
        w = Worker(proc, rfd, predecessor)
        w.slot = slot
        w.board_slot = board_slot
        w.place = place
        w.optional = optional
        self.workers.append(w)
        self.sel.register(rfd, selectors.EVENT_READ, w)
        logger.info("started worker %d%s%s", w.pid, f" to replace {predecessor.pid}" if predecessor else "",
                    f" on CPU {cpu}" if cpu is not None else "")
        return w

    def _message(self, w):
        """Handle what the worker wrote; False once nothing more is waiting in its pipe."""
        try:
            data = os.read(w.rfd, 64)
        except BlockingIOError:
            return False
        if not data:  # the worker exited (or closed the pipe): _reap takes it
            self._forget_pipe(w)
            return False
        messages = data.decode("ascii", "replace")
        if w.ready or "R" in messages:
            w.last_beat = time.monotonic()
        for c in messages:
            if c == "H":
                continue
            if c == "R" and not w.ready:
                w.ready = True
                old = w.predecessor
                w.predecessor = None
                if old is not None and old in self.workers:
                    logger.info("worker %d listens: retiring worker %d", w.pid, old.pid)
                    self._stop(old, retire=True)
            elif c == "M" and not w.retiring and not self.stopping:
                w.retiring = True
                logger.info("worker %d reached max requests: starting its replacement", w.pid)
                self._spawn(predecessor=w)
        return True

    def _reload(self):
        """Replace every serving worker by one that loads the app afresh (SIGHUP, --reload)."""
        for w in self.workers:
            if not w.ready and not w.stopping:
                # Still starting, perhaps with the code as it was before this change.
                if w.predecessor is not None:
                    w.predecessor.retiring = False
                    w.predecessor = None
                self._stop(w)
        serving = [w for w in self.workers if w.ready and not w.stopping and not w.retiring]
        for w in serving:
            w.retiring = True
            self._spawn(predecessor=w, optional=True)
        for _ in range(self.target - len(serving)):  # none left after failed starts
            self._spawn(optional=True)

    def _add_worker(self):
        self.target += 1
        logger.info("SIGTTIN: %d workers", self.target)
        self._spawn(optional=True).added = True

    def _remove_worker(self):
        """Retire the oldest worker that no other is replacing; never the last."""
        if self.target <= 1:
            logger.warning("SIGTTOU: one worker left: it stays")
            return
        self.target -= 1
        oldest = next((w for w in self.workers if not w.stopping and not w.retiring), None)
        logger.info("SIGTTOU: %d workers%s", self.target, f": retiring worker {oldest.pid}" if oldest else "")
        if oldest is not None:
            self._stop(oldest, retire=True)

    def _reopen_logs(self):
        count = reopen_files()
        logger.info("SIGUSR1: reopened %d log file(s); telling the workers", count)
        for w in self.workers:
            try:
                w.proc.send_signal(signal.SIGUSR1)
            except ProcessLookupError:
                pass

    def _forget_pipe(self, w):
        if w.rfd is not None:
            self.sel.unregister(w.rfd)
            os.close(w.rfd)
            w.rfd = None

    def _stop(self, w, retire=False):
        """Stop `w` gracefully: SIGTERM, or SIGUSR2 where another worker serves on (a
        retirement drains its connections: see `Server.retire`)."""
        if w.stopping:
            return
        w.stopping = True
        timeout = self.config.timeout_graceful_shutdown
        if timeout is not None:
            w.kill_at = time.monotonic() + timeout + KILL_MARGIN
        try:
            w.proc.send_signal(signal.SIGUSR2 if retire and w.ready else signal.SIGTERM)
        except ProcessLookupError:
            pass

    def _signal(self, signum):
        if signum == signal.SIGCHLD:
            return  # _reap looks after every wake-up
        if signum == signal.SIGUSR1:
            self._reopen_logs()
            return
        if signum in (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU):
            if self.stopping:
                return
            if signum == signal.SIGHUP:
                logger.warning("SIGHUP: reloading %d workers", self.target)
                self._reload()
            elif signum == signal.SIGTTIN:
                self._add_worker()
            else:
                self._remove_worker()
            return
        if self.stopping:
            logger.warning("second %s: killing the workers", signal.Signals(signum).name)
            for w in self.workers:
                w.proc.kill()
            return
        logger.info("%s: stopping the workers", signal.Signals(signum).name)
        self.stopping = True
        self.sock.close()  # stop accepting now; the workers close their copies as they stop
        for w in self.workers:
            self._stop(w)

    def _reap(self):
        for w in list(self.workers):
            code = w.proc.poll()
            if code is None:
                continue
            # What it wrote before dying may not have been read yet (its `R` and the
            # SIGCHLD can arrive in one select round): read it before judging.
            while w.rfd is not None and self._message(w):
                pass
            self.workers.remove(w)
            self._forget_pipe(w)
            if w.slot is not None:
                self.counters.release(w.slot)
            self._release_board_slot(w.board_slot)
            if self.stopping or w.stopping:
                continue
            if not w.ready and (self.watch is not None or w.optional):
                if w.added:
                    self.target -= 1
                if self.watch is not None:
                    outcome = "waiting for a change"
                elif w.added:
                    outcome = f"{self.target} workers"
                else:
                    outcome = "the workers it was to replace serve on"
                logger.error("worker %d exited with %d before it started: %s", w.pid, code, outcome)
                if w.predecessor is not None:
                    w.predecessor.retiring = False  # it goes on serving, to be replaced at the next change
                continue
            if not w.ready:
                logger.error("worker %d exited with %d before it started: stopping", w.pid, code)
                self.exit_code = code if code > 0 else 1
                self._signal(signal.SIGTERM)
                continue
            if w.retiring and any(x.predecessor is w for x in self.workers):
                logger.warning("worker %d died (exit %d): its replacement is starting", w.pid, code)
                continue
            if sum(1 for x in self.workers if not x.stopping) >= self.target:
                logger.warning("worker %d died (exit %d)", w.pid, code)
                continue
            logger.warning("worker %d died (exit %d): starting a new one", w.pid, code)
            self._spawn()
