"""Mutated requests against a live server: whatever arrives, the server answers with
well-formed responses or closes, never hangs or stops serving.

The mutations start from the valid half of the raw-request corpus and make one to four
small edits (a byte replaced, inserted, removed, a span repeated), with a fixed seed so a
failure can be replayed. The client half-closes after sending, so a request left incomplete
by its mutation ends at the end of the stream instead of waiting for the header timeout."""

import asyncio
import random

from httputil import echo_app, port_of, read_response, serving
from test_http_corpus import VALID

# The grammar's own bytes are chosen more often than arbitrary ones.
SPECIAL = b"\r\n :;,\t0aAfF-+_/?#%\x00\x7f\xff"
# Every status the server gives for a request, good or bad.
STATUSES = {200, 400, 413, 414, 431, 501}
SEED = 20261123
COUNT = 1000


def mutate(raw, rng):
    data = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(0, len(data))
        byte = rng.randrange(256) if rng.random() < 0.3 else rng.choice(SPECIAL)
        kind = rng.randrange(4)
        if kind == 0 and at < len(data):
            data[at] = byte
        elif kind == 1:
            data.insert(at, byte)
        elif kind == 2 and at < len(data):
            del data[at]
        else:
            data[at:at] = data[at:at + rng.randint(1, 12)]
    return bytes(data)


async def _exchange(port, raw):
    """Send `raw`, half-close, and read responses until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        writer.write_eof()
        responses = []
        while True:
            response = await asyncio.wait_for(read_response(reader), 5)
            if response is None:
                return responses
            responses.append(response)
    finally:
        writer.close()


def test_mutated_requests_get_well_formed_answers(loop):
    rng = random.Random(SEED)
    cases = [mutate(rng.choice(VALID)[1], rng) for _ in range(COUNT)]

    async def main():
        seen = set()
        async with serving(echo_app, timeout_header_read=5) as server:
            port = port_of(server)
            for raw in cases:
                try:
                    responses = await _exchange(port, raw)
                except (ConnectionResetError, BrokenPipeError):
                    # The server may reset a connection it refused while bytes it never
                    # read were still arriving; that is a close, not a malformed answer.
                    responses = []
                statuses = [r.status for r in responses]
                assert set(statuses) <= STATUSES, (raw, statuses)
                # A refusal ends the connection: nothing is answered after it.
                refused = [i for i, s in enumerate(statuses) if s != 200]
                assert not refused or refused[0] == len(statuses) - 1, (raw, statuses)
                if refused:
                    assert responses[-1].header("connection") == "close", raw
                seen.update(statuses)
            # Still serving normally after all of it.
            final = await _exchange(port, b"GET /after HTTP/1.1\r\nHost: a\r\n\r\n")
            assert [r.header("x-path") for r in final] == ["/after"]
        return seen

    seen = loop.run_until_complete(asyncio.wait_for(main(), 120))
    # The mutations reach both sides of the grammar.
    assert 200 in seen and 400 in seen, seen
