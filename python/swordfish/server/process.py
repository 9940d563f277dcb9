"""What a process manager hands the server besides its options: a pid file to write, a
dotenv file for the app's environment, and a socket systemd passed (socket activation)."""

import os


# systemd's first passed descriptor (sd_listen_fds(3): SD_LISTEN_FDS_START).
LISTEN_FDS_START = 3


def activated_socket(environ=os.environ):
    """The descriptor of a socket systemd passed to this process (socket activation:
    LISTEN_PID is this process, LISTEN_FDS the count), or None. The variables are removed
    so that no child takes them for its own; ValueError if there is more than one socket."""
    if environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    count = environ.get("LISTEN_FDS", "")
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        environ.pop(name, None)
    if count == "1":
        return LISTEN_FDS_START
    if count in ("", "0"):
        return None
    raise ValueError(f"systemd passed {count} sockets; swordfish serves one (name it with --fd)")


def load_env_file(path):
    """Set the variables of the dotenv file `path` that are not set yet; ValueError with
    the reason when it cannot."""
    if not os.path.isfile(path):
        raise ValueError(f"no such file: {path!r}")
    try:
        from dotenv import load_dotenv
    except ImportError:
        raise ValueError("--env-file needs python-dotenv: pip install 'swordfish[dotenv]'") from None
    load_dotenv(path, override=False)


class PidFile:
    """The process id in a file while the server runs; the file is removed at exit unless
    another process wrote its own there since."""

    def __init__(self, path):
        self.path = path
        self.text = f"{os.getpid()}\n"

    def __enter__(self):
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(self.text)
        os.replace(tmp, self.path)  # whole or not at all, for whoever reads it
        return self

    def __exit__(self, *exc):
        try:
            with open(self.path) as f:
                ours = f.read() == self.text
            if ours:
                os.unlink(self.path)
        except OSError:
            pass
