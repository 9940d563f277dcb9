"""Rendering results: the console summary, the JSON dump, docs/conformance.md."""

import dataclasses
import json
import os
import platform
import re

from . import compare, modules as modspec

CELL = "passed/failed/errors/skipped"


def cell(run):
    if run is None:
        return "-"
    if run.status in ("absent", "skipped", "fatal"):
        return run.status
    c = compare.counts(run)
    text = f"{c['passed']}/{c['failed']}/{c['errors']}/{c['skipped']}"
    return text if run.status == "ok" else f"{text} ({run.status})"


def _totals(results, kind):
    total = dict.fromkeys(("passed", "failed", "errors", "skipped", "on_loop"), 0)
    for (_, k), run in results.items():
        if k == kind:
            for key, n in compare.counts(run).items():
                total[key] += n
    return f"{total['passed']}/{total['failed']}/{total['errors']}/{total['skipped']}"


def _notes(results, module, kinds):
    notes = []
    for k in kinds:
        run = results.get((module, k))
        if run and run.note and run.status != "absent":
            notes.append(f"{k}: {run.note}")
        for shim, used in (run.shims.items() if run else ()):
            notes.append(f"{k}: {shim} shim used in {used} tests")
    return "; ".join(notes)


def _on_loop(run):
    if run is None or run.status != "ok" or not run.counting:
        return "-"
    return str(compare.counts(run)["on_loop"])


def _header(kinds):
    head = ["module"]
    for k in kinds:
        head.append(k)
        if k != compare.REFERENCE:
            head.append(f"ran on {k}")
    return head + ["notes"]


def _rows(results, module_names, kinds):
    """Rows of the table: see _header for the columns."""
    rows = []
    for name in module_names:
        runs = [results.get((name, k)) for k in kinds]
        if all(r is None or r.status == "absent" for r in runs):
            continue
        row = [name]
        for k, run in zip(kinds, runs):
            row.append(cell(run))
            if k != compare.REFERENCE:
                row.append(_on_loop(run))
        rows.append(row + [_notes(results, name, kinds)])
    total = ["total"]
    for k in kinds:
        total.append(_totals(results, k))
        if k != compare.REFERENCE:
            total.append(str(sum(compare.counts(r)["on_loop"]
                                 for (_, kk), r in results.items() if kk == k)))
    rows.append(total + [""])
    return rows


def python_version(results):
    return next((r.python for r in results.values() if r.python), "?")


def _diff_line(d):
    rec = d.candidate
    where = rec.get("where") or rec.get("raised_at") or ""
    flaky = "  [flaky: passed on re-run]" if d.flaky else ""
    return rec.get("message", rec["outcome"]), where, flaky


def console(results, module_names, kinds, found, log_dir):
    out = [f"test.test_asyncio on Python {python_version(results)} "
           f"(cells: {CELL}; errors include hangs and crashes)", ""]
    rows = [_header(kinds)] + _rows(results, module_names, kinds)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths))
                   + ("  " + r[-1] if r[-1] else "").rstrip())
    for candidate, diffs in found.items():
        real = [d for d in diffs if not d.flaky]
        out += ["", f"Fail on {candidate}, pass on asyncio: {len(real)}"
                + (f" (+{len(diffs) - len(real)} flaky)" if len(real) < len(diffs) else "")
                + f"   (tracebacks: {os.path.relpath(log_dir)}/)"]
        for label, group in compare.grouped(diffs):
            out.append(f"  {label} ({len(group)})")
            if label.startswith("NotImplementedError"):
                for api, ds in compare.by_api(group).items():
                    out.append(f"    {api}(): " + ", ".join(
                        compare.short_id(d.test_id) for d in ds))
                continue
            for d in group:
                msg, where, flaky = _diff_line(d)
                out.append(f"    {d.test_id}{flaky}")
                out.append(f"        {msg}" + (f"  [{where}]" if where else ""))
        for test_id, why in compare.skipped_only(results, candidate):
            out.append(f"  (skipped on {candidate}, run on asyncio: {test_id}: {why})")
    return "\n".join(out)


def to_json(results, found, kinds):
    return {
        "python": python_version(results),
        "platform": platform.platform(),
        "loops": list(kinds),
        "runs": [dataclasses.asdict(r) for r in results.values()],
        "diffs": {c: [dataclasses.asdict(d) | {"cause": compare.cause(d.candidate)}
                      for d in ds] for c, ds in found.items()},
    }


def write_json(path, results, found, kinds):
    with open(path, "w") as f:
        json.dump(to_json(results, found, kinds), f, indent=1, sort_keys=True)


# --- docs/conformance.md ------------------------------------------------

BEGIN = "<!-- results {} begin -->"
END = "<!-- results {} end -->"


def _md_escape(text):
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_section(results, module_names, kinds, found, when, loop_versions):
    py = python_version(results)
    lines = [f"### Python {py}", "",
             f"Run {when} on {platform.system()} {platform.machine()}, "
             f"{os.cpu_count()} CPUs. Loops: "
             + ", ".join(f"{k} {loop_versions.get(k, '')}".strip() for k in kinds)
             + f". Cells: {CELL}; errors include tests that hung or crashed. "
             "'ran on X': tests that made at least one loop of X.",
             ""]
    head = _header(kinds)
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for r in _rows(results, module_names, kinds):
        lines.append("| " + " | ".join(_md_escape(c) for c in r) + " |")
    for candidate, diffs in found.items():
        real = [d for d in diffs if not d.flaky]
        lines += ["", f"#### Fail on {candidate}, pass on asyncio ({len(real)})", ""]
        if not diffs:
            lines.append("None.")
        for label, group in compare.grouped(diffs):
            lines.append(f"- **{_md_escape(label)}** ({len(group)})")
            if label.startswith("NotImplementedError"):
                for api, ds in compare.by_api(group).items():
                    lines.append(f"  - `{api}()` ({len(ds)}): " + ", ".join(
                        f"`{compare.short_id(d.test_id)}`" for d in ds))
                continue
            for d in group:
                msg, where, flaky = _diff_line(d)
                detail = f": {_md_escape(msg)}" + (f" ({where})" if where else "")
                lines.append(f"  - `{d.test_id}`{flaky}{detail}")
        skipped = compare.skipped_only(results, candidate)
        if skipped:
            lines += ["", f"Skipped on {candidate} but run on asyncio "
                      f"({len(skipped)}): " + ", ".join(
                          f"`{t}` ({_md_escape(why)})" for t, why in skipped)]
        both = compare.both_bad(results, candidate)
        if both:
            lines += ["", f"Also failing on asyncio itself here ({len(both)}): "
                      + ", ".join(f"`{t}`" for _, t, _, _ in both)]
    dropped = []
    for name in module_names:
        run = next((results[(name, k)] for k in kinds if (name, k) in results), None)
        if run is None:
            continue
        gone = [c for c, kept in run.classes if not kept]
        if gone:
            dropped.append(f"- {name}: {', '.join(gone)} (replaced by the "
                           f"synthesized {modspec.BY_NAME[name].generic_class})")
        for test_id, reason in sorted(run.excluded.items()):
            dropped.append(f"- `{test_id}`: {reason}")
    if dropped:
        lines += ["", "Classes and tests not run on this Python:", ""] + dropped
    return "\n".join(lines)


def update_markdown(path, intro, section, py_minor):
    """Rewrite ``path``: ``intro`` then every Python's results section,
    this Python's replaced by ``section`` and the others kept."""
    sections = {}
    if os.path.exists(path):
        text = open(path).read()
        pattern = re.compile(r"<!-- results (\S+) begin -->\n(.*?)\n<!-- results \1 end -->",
                             re.S)
        sections = {m.group(1): m.group(2) for m in pattern.finditer(text)}
    sections[py_minor] = section
    order = sorted(sections, key=lambda v: tuple(int(x) for x in v.split(".")))
    parts = [intro.rstrip(), ""]
    for v in order:
        parts += [BEGIN.format(v), sections[v], END.format(v), ""]
    with open(path, "w") as f:
        f.write("\n".join(parts))
