"""benchmarks/gpu_check.py without a GPU or a model: its arguments, its parts' runner and its JSON summary."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def results(gpu_check):
    """``benchmarks/gpu_check_results.py`` as the script imported it: the parts' numbers, must-shows, summary."""
    return sys.modules["gpu_check_results"]


def test_arguments_default_to_cuda_within_eight_minutes(gpu_check):
    args = gpu_check.parse_args([])
    assert (args.device, args.quick, args.budget, args.out) == ("cuda", False, 480.0, Path("gpu_check.json"))
    args = gpu_check.parse_args(["--device", "cpu", "--quick", "--out", "x.json"])
    assert (args.device, args.quick, args.out) == ("cpu", True, Path("x.json"))


@pytest.mark.slow
def test_the_full_parts_take_their_budgets_from_the_ledger_and_run_what_the_issue_names(gpu_check, tmp_path):
    parts = gpu_check.build_parts(gpu_check.parse_args(["--device", "cuda", "--gpu", "h200"]), tmp_path)
    assert [p.name for p in parts] == ["checkpoint", "long-context", "ablation-null", "report-cuda", "tests",
                                       "report-cpu"]  # the must-shows first
    plan = json.loads((tmp_path / "ledger_plan.json").read_text())
    assert plan["skip"] == []  # bare and suite fit the card at every row
    budgets = {p.name: p.budget_s for p in parts}
    assert budgets["long-context"] == pytest.approx(plan["long_context_budget_s"])
    assert budgets["ablation-null"] == pytest.approx(plan["null_budget_s"])
    assert sum(budget for name, budget in budgets.items() if name not in ("report-cpu", "tests")) <= 480
    commands = {p.name: " ".join(p.command) for p in parts}
    assert "--lengths 8192 32768" in commands["long-context"] and "--shapes smollm2 llama1b" in commands[
        "long-context"] and "--routes bare suite" in commands["long-context"]
    assert "--draws 200" in commands["ablation-null"]
    assert "tests/test_gpu.py tests/analyses/test_toy_device.py" in commands["tests"]
    assert "-k cuda" in commands["tests"]  # the device's cases: CI runs the cpu ones
    assert "--device cuda --dtype bfloat16" in commands["report-cuda"] and "--fast" in commands["report-cuda"]


def test_the_must_shows_read_the_parts_numbers(results):
    rows = [{"part": "long-context", "status": "passed", "numbers": {"suite_over_bare": {
                "smollm2 8192": {"time_x_bare": 1.6, "memory_x_bare": 1.02},
                "smollm2 32768": {"time_x_bare": 2.4, "memory_x_bare": 1.01}}}},
            {"part": "ablation-null", "status": "passed", "numbers": {"x_bare_forward": 32.0}},
            {"part": "report-cuda", "status": "passed", "numbers": {"verdicts": {"a": True, "b": False}}},
            {"part": "report-cpu", "status": "timeout", "numbers": {"verdicts": {"a": True, "b": False}}}]
    shows = results.must_shows(rows, quick=False)
    assert shows["every part passed"] is False
    assert shows["suite <= 2x SDPA time at smollm2 8192"] and not shows["suite <= 2x SDPA time at smollm2 32768"]
    assert shows["suite <= 1.5x SDPA memory at smollm2 32768"]
    assert shows["suite <= 2x SDPA time at llama1b 32768"] is None  # not measured: neither pass nor fail
    assert shows["200-draw null <= 20x a forward"] is False
    assert shows["report verdicts equal the CPU's"] is True


def test_a_failed_and_a_skipped_part_are_recorded_not_dropped(gpu_check, tmp_path, capsys):
    def read(work, output):
        return {"said": output.strip()}

    python = sys.executable
    parts = [gpu_check.Part("ok", [python, "-c", "print('fine')"], 20, read),
             gpu_check.Part("broken", [python, "-c", "raise SystemExit(3)"], 20, read),
             gpu_check.Part("optional", [python, "-c", "pass"], 10_000, read, needs_whole_budget=True)]
    rows = gpu_check.run_parts(parts, 60, tmp_path, {"PATH": "/usr/bin:/bin"})
    out = tmp_path / "summary.json"
    summary = gpu_check.summarise(rows, {"device": "cpu"}, out)
    written = json.loads(out.read_text())
    assert written == json.loads(json.dumps(summary))
    assert [(p["part"], p["status"], p["returncode"]) for p in written["parts"]] == [
        ("ok", "passed", 0), ("broken", "failed", 3), ("optional", "skipped", None)]
    assert written["parts"][0]["numbers"] == {"said": "fine"}
    assert "tail" in written["parts"][1] and written["all_passed"] is False
    assert written["report_cpu_vs_device"]["verdicts_match"] is None
    table = capsys.readouterr().out
    assert "broken" in table and "failed" in table and "skipped" in table


def test_verdicts_are_compared_between_the_device_and_the_cpu_report(results):
    def row(name, verdicts):
        return {"part": name, "numbers": {"verdicts": verdicts}}

    same = results.compare_verdicts([row("report-cuda", {"m a": False}), row("report-cpu", {"m a": False})])
    differ = results.compare_verdicts([row("report-cuda", {"m a": True}), row("report-cpu", {"m a": False})])
    assert same == {"verdicts_match": True, "differing": []}
    assert differ == {"verdicts_match": False, "differing": ["m a"]}


@pytest.mark.slow
@pytest.mark.device_twin
def test_the_quick_check_runs_end_to_end_on_the_cpu(tmp_path):
    """``gpu_check.py --quick --device cpu``: every part's command runs and its numbers are read (about 2 minutes on
    a shared 2-core CPU, most of it starting Python in each part's process)."""
    out = tmp_path / "gpu_check.json"
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--quick", "--device", "cpu", "--budget", "600",
                           "--work", str(tmp_path / "work"), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    summary = json.loads(out.read_text())
    parts = {row["part"]: row for row in summary["parts"]}
    assert list(parts) == ["checkpoint", "long-context", "ablation-null", "report-cpu", "tests"]  # must-shows first
    assert summary["all_passed"] and {row["status"] for row in parts.values()} == {"passed"}
    tests = parts["tests"]["numbers"]
    assert tests["passed"] == tests["tests"] >= 1 and tests["failed_tests"] == []  # the tiny-settings checks
    report = parts["report-cpu"]["numbers"]
    assert len(report["verdicts"]) == 7 and report["holds"] == 0  # a random-weight checkpoint: nothing holds
    (cell, ratios), = parts["long-context"]["numbers"]["suite_over_bare"].items()
    assert cell == "smollm2 256" and ratios["time_x_bare"] > 0 and ratios["memory_x_bare"] > 0
    null = parts["ablation-null"]["numbers"]
    assert null["draws"] == 10 and null["x_bare_forward"] > 1  # 10 draws cost more than one forward
    shows = summary["must_shows"]  # read off the parts (the quick row's time and memory are the CPU's)
    assert shows["every part passed"] is True and shows["200-draw null <= 20x a forward"] is None
    assert shows["suite <= 1.5x SDPA memory at smollm2 256"] is not None


def test_a_budget_too_short_for_any_part_is_refused_before_anything_is_written(gpu_check, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        gpu_check.main(["--device", "cpu", "--budget", "5", "--work", str(tmp_path / "work"), "--out",
                        str(tmp_path / "out.json")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--budget 5" in err and "every part would be skipped" in err
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_a_failing_ledger_leaves_hand_set_budgets_not_a_dead_check(gpu_check, tmp_path, monkeypatch, capsys):
    """On the H200 at de21b09 the ledger's plan raised (torch 2.11's FLOP counter) before any part ran."""
    def broken(gpu, repeats):
        raise AssertionError("sdpa_flop_count: query/key/value shapes are incompatible")

    monkeypatch.setattr(gpu_check, "ledger_plan", broken)
    parts = gpu_check.build_parts(gpu_check.parse_args(["--device", "cuda", "--gpu", "h200"]), tmp_path)
    assert "the cost ledger failed (AssertionError" in capsys.readouterr().out
    assert json.loads((tmp_path / "ledger_plan.json").read_text())["error"].startswith("AssertionError: sdpa_flop")
    budgets = {p.name: p.budget_s for p in parts}
    assert budgets["long-context"] > 0 and budgets["ablation-null"] >= 3 * gpu_check.STARTUP_S  # three processes
    assert sum(budget for name, budget in budgets.items() if name not in ("report-cpu", "tests")) <= 480


def test_the_checkouts_code_comes_before_an_installed_copy(tmp_path):
    """On the GPU machine the carried wheel's copy of the code is on PYTHONPATH: the script must run the checkout's."""
    stale = tmp_path / "site" / "analyses"
    stale.mkdir(parents=True)
    (stale / "__init__.py").write_text("raise ImportError('the installed copy was imported')\n")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--help"], cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "site")}, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr[-500:]
    assert "--budget" in done.stdout


@pytest.mark.parametrize("inside", ["", "summary.json"])
def test_an_out_in_the_work_folder_is_refused_before_anything_is_written(gpu_check, tmp_path, capsys, inside):
    """--out equal to --work ran every part, then lost the summary ('[Errno 21] Is a directory'); inside --work it
    was deleted with the folder by the next run."""
    work = tmp_path / "work"
    with pytest.raises(SystemExit) as exit_:
        gpu_check.main(["--device", "cpu", "--budget", "30", "--work", str(work), "--out", str(work / inside)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"--out {work / inside}" in err and f"--work {work}, the folder" in err, err
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag", ["--work", "--out", "--configs", "--pack-configs"])
def test_an_empty_path_is_refused_as_empty_not_as_the_working_folder(gpu_check, flag, capsys):
    """--configs '' said '--configs . holds no models/ folder; write it with --pack-configs .', a fix refused in
    turn (the working folder); --work '' and --out '' were refused as '.'."""
    with pytest.raises(SystemExit) as exit_:
        gpu_check.parse_args(["--device", "cpu", flag, ""])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"argument {flag}: the value is empty" in err and err.count("\n") == 1, err


def test_a_ctrl_c_stops_the_running_part_too(gpu_check, tmp_path, monkeypatch):
    """Ctrl-C of gpu_check printed 'interrupted' and exited 130, while the running part (a session of its own, which
    the terminal's SIGINT does not reach) ran on, orphaned: on the GPU it held the card for the rest of its budget."""
    pid_file = tmp_path / "pid"
    child = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)"
    part = gpu_check.Part("slow", [sys.executable, "-c", child, str(pid_file)], 60, gpu_check.read_nothing)

    def interrupted(process, deadline):
        while not pid_file.is_file() or not pid_file.read_text():
            time.sleep(0.05)
        raise KeyboardInterrupt

    monkeypatch.setattr(gpu_check, "stop_at", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gpu_check.run_part(part, 60, tmp_path, {"PATH": "/usr/bin:/bin"})
    with pytest.raises(ProcessLookupError):  # stopped and reaped, not running on
        os.kill(int(pid_file.read_text()), 0)


@pytest.mark.parametrize("others", [["--device", "cpu"], ["--quick", "--out", "x.json"], ["--budget", "60"]])
def test_pack_configs_with_flags_it_ignores_is_refused_before_anything_is_written(gpu_check, tmp_path, capsys,
                                                                                  others):
    """--pack-configs wrote the configs and exited 0, silently ignoring --device, --quick, --out and --budget: a
    user who meant one command got the other."""
    with pytest.raises(SystemExit) as exit_:
        gpu_check.main(["--pack-configs", str(tmp_path / "pack"), *others])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"so {others[0]}" in err and "give --pack-configs alone" in err, err
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["file", "folder of other files"])
def test_configs_without_models_advises_only_a_pack_that_is_then_accepted(gpu_check, tmp_path, capsys, kind):
    """--configs FILE (or a folder of other files) said 'write it with --pack-configs FILE', which --pack-configs
    then refused ('is a file, not a folder'; 'holds other files')."""
    configs = tmp_path / "configs"
    if kind == "file":
        configs.write_text("x")
    else:
        configs.mkdir()
        (configs / "notes.txt").write_text("x")
    with pytest.raises(SystemExit) as exit_:
        gpu_check.main(["--device", "cpu", "--configs", str(configs), "--work", str(tmp_path / "w"), "--out",
                        str(tmp_path / "o.json")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"--configs {configs} holds no models/ folder" in err, err
    assert f"--pack-configs {configs}" not in err and "--pack-configs NEW_FOLDER" in err
    with pytest.raises(SystemExit):  # the advice it no longer gives: refused
        gpu_check.main(["--pack-configs", str(configs)])
    assert "--pack-configs" in capsys.readouterr().err
    new = tmp_path / "new"  # a new folder: the advice names it, and it is accepted
    with pytest.raises(SystemExit):
        gpu_check.main(["--device", "cpu", "--configs", str(new), "--work", str(tmp_path / "w"), "--out",
                        str(tmp_path / "o.json")])
    assert f"write it with --pack-configs {new}." in capsys.readouterr().err
    gpu_check.check_args(gpu_check.parse_args(["--pack-configs", str(new)]))


@pytest.mark.parametrize("inside", ["configs in work", "work in configs"])
def test_configs_and_work_that_overlap_are_refused_before_anything_is_deleted(gpu_check, tmp_path, capsys, inside):
    """--configs W/pk with --work W (an earlier run's) deleted the configs with W, then said 'holds no models/
    folder', exit 1; --work C/w with --configs C copied C into C/w/mechprobe-cache without end ('File name too
    long', a folder hundreds of levels deep left)."""
    work, configs = (tmp_path / "w", tmp_path / "w" / "pk") if inside == "configs in work" else (
        tmp_path / "pk" / "w", tmp_path / "pk")
    if inside == "configs in work":
        work.mkdir()
        (work / gpu_check.WORK_MARK).touch()
    (configs / "models" / "smollm2-135m").mkdir(parents=True)
    (configs / "models" / "smollm2-135m" / "config.json").write_text("{}")
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as exit_:
        gpu_check.main(["--device", "cpu", "--quick", "--configs", str(configs), "--work", str(work), "--out",
                        str(tmp_path / "o.json")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"--configs {configs} and --work {work} overlap" in err, err
    assert err.count("\n") == 1 and sorted(tmp_path.rglob("*")) == before


def test_a_budget_that_leaves_a_part_no_time_before_its_interrupt_is_refused(gpu_check, tmp_path, capsys):
    """--budget 12 passed the check (a part starts with 10 s left), then every part was interrupted 1 s in (its
    budget less the 15 s grace before the kill): 'checkpoint: timeout in 1 s'."""
    with pytest.raises(SystemExit) as exit_:
        gpu_check.main(["--device", "cpu", "--budget", "20", "--work", str(tmp_path / "w"), "--out",
                        str(tmp_path / "o.json")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--budget 20" in err and f"give --budget >= {gpu_check.MIN_START_S:g}" in err
    assert gpu_check.MIN_START_S >= gpu_check.GRACE_S + 10 and list(tmp_path.iterdir()) == []


def test_a_summary_that_cannot_be_written_after_the_run_is_kept_in_the_work_folder(gpu_check, tmp_path, capsys):
    """--out d/o.json where d became a file during the run: every part ran, then '[Errno 17] File exists: d' and
    the summary was lost (its table printed, its JSON nowhere)."""
    work, out = tmp_path / "w", tmp_path / "d" / "o.json"
    work.mkdir()
    (tmp_path / "d").write_text("made during the run")
    rows = [{"part": "ok", "status": "passed", "seconds": 1.0, "budget_s": 20, "returncode": 0, "numbers": {}}]
    with pytest.raises(gpu_check.InputError, match=f"kept in {work / 'gpu_check.json'}"):
        gpu_check.summarise(rows, {"device": "cpu"}, out, keep=work / "gpu_check.json")
    kept = json.loads((work / "gpu_check.json").read_text())
    assert kept["parts"] == rows and kept["all_passed"] is True
    assert (tmp_path / "d").read_text() == "made during the run"


@pytest.mark.parametrize("mode", [["--device", "cpu"], ["--device", "cpu", "--quick"]])
def test_gpu_where_no_ledger_budget_is_taken_is_refused(gpu_check, tmp_path, capsys, mode):
    """--gpu h200 with --device cpu (or --quick) was silently ignored: those runs take hand-set budgets."""
    with pytest.raises(SystemExit) as exit_:
        gpu_check.main([*mode, "--gpu", "h200", "--budget", "5", "--work", str(tmp_path / "w"), "--out",
                        str(tmp_path / "o.json")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--gpu h200" in err and "leave --gpu out" in err, err
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_a_sigterm_stops_the_running_part_too(gpu_check, tmp_path, monkeypatch, capsys):
    """SIGTERM of gpu_check (timeout's, a scheduler's) killed the script alone: the running part, in a session of its
    own, ran on, holding the GPU."""
    pid_file = tmp_path / "pid"
    child = ("import os, signal, sys, time; open(sys.argv[1], 'w').write(str(os.getpid()));"
             " os.kill(os.getppid(), signal.SIGTERM); time.sleep(60)")
    part = gpu_check.Part("slow", [sys.executable, "-c", child, str(pid_file)], 60, gpu_check.read_nothing)
    monkeypatch.setattr(gpu_check, "build_parts", lambda args, work: [part])
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)  # this test process: not killed
    try:
        with pytest.raises(SystemExit) as exit_:
            gpu_check.main(["--device", "cpu", "--budget", "30", "--work", str(tmp_path / "w"), "--out",
                            str(tmp_path / "o.json")])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert exit_.value.code == 130 and "interrupted" in capsys.readouterr().err
    with pytest.raises(ProcessLookupError):  # stopped and reaped, not running on
        os.kill(int(pid_file.read_text()), 0)


def test_an_out_that_is_a_file_of_configs_is_refused_before_it_is_replaced(gpu_check, tmp_path, capsys,
                                                                             monkeypatch):
    """--out CONFIGS/models/smollm2-135m/config.json ran every part, then replaced the packed config with the
    summary: the next run's --configs was damaged."""
    monkeypatch.setattr(gpu_check, "run_parts", lambda parts, budget, work, env: [])  # no part is run either way
    config = tmp_path / "pk" / "models" / "smollm2-135m" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text('{"model_type": "llama"}')
    with pytest.raises(SystemExit) as exit_:
        gpu_check.main(["--device", "cpu", "--quick", "--configs", str(tmp_path / "pk"), "--work",
                        str(tmp_path / "w"), "--out", str(config)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"--out {config} is a file of --configs" in err and err.count("\n") == 1, err
    assert config.read_text() == '{"model_type": "llama"}' and not (tmp_path / "w").exists()


def test_a_ctrl_c_after_a_part_ran_keeps_the_rows_of_the_parts_that_ran(gpu_check, tmp_path, monkeypatch):
    """A Ctrl-C of gpu_check after parts ran lost their rows (nothing written; the next run replaces --work whole):
    they are kept beside --out, in a file not taken for a finished run, and the interrupt's line says where."""
    parts = [gpu_check.Part(name, ["true"], 60, gpu_check.read_nothing) for name in ("first", "second")]

    def run_part(part, budget, work, env):
        if part.name == "second":
            raise KeyboardInterrupt
        return {"part": part.name, "status": "passed", "seconds": 1.0, "budget_s": 60, "returncode": 0, "numbers": {}}

    monkeypatch.setattr(gpu_check, "run_part", run_part)
    keep = tmp_path / "gpu_check.interrupted.json"
    with pytest.raises(KeyboardInterrupt, match=f"1 part.s. that ran are kept in {keep}"):
        gpu_check.run_parts(parts, 600, tmp_path / "work", {}, keep=keep)
    kept = json.loads(keep.read_text())
    assert kept["interrupted"] is True and [row["part"] for row in kept["parts"]] == ["first"]


def test_the_interrupt_line_says_what_the_script_kept(monkeypatch, capsys):
    from analyses.cli_checks import script_main

    monkeypatch.setattr(sys, "argv", ["gpu_check.py"])

    @script_main
    def interrupted() -> int:
        raise KeyboardInterrupt("the rows of the 1 part(s) that ran are kept in x.interrupted.json")

    with pytest.raises(SystemExit) as exit_:
        interrupted()
    assert exit_.value.code == 130
    assert capsys.readouterr().err == ("gpu_check.py: interrupted; the rows of the 1 part(s) that ran are kept in "
                                       "x.interrupted.json\n")
