"""A private build of swordfish from a git commit, for long benchmark runs.

The shared working tree's `python/swordfish` can be rebuilt by anyone during
a 75-minute run, which would change what is measured half-way. `build()`
exports the commit with `git archive`, builds a wheel for this interpreter
with maturin and unpacks it under results/, so every server of the run loads
the same code, and the report can name the exact commit.
"""
import glob
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

import procs

RESULTS = os.path.join(procs.HERE, "results")
SOURCE = os.path.join(RESULTS, "swordfish-src")
# Kept between snapshots so the dependencies are not rebuilt every time.
TARGET = os.path.join(RESULTS, "swordfish-target")


def find_maturin():
    tag = "%d.%d" % sys.version_info[:2]
    for venv in (f".venv-{tag}", ".venv"):
        path = os.path.join(procs.REPO, venv, "bin", "maturin")
        if os.access(path, os.X_OK):
            return path
    return shutil.which("maturin")


def build(commit="HEAD"):
    """Return (directory holding the swordfish package, short commit)."""
    sha = subprocess.run(["git", "-C", procs.REPO, "rev-parse", "--short", commit],
                         capture_output=True, text=True, check=True).stdout.strip()
    dest = os.path.join(RESULTS, f"swordfish-{sha}-py%d.%d" % sys.version_info[:2])
    if os.path.isdir(os.path.join(dest, "swordfish")):
        return dest, sha
    maturin = find_maturin()
    if maturin is None:
        raise RuntimeError("no maturin (make build in the repository installs it)")
    shutil.rmtree(SOURCE, ignore_errors=True)
    os.makedirs(SOURCE)
    archive = os.path.join(RESULTS, "swordfish-src.tar")
    with open(archive, "wb") as f:
        subprocess.run(["git", "-C", procs.REPO, "archive", sha], stdout=f, check=True)
    with tarfile.open(archive) as tar:
        # The "data" filter exists from 3.12 (and late 3.10/3.11 patches on).
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(SOURCE, **safe)
    os.remove(archive)
    wheels = os.path.join(SOURCE, "wheels")
    print(f"echo: building swordfish {sha} for Python %d.%d (a few minutes)"
          % sys.version_info[:2], file=sys.stderr, flush=True)
    subprocess.run([maturin, "build", "--release", "--quiet", "-i", sys.executable,
                    "-o", wheels], cwd=SOURCE, check=True,
                   env=dict(os.environ, CARGO_TARGET_DIR=TARGET), stdout=sys.stderr)
    (wheel,) = glob.glob(os.path.join(wheels, "*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(dest + ".tmp")
    os.rename(dest + ".tmp", dest)
    return dest, sha
