"""Writes the fuzz targets' seed corpora (fuzz/seeds/TARGET/, kept in the repository) from
what the tests use: gunicorn's request corpus (tests/gunicorn_corpus.py; its PROXY cases
too), the chunked bodies among its requests, the PROXY headers and WebSocket frames of
tests/test_proxy_protocol.py and tests/test_ws_protocol.py, deflated messages, and static
paths. libFuzzer adds what it finds to fuzz/corpus/ (not kept); `-merge=1` into the seeds
keeps a run's new coverage.

    python tools/fuzz_seeds.py
"""

import hashlib
import os
import struct
import sys
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))

import gunicorn_corpus  # noqa: E402

SEEDS = os.path.join(REPO, "fuzz", "seeds")


def write(target, data):
    directory = os.path.join(SEEDS, target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def frame(opcode, payload, fin=True, rsv1=False, key=b"\x01\x02\x03\x04"):
    head = bytes([0x80 * fin | 0x40 * rsv1 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def deflated(data):
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    out = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    return out[:-4] if out.endswith(b"\x00\x00\xff\xff") else out


def main():
    corpus = gunicorn_corpus.corpus_dir()
    for kind in ("valid", "invalid"):
        for name in sorted(os.listdir(os.path.join(corpus, kind))):
            if not name.endswith(".http"):
                continue
            raw = gunicorn_corpus.case(kind, name[:-5])
            if raw.startswith(b"PROXY") or raw.startswith(b"\r\n\r\n\x00\r\nQUIT\n"):
                write("proxy_protocol", raw)
                continue
            write("http_head", raw)
            head, sep, body = raw.partition(b"\r\n\r\n")
            if sep and b"chunked" in head.lower():
                write("chunked", body)
    for header in (b"PROXY TCP4 192.168.0.1 10.0.0.2 56324 443\r\n", b"PROXY TCP6 2001:db8::1 ::1 4000 8080\r\n",
                   b"PROXY UNKNOWN\r\n", b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n"):
        write("proxy_protocol", header + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    v2 = b"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c" + bytes([127, 0, 0, 1, 10, 0, 0, 2]) + struct.pack("!HH", 4000, 80)
    write("proxy_protocol", v2)
    write("proxy_protocol", b"\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00")  # LOCAL
    for frames in ([frame(1, b"hello")], [frame(2, bytes(range(256)))], [frame(9, b"ping"), frame(10, b"")],
                   [frame(1, "héllo wörld".encode()[:3], fin=False), frame(0, "héllo wörld".encode()[3:])],
                   [frame(8, struct.pack("!H", 1000) + b"bye")], [frame(1, deflated(b"compressed " * 20), rsv1=True)],
                   [frame(2, b"x" * 70000)]):
        write("ws_reader", b"".join(frames))
    for data in (b"", b"a", b"hello hello hello hello", bytes(range(256)) * 8, b"\x00" * 100000):
        write("ws_inflate", deflated(data))
    for path in (b"a.txt", b"sub/b.txt", b"sub/../a.txt", b"%2e%2e/secret.txt", b"outside-link", b"inside-link",
                 b"etc/passwd", b"up/root/a.txt", b"a.txt%00", b"sub//b.txt", b"./a.txt", b"%", b"sub/deeper/"):
        write("static_files", path)
    for value in (b"bytes=0-99", b"bytes=-5", b"bytes=10-", b"bytes=5-1", b"bytes=0-0,2-3", b"items=1-2",
                  b"Sun, 06 Nov 1994 08:49:37 GMT", b"Sunday, 06-Nov-94 08:49:37 GMT", b"Sun Nov  6 08:49:37 1994",
                  b'"tag", W/"weak"', b"*"):
        write("static_files", value)
    for target in sorted(os.listdir(SEEDS)):
        print(f"{target}: {len(os.listdir(os.path.join(SEEDS, target)))} seeds")


if __name__ == "__main__":
    main()
