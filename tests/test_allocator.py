"""The server process's malloc settings (src/allocator.rs): changed unless the user set
glibc's own variables; each case in a fresh interpreter, since the settings are the process's."""

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt"
)

PROBE = "from swordfish import _native; print(_native.tune_allocator())"


def _tuned(**env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
                         check=True, timeout=60)
    return out.stdout.strip()


def test_tuned_by_default():
    assert _tuned() == "True"


@pytest.mark.parametrize("var", ["MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"])
def test_left_alone_when_the_user_chose(var):
    assert _tuned(**{var: "131072"}) == "False"
