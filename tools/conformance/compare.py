"""Counting outcomes and comparing the loop under test with asyncio's."""

import re
from dataclasses import dataclass, field

BAD = ("failed", "error", "timeout", "crash")
REFERENCE = "asyncio"


def counts(run):
    """passed/failed/errors/skipped of one ModuleRun (errors include tests
    that hung or crashed), plus how many tests made a loop of the kind."""
    c = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "on_loop": 0}
    for rec in run.tests.values():
        outcome = rec["outcome"]
        key = {"failed": "failed", "passed": "passed",
               "skipped": "skipped"}.get(outcome, "errors")
        c[key] += 1
        if rec.get("loops"):
            c["on_loop"] += 1
    return c


@dataclass
class Diff:
    module: str
    test_id: str
    candidate: dict          # the record on the loop under test
    reference: dict          # the record on asyncio
    rerun: dict = field(default_factory=dict)

    @property
    def flaky(self):
        return self.rerun.get("outcome") == "passed"


def module_level(run):
    """A pseudo record for a module that did not run to the end."""
    if run.status in ("ok", "absent"):
        return None
    return {"outcome": "crash" if run.status != "skipped" else "skipped",
            "message": f"module {run.status}: {run.note}"}


def diffs(results, candidate, reference=REFERENCE):
    """Tests that are bad on ``candidate`` and pass on ``reference``."""
    found = []
    modules = sorted({m for m, _ in results})
    for module in modules:
        cand, ref = results.get((module, candidate)), \
            results.get((module, reference))
        if cand is None or ref is None:
            continue
        cand_mod, ref_mod = module_level(cand), module_level(ref)
        if cand_mod and cand_mod["outcome"] != "skipped" and not ref_mod:
            found.append(Diff(module, f"{module} (whole module)", cand_mod,
                              {"outcome": ref.status}))
        for test_id, rec in sorted(cand.tests.items()):
            other = ref.tests.get(test_id)
            if rec["outcome"] in BAD and other and \
                    other["outcome"] == "passed":
                found.append(Diff(module, test_id, rec, other))
    return found


def both_bad(results, candidate, reference=REFERENCE):
    """(module, test id, candidate record, reference record) bad on both."""
    out = []
    for (module, kind), cand in sorted(results.items()):
        if kind != candidate or (module, reference) not in results:
            continue
        ref = results[(module, reference)]
        for test_id, rec in sorted(cand.tests.items()):
            other = ref.tests.get(test_id)
            if rec["outcome"] in BAD and other and other["outcome"] in BAD:
                out.append((module, test_id, rec, other))
    return out


def skipped_only(results, candidate, reference=REFERENCE):
    """(test id, skip reason) skipped on ``candidate``, run on ``reference``."""
    out = []
    for (module, kind), cand in sorted(results.items()):
        ref = results.get((module, reference))
        if kind != candidate or ref is None:
            continue
        for test_id, rec in sorted(cand.tests.items()):
            other = ref.tests.get(test_id)
            if rec["outcome"] == "skipped" and other and \
                    other["outcome"] != "skipped":
                out.append((test_id, rec.get("message", "")))
    return out


_ADDR = re.compile(r"0x[0-9a-fA-F]+")
_NUM = re.compile(r"\b\d+(\.\d+)?\b")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|<[^<>]*>")
_ATTR = re.compile(r"AttributeError: .*object has no attribute '(\w+)'")


def cause(rec):
    """A short label grouping failures that look alike."""
    outcome, msg = rec["outcome"], rec.get("message", "")
    chain = rec.get("chain", [])
    if outcome == "timeout":
        return "hangs (stopped by the per-test timeout)"
    if outcome == "crash":
        return f"crashes the interpreter: {msg}"
    if "NotImplementedError" in chain or msg.startswith("NotImplementedError"):
        return "NotImplementedError (feature not implemented yet)"
    m = _ATTR.match(msg)
    if m:
        attr = m.group(1)
        kind = "private" if attr.startswith("_") else "public"
        return f"missing {kind} loop attribute {attr!r}"
    head = msg.split(":", 1)[0] or outcome
    body = msg.split(":", 1)[1] if ":" in msg else ""
    if head == "AssertionError":
        return "AssertionError (behaviour differs)"
    body = _NUM.sub("N", _ADDR.sub("0x…", _QUOTED.sub("…", body))).strip()
    return f"{head}: {body}"[:120] if body else head


def by_api(group):
    """{function that raised: [Diff]} for a group of NotImplementedErrors."""
    apis = {}
    for d in group:
        m = re.search(r"\((\w+)\)$", d.candidate.get("raised_at", ""))
        apis.setdefault(m.group(1) if m else "?", []).append(d)
    return dict(sorted(apis.items()))


def short_id(test_id):
    return test_id.removeprefix("test.test_asyncio.")


def grouped(found):
    """Diffs grouped by cause, biggest group first: [(cause, [Diff])]."""
    groups = {}
    for d in found:
        groups.setdefault(cause(d.candidate), []).append(d)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
