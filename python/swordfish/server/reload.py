"""`--reload`: which files the supervisor watches, and how it notices that they changed.

The watch polls modification times (every `--reload-delay` seconds), as uvicorn's stat
reloader does: nothing to install, and the same on every platform. A snapshot maps each
watched file to its (mtime, size); comparing two snapshots gives the files that were
added, removed or changed.

A file is watched if its name matches one of the include patterns (`*.py` by default) and
none of the exclude patterns. Directories that are never worth walking are skipped:
hidden ones (`.git`, `.venv`, ...), `__pycache__`, `node_modules`, `site-packages`, any
directory matching an exclude pattern, and virtual environments (a directory holding a
`pyvenv.cfg`), where a watch on the current directory would otherwise spend its time.
"""

import fnmatch
import os

DEFAULT_INCLUDES = ["*.py"]
DEFAULT_EXCLUDES = [".*", "*.py[cod]", "*~"]  # hidden files (editor swap files too), bytecode, backups
SKIPPED_DIRS = {"__pycache__", "node_modules", "site-packages"}


def _matches(name, patterns):
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


class FileWatch:
    def __init__(self, dirs, includes=None, excludes=None):
        self.dirs = [os.path.abspath(d) for d in dirs]
        self.includes = list(includes or DEFAULT_INCLUDES)
        self.excludes = DEFAULT_EXCLUDES + list(excludes or [])
        self.files = self.snapshot()

    def _skip_dir(self, path, name):
        return (name.startswith(".") or name in SKIPPED_DIRS or _matches(name, self.excludes)
                or os.path.exists(os.path.join(path, "pyvenv.cfg")))

    def snapshot(self):
        """{path: (mtime_ns, size)} of every watched file now."""
        files = {}
        for top in self.dirs:
            for root, dirs, names in os.walk(top):
                dirs[:] = [d for d in dirs if not self._skip_dir(os.path.join(root, d), d)]
                for name in names:
                    if not _matches(name, self.includes) or _matches(name, self.excludes):
                        continue
                    path = os.path.join(root, name)
                    try:
                        st = os.stat(path)
                    except OSError:  # removed while walking
                        continue
                    files[path] = (st.st_mtime_ns, st.st_size)
        return files

    def changes(self):
        """The watched files added, removed or modified since the last call (sorted)."""
        now = self.snapshot()
        before, self.files = self.files, now
        return sorted(p for p in before.keys() | now.keys() if before.get(p) != now.get(p))
