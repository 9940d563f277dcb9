"""The workers' connection board (swordfish/server/balance.py) on its own, with a clock the
test moves: when a worker may accept, how long it pauses, when it gives up waiting for a
worker that does not accept, and slots that are free or withdrawn. Served through the
supervisor in test_http_workers.py."""

import pytest

from swordfish.server.balance import GIVE_UP, NOT_ACCEPTING, PAUSE, AcceptGate, ConnectionBoard


class Worker:
    """One worker's gate on a shared board, its open connections set by the test."""

    def __init__(self, board, slot, clock):
        self.open = 0
        self.gate = AcceptGate(board, slot, lambda: self.open, clock=lambda: clock[0])

    def accepts(self):
        """Asks the gate; counts the connection in when it may accept."""
        wait = self.gate.pause()
        if wait == 0:
            self.open += 1
        return wait


@pytest.fixture
def world():
    board = ConnectionBoard.create(4)
    clock = [100.0]
    return board, clock, Worker(board, 0, clock), Worker(board, 1, clock)


def test_a_new_board_has_no_accepting_worker():
    board = ConnectionBoard.create(3)
    assert board.counts() == [NOT_ACCEPTING] * 3
    assert ConnectionBoard.attach(board.fd).slots == 3


def test_alone_a_worker_always_accepts(world):
    _, _, a, _ = world
    assert [a.accepts() for _ in range(50)] == [0] * 50
    assert a.open == 50


def test_a_worker_ahead_by_more_than_its_share_pauses(world):
    board, _, a, b = world
    b.gate.publish()  # b accepts, with nothing open
    assert [a.accepts() for _ in range(2)] == [0, 0]
    assert a.accepts() == PAUSE  # 2 open against 0: over 0 + 1
    assert board[0] == 2
    assert b.accepts() == 0 and b.accepts() == 0
    assert a.accepts() == 0  # 2 against 2


def test_the_share_grows_by_an_eighth(world):
    _, _, a, b = world
    b.open = 80
    b.gate.publish()
    a.open = 80 + 1 + 10 + 1
    assert a.accepts() == PAUSE
    a.open -= 1  # one of its connections closed
    assert a.accepts() == 0


def test_pauses_double_up_to_the_give_up_time(world):
    _, clock, a, b = world
    b.gate.publish()
    a.open = 10
    pauses = []
    for _ in range(5):
        pauses.append(a.accepts())
        clock[0] += pauses[-1]
    assert pauses[:3] == [PAUSE, 2 * PAUSE, 4 * PAUSE]
    assert max(pauses) <= GIVE_UP


def test_refusing_for_the_give_up_time_accepts_one(world):
    _, clock, a, b = world
    b.gate.publish()
    a.open = 10
    waited = 0.0
    while (wait := a.accepts()) != 0:
        clock[0] += wait
        waited += wait
    assert GIVE_UP <= waited < 2 * GIVE_UP
    assert a.open == 11
    assert a.accepts() == PAUSE  # and refuses again from there


def test_a_quiet_socket_starts_a_new_run_of_refusals(world):
    _, clock, a, b = world
    b.gate.publish()
    a.open = 10
    assert a.accepts() == PAUSE
    clock[0] += 10 * GIVE_UP  # nothing queued for a long time, then a connection
    assert a.accepts() == PAUSE  # not taken as a refusal that lasted all along


def test_withdrawn_and_free_slots_are_not_weighed(world):
    board, _, a, b = world
    b.gate.publish()
    a.open = 10
    assert a.accepts() == PAUSE
    b.gate.withdraw()
    assert board[1] == NOT_ACCEPTING
    assert a.accepts() == 0
