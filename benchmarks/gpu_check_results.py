"""What ``benchmarks/gpu_check.py`` makes of its parts once they ran: each part's numbers read from its outputs
(pytest's JUnit XML, a report's ``summary.json``, the long-context and null benchmarks' JSON), issue 44's must-shows
judged from them (each passed, failed or not measured), the device report's verdicts compared with the CPU report's,
and the summary: the table printed and every row written as JSON to ``--out`` (kept in ``--work`` when ``--out``
can no longer be written). The script imports it; it runs nothing itself.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analyses.output_paths import write_output_file
from probes.core.errors import InputError

PartReader = Callable[[Path, str], dict[str, Any]]
"""How a part's numbers are read: from ``--work`` and the part's output (its log)."""


def read_tests(work: Path, output: str) -> dict[str, Any]:
    """pytest's counts from its JUnit XML, the failed tests' names and the packaged models run as random stand-ins."""
    suite = ElementTree.parse(work / "tests.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    failed = [f"{case.get('classname')}::{case.get('name')}" for case in suite.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    stand_ins = sorted(set(re.findall(r"(\S+): packaged weights absent", output)))
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {"passed": passed, **counts, "failed_tests": failed, "random_weight_stand_ins": stand_ins}


def read_report(name: str) -> PartReader:
    """Reader of a report part: every finding's verdict, how many hold, and the report's own timings."""
    def read(work: Path, output: str) -> dict[str, Any]:
        folder = work / name
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        verdicts = {f"{model} {finding}": bool(entry["holds"]) for model, run in summary["pretrained"].items()
                    for finding, entry in run["findings"].items()}
        timings = folder / "timings.json"
        return {"verdicts": verdicts, "holds": sum(verdicts.values()),
                "timings_s": json.loads(timings.read_text(encoding="utf-8")) if timings.is_file() else {}}
    return read


def read_long_context(work: Path, output: str) -> dict[str, Any]:
    """Every (shape, tokens, route) measurement, and the suite's time and memory over the bare SDPA forward."""
    rows = json.loads((work / "long_context.json").read_text(encoding="utf-8"))
    measured = [{key: row.get(key) for key in ("shape", "length", "route", "seconds", "peak_mib", "error")}
                for row in rows if "shape" in row]
    cells: dict[tuple[str, int], dict[str, dict]] = {}
    for row in measured:
        cells.setdefault((row["shape"], row["length"]), {})[row["route"]] = row
    ratios = {}
    for (shape, length), routes in cells.items():
        bare, suite = routes.get("bare", {}), routes.get("suite", {})
        if bare.get("seconds") and suite.get("seconds"):
            ratios[f"{shape} {length}"] = {"time_x_bare": suite["seconds"] / bare["seconds"],
                                           "memory_x_bare": suite["peak_mib"] / bare["peak_mib"]
                                           if bare.get("peak_mib") else None}
    return {"rows": measured, "suite_over_bare": ratios}


def read_ablation(work: Path, output: str) -> dict[str, Any]:
    """The null's cost: seconds, x one bare forward, peak memory x the probe suite's."""
    run = json.loads((work / "ablation_null.json").read_text(encoding="utf-8"))
    return {"draws": run["draws"], "bare_s": run["ablation"]["bare"], "null_s": run["ablation"]["null"],
            "x_bare_forward": run["x_bare_forward"], "peak_mib": run["ablation"]["peak_mib"],
            "suite_peak_mib": run["suite"]["peak_mib"], "peak_x_suite": run["peak_x_suite"],
            "route": run["ablation"]["route"]}


def read_nothing(work: Path, output: str) -> dict[str, Any]:
    """Parts whose result is their exit status alone."""
    return {}

def must_shows(rows: list[dict[str, Any]], quick: bool) -> dict[str, bool | None]:
    """Issue 44's GPU must-shows, each passed (True), failed (False) or not measured (None)."""
    numbers = {row["part"]: row["numbers"] for row in rows}
    ratios = numbers.get("long-context", {}).get("suite_over_bare", {})
    cells = ["smollm2 256"] if quick else [f"{s} {n}" for s in ("smollm2", "llama1b") for n in ("8192", "32768")]
    shows: dict[str, bool | None] = {"every part passed": all(row["status"] == "passed" for row in rows)}
    for cell in cells:
        got = ratios.get(cell)
        shows[f"suite <= 2x SDPA time at {cell}"] = None if not got else got["time_x_bare"] <= 2
        shows[f"suite <= 1.5x SDPA memory at {cell}"] = (None if not got or got["memory_x_bare"] is None
                                                          else got["memory_x_bare"] <= 1.5)
    null = numbers.get("ablation-null", {}).get("x_bare_forward")
    shows["200-draw null <= 20x a forward"] = None if quick or null is None else null <= 20
    shows["report verdicts equal the CPU's"] = compare_verdicts(rows)["verdicts_match"]
    return shows


def compare_verdicts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the device report's verdicts equal the CPU report's (``None`` when either did not finish)."""
    reports = {row["part"]: row["numbers"].get("verdicts") for row in rows if row["part"].startswith("report-")}
    device = next((v for name, v in reports.items() if name != "report-cpu"), None)
    cpu = reports.get("report-cpu")
    if device is None or cpu is None or len(reports) < 2:
        return {"verdicts_match": None, "why": "both reports are needed"}
    return {"verdicts_match": device == cpu, "differing": sorted(k for k in device if device.get(k) != cpu.get(k))}


def headline(row: dict[str, Any]) -> str:
    """The few numbers of a part's row worth a line in the table."""
    numbers = row["numbers"]
    if "unreadable" in numbers:
        return f"numbers unreadable ({numbers['unreadable'][:60]})"
    if row["part"] == "tests" and numbers:
        stand_ins = ", ".join(numbers["random_weight_stand_ins"]) or "-"
        return (f"{numbers['passed']} passed, {numbers['failures'] + numbers['errors']} failed, "
                f"{numbers['skipped']} skipped; random stand-ins: {stand_ins}")
    if row["part"].startswith("report-") and numbers:
        return f"{numbers['holds']} of {len(numbers['verdicts'])} findings hold"
    if row["part"] == "long-context" and numbers:
        return "; ".join(f"{cell} suite {r['time_x_bare']:.1f}x time" for cell, r in numbers["suite_over_bare"].items())
    if row["part"] == "ablation-null" and numbers:
        return f"{numbers['draws']} draws {numbers['x_bare_forward']:.1f}x forward, {numbers['peak_x_suite']:.2f}x peak"
    return row.get("why", "")


def summarise(rows: list[dict[str, Any]], meta: dict[str, Any], out: Path, keep: Path | None = None
              ) -> dict[str, Any]:
    """Print the table of ``rows`` and write them, with ``meta`` and the verdict comparison, to ``out`` (JSON);
    where ``out`` cannot be written by then (its folder made a file, removed, read-only), to ``keep`` instead, with
    an error that says so: the parts' run is not lost."""
    shows = must_shows(rows, bool(meta.get("quick")))
    summary = {**meta, "parts": rows, "report_cpu_vs_device": compare_verdicts(rows), "must_shows": shows,
               "all_passed": all(row["status"] == "passed" for row in rows)}
    print(f"\n{'part':<14} {'status':<8} {'seconds':>8} {'budget':>7}  numbers")
    for row in rows:
        print(f"{row['part']:<14} {row['status']:<8} {row['seconds']:>8.1f} {row['budget_s']:>7.0f}  {headline(row)}")
    print(f"report verdicts on the device vs the CPU: {summary['report_cpu_vs_device']}")
    print("\nissue 44's must-shows:")
    for show, verdict in shows.items():
        print(f"  {'pass' if verdict else 'FAIL' if verdict is False else 'not measured':<12} {show}")
    try:
        write_output_file(out, json.dumps(summary, indent=1))
    except OSError as error:
        if keep is None:
            raise
        write_output_file(keep, json.dumps(summary, indent=1))
        raise InputError(f"--out {out} could not be written after the run ({error.strerror or error}); the summary "
                         f"is kept in {keep}: copy it from there.") from None
    print(f"wrote {out}")
    return summary
