"""Polling before sleeping (SWORDFISH_POLL_SPIN_US): the loop polls without sleeping only
while its events come closer together than the limit, and a signal that arrives while it
polls is handled at once.

The loop's CPU time tells whether it polled: a loop that sleeps between events spends
little of the wall time on the CPU, one that polls spends nearly all of it."""

import asyncio
import signal
import socket
import threading
import time

import pytest

from conftest import run_on

LIMIT_VAR = "SWORDFISH_POLL_SPIN_US"


def new_loop(sf, monkeypatch, limit_us):
    monkeypatch.setenv(LIMIT_VAR, str(limit_us))
    return sf.new_event_loop()


def cpu_share_while_fed(loop, *gaps, duration=0.4):
    """Feed the loop one byte every `gap` seconds from a thread, for 0.2 s per gap given
    and then for `duration` at the last one; return the loop thread's CPU time over the
    wall time of that last part."""
    a, b = socket.socketpair()
    a.setblocking(False)
    stop = threading.Event()
    gap = [gaps[0]]

    def feed():
        while not stop.is_set():
            b.send(b"x")
            time.sleep(gap[0])

    async def main():
        loop.add_reader(a, a.recv, 4096)
        feeder = threading.Thread(target=feed)
        feeder.start()
        try:
            for g in gaps:
                gap[0] = g
                await asyncio.sleep(0.2)  # the window settles
            wall0, cpu0 = time.monotonic(), time.thread_time()
            await asyncio.sleep(duration)
            return (time.thread_time() - cpu0) / (time.monotonic() - wall0)
        finally:
            stop.set()
            await loop.run_in_executor(None, feeder.join)
            loop.remove_reader(a)

    try:
        return run_on(loop, main())
    finally:
        a.close()
        b.close()


def cpu_share(sf, monkeypatch, limit_us, *gaps):
    loop = new_loop(sf, monkeypatch, limit_us)
    try:
        return cpu_share_while_fed(loop, *gaps)
    finally:
        loop.close()


def test_events_closer_than_the_limit_are_polled_for(sf, monkeypatch):
    share = cpu_share(sf, monkeypatch, 20_000, 0.001)
    assert share > 0.5, f"the loop slept between events 1 ms apart (CPU {share:.0%})"


def test_the_limit_at_zero_turns_polling_off(sf, monkeypatch):
    share = cpu_share(sf, monkeypatch, 0, 0.001)
    assert share < 0.3, f"the loop polled with polling turned off (CPU {share:.0%})"


def test_events_further_apart_than_the_limit_are_slept_for(sf, monkeypatch):
    share = cpu_share(sf, monkeypatch, 3_000, 0.005)
    assert share < 0.3, f"the loop polled for events 5 ms apart, limit 3 ms (CPU {share:.0%})"


def test_the_loop_stops_polling_when_its_events_thin_out(sf, monkeypatch):
    share = cpu_share(sf, monkeypatch, 20_000, 0.001, 0.03)
    assert share < 0.3, f"the loop kept polling for events 30 ms apart, limit 20 ms (CPU {share:.0%})"


def test_a_signal_while_the_loop_polls_is_handled_at_once(sf, monkeypatch):
    # A limit of one second, and waits of 50 ms open the window to 65 ms: the next wait
    # polls that long before it sleeps, and the signal comes 10 ms into it.
    loop = new_loop(sf, monkeypatch, 1_000_000)
    a, b = socket.socketpair()
    main_thread = threading.main_thread().ident
    got = loop.create_future()

    def on_usr1(signum, frame):
        loop.call_soon_threadsafe(lambda: got.done() or got.set_result(time.monotonic()))

    sent = []

    def send_soon():
        time.sleep(0.01)
        sent.append(time.monotonic())
        signal.pthread_kill(main_thread, signal.SIGUSR1)

    async def main():
        loop.add_reader(a, a.recv, 1)
        try:
            for _ in range(14):
                await asyncio.sleep(0.05)
            sender = threading.Thread(target=send_soon)
            sender.start()
            try:
                handled = await asyncio.wait_for(got, 5)
            finally:
                sender.join()
            return handled - sent[0]
        finally:
            loop.remove_reader(a)

    old = signal.signal(signal.SIGUSR1, on_usr1)
    try:
        latency = run_on(loop, main())
    finally:
        signal.signal(signal.SIGUSR1, old)
        loop.close()
        a.close()
        b.close()
    assert latency < 0.04, f"the handler ran {latency * 1000:.0f} ms after the signal"


@pytest.mark.parametrize("value", ["", "many", "-5"])
def test_a_limit_that_is_not_a_number_keeps_the_default(sf, monkeypatch, value):
    loop = new_loop(sf, monkeypatch, value)
    try:
        assert run_on(loop, asyncio.sleep(0.001, "ok")) == "ok"
    finally:
        loop.close()
