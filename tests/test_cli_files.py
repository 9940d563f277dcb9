"""`swordfish serve` and the files a process manager gives it: `--pid-file` (written at
start, the supervisor's pid with workers, removed at exit), `--env-file` (a dotenv file
for the app's environment; what is already set wins), and `--version`. Real processes
over real sockets."""

import subprocess
import sys

import pytest

from apps.serving import ServeProcess, get

APP = "apps.env_app:app"


@pytest.mark.parametrize("workers", [1, 2])
def test_pid_file_holds_the_serving_process_and_is_removed_at_exit(tmp_path, workers):
    pid_file = tmp_path / "swordfish.pid"
    srv = ServeProcess("--port", "0", "--workers", str(workers), "--pid-file", str(pid_file), app=APP)
    try:
        srv.port()
        assert pid_file.read_text() == f"{srv.proc.pid}\n"  # the supervisor's with workers
    finally:
        code = srv.stop()
    assert code == 0, srv.log()
    assert not pid_file.exists()


def test_pid_file_written_by_another_process_since_is_left(tmp_path):
    pid_file = tmp_path / "swordfish.pid"
    srv = ServeProcess("--port", "0", "--pid-file", str(pid_file), app=APP)
    try:
        srv.port()
        pid_file.write_text("12345\n")  # a newer server took the file over
    finally:
        srv.stop()
    assert pid_file.read_text() == "12345\n"


def test_pid_file_that_cannot_be_written_is_a_clear_error(tmp_path):
    srv = ServeProcess("--port", "0", "--pid-file", str(tmp_path / "missing" / "x.pid"), app=APP)
    assert srv.wait() == 2
    assert "cannot write --pid-file" in srv.log()


@pytest.mark.parametrize("workers", [1, 2])
def test_env_file_sets_the_apps_environment(tmp_path, workers):
    env = tmp_path / "app.env"
    env.write_text("# the app's settings\n"
                   "GREETING=hello from the file\n"
                   "export QUOTED='a b # not a comment'\n"
                   "ALREADY=from the file\n")
    srv = ServeProcess("--port", "0", "--workers", str(workers), "--env-file", str(env), app=APP,
                       env={"ALREADY": "from the environment"})
    try:
        port = srv.port()
        assert get(port, "/GREETING") == (200, b"hello from the file")
        assert get(port, "/QUOTED") == (200, b"a b # not a comment")
        assert get(port, "/ALREADY") == (200, b"from the environment")
        assert get(port, "/NOT_THERE") == (404, b"unset")
    finally:
        assert srv.stop() == 0, srv.log()


def test_env_file_does_not_configure_swordfish(tmp_path):
    """SWORDFISH_* settings come from the real environment and the command line only."""
    env = tmp_path / "app.env"
    env.write_text("SWORDFISH_PORT=1\n")
    srv = ServeProcess("--port", "0", "--env-file", str(env), app=APP)
    try:
        port = srv.port()
        assert port != 1
        assert get(port, "/SWORDFISH_PORT") == (200, b"1")  # the app sees it, though
    finally:
        srv.stop()


def test_missing_env_file_is_a_clear_error(tmp_path):
    srv = ServeProcess("--port", "0", "--env-file", str(tmp_path / "nope.env"), app=APP)
    assert srv.wait() == 2
    assert "cannot load --env-file: no such file" in srv.log()


def test_version():
    out = subprocess.run([sys.executable, "-m", "swordfish", "--version"], capture_output=True, text=True,
                         check=True).stdout
    import swordfish
    assert out.startswith(f"swordfish {swordfish.__version__} (")
    assert sys.version.split()[0] in out


def test_pid_and_env_files_are_not_given_to_workers(tmp_path):
    """The workers inherit the environment and the supervisor owns the pid file: neither
    option is on a worker's command line."""
    from swordfish.server.cli import worker_argv
    from swordfish.server.config import Config
    argv = worker_argv(Config(APP, workers=2, pid_file=str(tmp_path / "p"), env_file=str(tmp_path / "e")))
    assert "--pid-file" not in argv and "--env-file" not in argv
