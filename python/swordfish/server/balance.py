"""How the supervisor's workers share connections: a board of open-connection counts.

The workers accept from one shared queue (supervisor.py says why), and every worker's loop
is woken for each connection queued. Whoever calls accept() first gets it, so a burst of
connections goes mostly to the worker that happens to be running: with 256 connections
opened at once to two workers, one held 3-4 times as many as the other, and 400 users of
the WSGI report 2.4 times (docs/design.md, "Workers share connections").

The board is a small shared memory file (a memfd the supervisor makes and every worker
inherits) with one slot per worker: the number of connections the worker has open, or
`NOT_ACCEPTING` for a slot that is free or whose worker stopped accepting. A worker writes
its own slot before each accept and reads the others': it accepts while it holds no more
than the fewest any accepting worker holds, plus one, plus an eighth of that (max/min
about 1.13 once the counts are large). Otherwise it stops watching the listening socket
for a while and looks again; the others, being below, take what is queued. Counts are
written when a worker accepts and refreshed every `REFRESH` seconds, so a closed
connection can leave a count higher than it is for that long: a worker then takes more
than its share, never less.

A worker whose count is the lowest but whose loop is stuck (a blocking app on the loop
thread) must not leave the queue to nobody: a worker that has refused for `GIVE_UP`
seconds accepts one connection anyway, and another after each further `GIVE_UP`. The
pause starts at `PAUSE` and doubles up to `GIVE_UP`, so a worker over its share while
nothing changes looks again about every `GIVE_UP` seconds, not every millisecond.

Slots are single-writer (each worker its own; the supervisor a slot whose worker has
exited), 8-byte aligned: a read never sees half a write on the platforms swordfish runs on.
"""

import mmap
import os
import struct
import time

NOT_ACCEPTING = -1
SLOT = struct.Struct("q")
PAUSE = 0.001  # the first pause of a worker over its share (seconds)
GIVE_UP = 0.05  # the longest pause, and how long a worker refuses before it accepts one anyway
REFRESH = 0.1  # how often a worker rewrites its count (connections closed since it accepted)


class ConnectionBoard:
    """The shared slots, mapped in this process. The supervisor makes it (`create`); a
    worker maps the supervisor's descriptor (`attach`)."""

    def __init__(self, fd, slots):
        self.fd = fd
        self.slots = slots
        self._map = mmap.mmap(fd, slots * SLOT.size)
        self._view = memoryview(self._map).cast("q")

    @classmethod
    def create(cls, slots):
        fd = os.memfd_create("swordfish-connections", os.MFD_CLOEXEC)  # workers get it by pass_fds
        os.ftruncate(fd, slots * SLOT.size)
        board = cls(fd, slots)
        for i in range(slots):
            board[i] = NOT_ACCEPTING
        return board

    @classmethod
    def attach(cls, fd):
        # Mapped, the descriptor is needed no more: the app's own child processes do not
        # inherit it.
        os.set_inheritable(fd, False)
        return cls(fd, os.fstat(fd).st_size // SLOT.size)

    def __getitem__(self, slot):
        return self._view[slot]

    def __setitem__(self, slot, count):
        self._view[slot] = count

    def counts(self):
        return self._view.tolist()


class AcceptGate:
    """One worker's side of the board: whether it may accept now (`pause()`), given its
    own open connections (`count()`)."""

    def __init__(self, board, slot, count, clock=time.monotonic):
        self.board, self.slot, self.count = board, slot, count
        self.clock = clock
        self.refused_since = None  # when this run of refusals began
        self.last_asked = None  # when pause() was last called
        self.next_pause = PAUSE

    def publish(self):
        """Write this worker's current count to its slot."""
        self.board[self.slot] = self.count()

    def withdraw(self):
        """This worker accepts no more (it shuts down): the others stop weighing it."""
        self.board[self.slot] = NOT_ACCEPTING

    def over_share(self, mine):
        others = [n for i, n in enumerate(self.board.counts()) if i != self.slot and n != NOT_ACCEPTING]
        if not others:
            return False
        fewest = min(others)
        return mine > fewest + 1 + fewest // 8

    def pause(self):
        """0 if this worker may accept one connection now, else how many seconds to stop
        watching the listening socket before asking again."""
        mine = self.count()
        self.board[self.slot] = mine
        now = self.clock()
        # Asked again within a pause and a bit: connections are still waiting. Asked after
        # longer, the socket had been quiet: a new run of refusals begins.
        if self.last_asked is None or now - self.last_asked > 2 * GIVE_UP:
            self.refused_since = None
            self.next_pause = PAUSE
        self.last_asked = now
        stuck = self.refused_since is not None and now - self.refused_since >= GIVE_UP
        if stuck or not self.over_share(mine):
            self.refused_since = None
            self.next_pause = PAUSE
            self.board[self.slot] = mine + 1  # the connection it is about to take
            return 0
        if self.refused_since is None:
            self.refused_since = now
        pause, self.next_pause = self.next_pause, min(self.next_pause * 2, GIVE_UP)
        return pause
