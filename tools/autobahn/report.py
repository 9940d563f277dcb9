"""Read a fuzzingclient report (index.json and the JSON file of each case beside it) and write
the markdown summary of docs/autobahn.md: counts per outcome, then every case that is not OK
with its description, behavior and the reasons the report gives."""

import collections
import datetime
import html
import json
import os
import re

# Autobahn's outcomes of a case, best first; a case is counted by its `behavior`.
OUTCOMES = ["OK", "NON-STRICT", "INFORMATIONAL", "FAILED", "UNIMPLEMENTED"]
LISTED = ["FAILED", "UNIMPLEMENTED", "NON-STRICT", "INFORMATIONAL"]
BAD = {"FAILED", "UNIMPLEMENTED"}


def case_key(case_id):
    return tuple(int(p) if p.isdigit() else 0 for p in case_id.split("."))


def load(index_path, agent):
    """The cases of `agent` in id order, each a dict of id, behavior, behaviorClose,
    description, expectation, result, resultClose."""
    with open(index_path) as f:
        index = json.load(f)
    cases = index.get(agent, {})
    outdir = os.path.dirname(index_path)
    out = []
    for case_id in sorted(cases, key=case_key):
        entry = cases[case_id]
        detail = {}
        if entry.get("reportfile"):
            path = os.path.join(outdir, entry["reportfile"])
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    detail = json.load(f)
        out.append({
            "id": case_id,
            "behavior": entry.get("behavior", "?"),
            "behaviorClose": entry.get("behaviorClose", "?"),
            "description": detail.get("description", ""),
            "expectation": detail.get("expectation", ""),
            "result": detail.get("result", ""),
            "resultClose": detail.get("resultClose", ""),
        })
    return out


def counts(cases):
    tally = collections.Counter(c["behavior"] for c in cases)
    # Outcomes outside Autobahn's five (there should be none) still get a row.
    return [(name, tally[name]) for name in OUTCOMES] + \
        sorted((k, v) for k, v in tally.items() if k not in OUTCOMES)


def bad(cases):
    return any(c["behavior"] in BAD for c in cases)


def one_line(cases):
    return ", ".join(f"{n} {name}" for name, n in counts(cases) if n) or "no cases"


def text(value):
    """Report text as one markdown line: the descriptions carry HTML (<br>, entities)."""
    value = re.sub(r"<br\s*/?>", " ", str(value), flags=re.I)
    value = html.unescape(re.sub(r"<[^>]+>", "", value))
    return re.sub(r"\s+", " ", value).strip()


def _case(c):
    lines = [f"- **{c['id']}**: behavior {c['behavior']}, close {c['behaviorClose']}."]
    if c["description"]:
        lines.append(f"  {text(c['description'])}")
    if c["expectation"]:
        lines.append(f"  - Expected: {text(c['expectation'])}")
    lines.append(f"  - Result: {text(c['result']) or '(none given)'}")
    lines.append(f"  - Close: {text(c['resultClose']) or '(none given)'}")
    return "\n".join(lines)


def markdown(cases, meta):
    """The whole file. `meta`: server, app (the echo app's path), server_version, command,
    wstest, cases, duration (s), server_died, reports (the report directory, relative to the
    repo)."""
    out = [
        "# Autobahn|Testsuite: WebSocket conformance",
        "",
        "Autobahn|Testsuite's fuzzingclient (framing, pings, reserved bits, opcodes, "
        "fragmentation, UTF-8, limits, closing handshake, permessage-deflate) run against "
        f"{meta['server']} serving the echo app `{meta['app']}`. "
        "Run it with `make autobahn` (`make autobahn-rsgi`: the RSGI echo app), which installs the testsuite on Python 2.7 into "
        "`tools/autobahn/.py27/` the first time and then rewrites this file; "
        "`tools/autobahn/run.py --help` lists the options (`--server uvicorn --server-python PY` "
        "runs the same cases against uvicorn). This file is generated: edit "
        "`tools/autobahn/report.py`, not the file.",
        "",
        f"- Server: {meta['server_version']}: `{meta['command']}`",
        f"- Client: {meta['wstest']}",
        f"- Cases: `{meta['cases']}`; full report (HTML, one JSON per case): "
        f"`{meta['reports']}/report/`",
        f"- Run on {datetime.date.today().isoformat()}; it took {meta['duration']:.0f} s "
        "from the server's start to its stop.",
    ]
    if meta.get("server_died"):
        out.append("- **The server exited during the run**: see its log, "
                   f"`{meta['reports']}/server.log`.")
    out += ["", "| Outcome | Cases |", "| --- | ---: |"]
    out += [f"| {name} | {n} |" for name, n in counts(cases)]
    out += [f"| total | {len(cases)} |", ""]
    out += ["Autobahn's outcomes: OK; NON-STRICT breaks a SHOULD of RFC 6455 but conforms; "
            "INFORMATIONAL only records behavior the RFC leaves open; FAILED breaks a MUST; "
            "UNIMPLEMENTED is an optional feature (here: permessage-deflate) the server does "
            "not offer. A run with FAILED or UNIMPLEMENTED cases exits non-zero. Cases that "
            "send a valid message and then a bad frame (3.*, 4.*) can come out OK or "
            "NON-STRICT from one run to the next: it depends on whether the echo leaves "
            "before the server fails the connection.", ""]

    for name in LISTED + [k for k, _ in counts(cases) if k not in OUTCOMES]:
        listed = [c for c in cases if c["behavior"] == name]
        if listed:
            out += [f"## {name} ({len(listed)})", ""]
            out += [_case(c) for c in listed]
            out.append("")
    # An OK case can still have closed badly (wrong close code, unclean close).
    odd = [c for c in cases if c["behavior"] == "OK" and c["behaviorClose"] not in ("OK", "INFORMATIONAL")]
    if odd:
        out += [f"## OK, but the closing behavior was not ({len(odd)})", ""]
        out += [_case(c) for c in odd]
        out.append("")
    return "\n".join(out)
