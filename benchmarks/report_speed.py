"""The default report part by part, this version beside an older commit, run back to back on one machine.

Each version runs ``mechprobe report --no-progress --out DIR`` (default settings: SmolLM2-135M,
MiniLM-L6, the three toys over 5 seeds) in its own process under ``/usr/bin/time`` (wall seconds, peak
RSS); the parts come from each report's ``timings.json``. The older commit runs from a ``git worktree``
with this checkout's virtual environment (the same packages), so only the code differs. Issue 25
compared the linear section's fitting plan before it (commit 9dc0f1d: a control task for every label,
one random-weight draw per toy) with the baselines that fit each label.

    .venv/bin/python benchmarks/report_speed.py --baseline 9dc0f1d          # ~15 min on 2 cores
    .venv/bin/python benchmarks/report_speed.py --baseline 9dc0f1d --order new-first

Prints a Markdown table (seconds per part, wall, peak RSS) and writes the two reports under ``--out``.
Run it on an otherwise idle machine: the report uses one thread per fit, but a second job still shares
the cores.
"""

from __future__ import annotations

import analyses.script_start  # noqa: F401  (first: a Ctrl-C while the imports below run is one line)

# isort: split

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from analyses.cli_checks import ScriptParser, script_main
from analyses.output_paths import check_output_folder
from probes.core.errors import InputError

ROOT = Path(__file__).resolve().parent.parent


def run_report(code: Path, out: Path) -> dict[str, float]:
    """One default report of the code in ``code``: timings.json's parts, the wall time and the peak RSS."""
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = ["/usr/bin/time", "-f", "%e %M", sys.executable, "-c",
               "import sys; from analyses.cli import main; sys.exit(main(sys.argv[1:]))",
               "report", "--no-progress", "--out", str(out)]
    done = subprocess.run(command, cwd=code, env=env, capture_output=True, text=True)
    if done.returncode != 0:  # one line, exit 2 (script_main): the report's own error line (time's come after it)
        lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
        said = next((line for line in reversed(lines) if "error:" in line), lines[-1])
        raise InputError(f"the report of {code} failed: {said}")
    wall, peak_kib = done.stderr.strip().splitlines()[-1].split()
    parts = json.loads((out / "timings.json").read_text(encoding="utf-8"))
    return {**parts, "wall_s": float(wall), "peak_rss_mib": int(peak_kib) / 1024}


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="the older commit (e.g. 9dc0f1d)")
    parser.add_argument("--out", default="runs/report_speed", help="where the two reports go")
    parser.add_argument("--order", choices=["old-first", "new-first"], default="old-first")
    args = parser.parse_args()
    known = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{args.baseline}^{{commit}}"], cwd=ROOT,
                           capture_output=True, text=True)
    if not args.baseline.strip() or known.returncode != 0:
        parser.error(f"--baseline {args.baseline!r} names no commit of {ROOT}; give one such as 9dc0f1d")
    # An earlier run of this script (before/ and now/, each a report that `mechprobe report` replaces when the new
    # one is complete) may be reused; any other folder with files is refused: nothing of the user's is removed.
    out = check_output_folder("--out", args.out, earlier_output=lambda folder: {p.name for p in folder.iterdir()}
                              <= {"before", "now"}).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        worktree = Path(scratch) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.baseline], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            versions = [("before", worktree, out / "before"), ("now", ROOT, out / "now")]
            if args.order == "new-first":
                versions.reverse()
            results = {}
            for name, code, folder in versions:
                began = time.strftime("%H:%M:%S")
                results[name] = run_report(code, folder)
                print(f"{name}: started {began} UTC, {results[name]['wall_s']:.0f} s", file=sys.stderr)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, capture_output=True)
    parts = list(dict.fromkeys([*results["before"], *results["now"]]))
    print(f"| part | before ({args.baseline}) | now | now / before |")
    print("| --- | ---: | ---: | ---: |")
    for part in parts:
        old, new = results["before"].get(part), results["now"].get(part)
        ratio = f"{new / old:.2f}x" if old and new is not None else ""
        cells = [f"{v:,.1f}" if v is not None else "-" for v in (old, new)]
        print(f"| {part} | {cells[0]} | {cells[1]} | {ratio} |")
    print(json.dumps({"load_average": os.getloadavg(), **results}), file=sys.stderr)


if __name__ == "__main__":
    main()
