"""gunicorn's request corpus (`tests/requests/` of its sdist), for the tests that replay
its cases against swordfish. It is fetched from PyPI at the version requirements-dev.txt
pins and cached in tests/.gunicorn-corpus/ (not part of this repository).

A case's `.http` file is the request as text: its line breaks are layout, `\\r\\n` stands
for CRLF and `\\xHH` for a byte."""

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

TESTS = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(TESTS, ".gunicorn-corpus")


def pinned_version():
    with open(os.path.join(os.path.dirname(TESTS), "requirements-dev.txt")) as f:
        m = re.search(r"^gunicorn==([\w.]+)", f.read(), re.M)
    assert m, "requirements-dev.txt pins no gunicorn"
    return m.group(1)


def corpus_dir():
    """The directory of the pinned version's tests/requests/ (valid/, invalid/), fetched once."""
    version = pinned_version()
    where = os.path.join(CACHE, version)
    if os.path.isdir(where):
        return where
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        "--dest", tmp, f"gunicorn=={version}"], check=True)
        [sdist] = [f for f in os.listdir(tmp) if f.endswith(".tar.gz")]
        prefix = f"{sdist[:-len('.tar.gz')]}/tests/requests/"
        unpacked = os.path.join(tmp, "requests")
        with tarfile.open(os.path.join(tmp, sdist)) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.startswith(prefix) and member.name.endswith(".http"):
                    target = os.path.join(unpacked, member.name[len(prefix):])
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    with tar.extractfile(member) as src, open(target, "wb") as dst:
                        shutil.copyfileobj(src, dst)
        os.makedirs(CACHE, exist_ok=True)
        os.replace(unpacked, where)  # whole or not at all, for a run that was interrupted
    return where


def decode(text):
    """The bytes a case's text stands for."""
    data = text.replace(b"\n", b"").replace(b"\\r\\n", b"\r\n")
    return re.sub(rb"\\x([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]), data)


def case(kind, name):
    """The raw bytes of case `name` (say "pp_01") of `kind` ("valid" or "invalid")."""
    with open(os.path.join(corpus_dir(), kind, name + ".http"), "rb") as f:
        return decode(f.read())
