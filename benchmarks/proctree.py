"""A benchmark server's process tree, read from /proc: the suites measure a server's CPU
time and memory over all its processes (a supervisor and its workers), and some figures
over all their threads (`thread_sum`)."""
import os


def tree(pid):
    """pid and all its descendants."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, ()))
    return found


def thread_sum(pid, name, value):
    """The sum of value(text) over /proc/P/task/T/<name> of every thread T of every process P
    in pid's tree (threads that end while it reads are skipped)."""
    total = 0
    for p in tree(pid):
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/{name}") as f:
                    total += value(f.read())
            except (OSError, ValueError, IndexError):
                continue
    return total


def tree_rss_bytes(pid):
    """The resident memory of a process and its live descendants."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration, ValueError):
            continue
    return total
