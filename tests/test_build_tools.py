"""The wheel check of `make wheels` (tools/check-wheels.sh), run against stand-in
`auditwheel` programs on PATH: a report of any length is read whole, a wheel that is not
manylinux2014 or that auditwheel cannot read fails with the report shown."""

import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(REPO, "tools", "check-wheels.sh")

GOOD = 'swordfish.whl is consistent with the following platform tag: "manylinux_2_17_x86_64".'


def fake_auditwheel(tmp_path, first_line, rest_bytes=0, status=0):
    """An `auditwheel` that prints `first_line`, then `rest_bytes` more of report, then
    exits with `status` (a Python program, as auditwheel is: a closed pipe raises)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    program = bindir / "auditwheel"
    program.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        print({first_line!r}, flush=True)
        line = "The wheel references external versioned symbols in these system-provided shared libraries\\n"
        for _ in range({rest_bytes} // len(line)):
            sys.stdout.write(line)
        sys.stdout.flush()
        sys.exit({status})
        """))
    program.chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}


def check(env, *wheels):
    return subprocess.run([CHECK, *wheels], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("rest_bytes", [0, 1 << 20])
def test_a_manylinux2014_wheel_passes_whatever_the_length_of_the_report(tmp_path, rest_bytes):
    # A megabyte after the tag: a reader that stopped at the tag would leave auditwheel
    # writing into a closed pipe, every time.
    env = fake_auditwheel(tmp_path, GOOD, rest_bytes)
    r = check(env, "a.whl", "b.whl")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""


def test_a_wheel_of_a_newer_glibc_fails_with_the_report(tmp_path):
    env = fake_auditwheel(tmp_path, 'x.whl is consistent with the following platform tag: "manylinux_2_34_x86_64".')
    r = check(env, "x.whl")
    assert r.returncode == 1
    assert "manylinux_2_34_x86_64" in r.stderr
    assert "check-wheels: x.whl is not manylinux2014" in r.stderr


def test_a_wheel_auditwheel_cannot_read_fails(tmp_path):
    env = fake_auditwheel(tmp_path, GOOD, status=1)
    r = check(env, "broken.whl")
    assert r.returncode == 1
    assert "check-wheels: auditwheel could not read broken.whl" in r.stderr


def test_no_wheel_is_a_usage_error():
    r = subprocess.run([CHECK], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "usage" in r.stderr
