"""What the RSGI suite's apps serve, shared by the RSGI app and its ASGI twin: the bodies
of granian's RSGI benchmark routes (bytes and str of 10 B, 1 KiB, 10 KiB and 100 KiB), the
hello and 10 KiB bodies of the HTTP suite, and the file (50 KiB, written once per machine)."""

import os
import tempfile

HELLO = b"Hello, world!"
SIZES = {"10": 10, "1k": 1024, "10k": 10 * 1024, "100k": 100 * 1024}
BYTES = {name: b"x" * n for name, n in SIZES.items()}
TEXT = {name: "x" * n for name, n in SIZES.items()}
FILE_SIZE = 50 * 1024


def media_file():
    """A 50 KiB file both apps send (its path), made if it is not there."""
    path = os.path.join(tempfile.gettempdir(), f"swordfish-bench-media-{FILE_SIZE}")
    if not os.path.exists(path) or os.path.getsize(path) != FILE_SIZE:
        with open(path + ".tmp", "wb") as f:
            f.write(bytes(range(256)) * (FILE_SIZE // 256))
        os.replace(path + ".tmp", path)
    return path


MEDIA = media_file()
