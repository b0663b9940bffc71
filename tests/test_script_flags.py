"""The benchmark scripts' shared entry (``analyses.cli_checks``: ScriptParser, the typed flags, script_main):
a Ctrl-C part way is one line and exit 130, not a traceback; --threads within what torch takes; a --timeout
that a process can wait; no value given twice to a flag of several values; an --edge
or a --report that is what the script takes; an output file written whole, its folder made; a Ctrl-C while a script
imports is one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.analyses.cli_fuzz import benchmark_module, benchmark_parser, benchmark_scripts
from tests.fresh_process import ctrl_c_as_at_a_terminal

ROOT = Path(__file__).resolve().parents[1]


def test_a_ctrl_c_while_a_step_runs_is_one_line_and_exit_130(tmp_path, monkeypatch, capsys):
    script = benchmark_module(ROOT / "benchmarks" / "toy_phases_sweep.py")

    def interrupted(*args: str, threads: int) -> float:
        raise KeyboardInterrupt

    monkeypatch.setattr(script, "mechprobe", interrupted)
    monkeypatch.setattr(sys, "argv", ["toy_phases_sweep.py", "--seeds", "0", "--out", str(tmp_path / "sweep")])
    try:
        script.main()
    except KeyboardInterrupt:
        pytest.fail("the interrupt left script_main: Python prints its traceback")
    except SystemExit as exited:
        err = capsys.readouterr().err.strip()
        assert exited.code == 130 and err == "toy_phases_sweep.py: interrupted", err
    else:
        pytest.fail("the interrupted sweep returned")


def test_a_real_sigint_part_way_prints_no_traceback(tmp_path):
    """SIGINT once the sweep's first step runs (it made the sweep's folder): one line, exit 130."""
    out = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "toy_phases_sweep.py"), "--seeds", "0",
                                "--checkpoints", "2", "--out", str(out)], env=env, cwd=tmp_path,
                               preexec_fn=ctrl_c_as_at_a_terminal,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not out.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130 and err.strip() == "toy_phases_sweep.py: interrupted", err


THREADED = ["ablation_null_cost.py", "edge_cost.py", "gpu_long_context.py", "head_scores_speed.py",
            "probe_suite_speed.py", "toy_phases_sweep.py", "toy_training_speed.py", "train_lm_sweep.py"]


@pytest.mark.parametrize("name", THREADED)
@pytest.mark.parametrize("threads", [str(2**63 - 1), str(2**31), "1025"])
def test_threads_past_what_torch_takes_are_a_usage_error(name, threads, capsys):
    """torch.set_num_threads overflowed (a ValueError traceback after the model loaded) past 2**31 - 1."""
    parser = benchmark_parser(ROOT / "benchmarks" / name)
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--threads", threads])
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1, err
    assert f"argument --threads: {threads} is above 1024; give an integer from" in err, err


@pytest.mark.parametrize("name", THREADED)
def test_threads_up_to_the_bound_are_taken(name):
    assert benchmark_parser(ROOT / "benchmarks" / name).parse_args(["--threads", "1024", "--out", "x"]
                                                                  if name.endswith("sweep.py") else
                                                                  ["--threads", "1024"]).threads == 1024


@pytest.mark.parametrize("timeout", ["1e308", "1e8", "604801"])
def test_a_timeout_subprocess_cannot_wait_is_a_usage_error(timeout, capsys):
    """gpu_long_context.py --timeout 1e308 ran the first measurement's process, then an OverflowError traceback."""
    parser = benchmark_parser(ROOT / "benchmarks" / "gpu_long_context.py")
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--timeout", timeout])
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1, err
    assert f"argument --timeout: {timeout} is not a finite number > 0 and <= 604800" in err, err


def test_the_longest_timeout_taken_is_one_a_process_can_wait():
    script = benchmark_module(ROOT / "benchmarks" / "gpu_long_context.py")
    assert benchmark_parser(ROOT / "benchmarks" / "gpu_long_context.py").parse_args(
        ["--timeout", "604800"]).timeout == script.MAX_TIMEOUT_S
    assert subprocess.run([sys.executable, "-c", "pass"], timeout=script.MAX_TIMEOUT_S).returncode == 0


@pytest.mark.parametrize(("name", "argv", "twice"), [
    ("plan_ledger.py", ["--lengths", "8192", "08192"], "--lengths: 8192"),
    ("plan_ledger.py", ["--shapes", "smollm2-135m", "smollm2-135m"], "--shapes: smollm2-135m"),
    ("plan_ledger.py", ["--routes", "bare", "suite", "bare"], "--routes: bare"),
    ("gpu_long_context.py", ["--lengths", "512", "512"], "--lengths: 512"),
    ("gpu_long_context.py", ["--layers", "4", "4"], "--layers: 4"),
    ("gpu_long_context.py", ["--skip", "smollm2:8:bare", "smollm2:8:bare"], "--skip: smollm2:8:bare"),
    ("probe_memory.py", ["--factors", "1", "4", "1"], "--factors: 1"),
    ("topic_coherence.py", ["--seeds", "1", "1"], "--seeds: 1"),
])
def test_a_value_given_twice_to_a_flag_of_several_values_is_a_usage_error(name, argv, twice, capsys):
    """plan_ledger.py --lengths 8192 8192 printed each row twice; topic_coherence.py --seeds 1 1 fitted seed 1 twice
    and counted it twice in the mean +- sd over seeds (as list_arg's comma lists; checked once, in ScriptParser)."""
    with pytest.raises(SystemExit) as exited:
        benchmark_parser(ROOT / "benchmarks" / name).parse_args(argv)
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1, err
    assert f"argument {twice} is given twice; give each value once" in err, err


def test_distinct_values_of_a_flag_of_several_values_are_taken():
    parsed = benchmark_parser(ROOT / "benchmarks" / "plan_ledger.py").parse_args(["--lengths", "8192", "16384"])
    assert parsed.lengths == [8192, 16384]


@pytest.mark.parametrize("edge", ["0.0,,1.0", "", "0.0;1.0"])
def test_a_malformed_edge_names_edge_not_a_flag_the_script_lacks(edge, monkeypatch, capsys):
    """edge_cost.py --edge 0.0,,1.0 said '--heads must be LAYER.HEAD pairs ...': edge_cost has no --heads."""
    script = benchmark_module(ROOT / "benchmarks" / "edge_cost.py")
    monkeypatch.setattr(sys, "argv", ["edge_cost.py", "--model", "minilm-l6", "--edge", edge])
    with pytest.raises(SystemExit) as exited:
        script.main()
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1, err
    assert "--edge must be LAYER.HEAD pairs" in err and "--heads" not in err, err


class _Loaded(BaseException):
    """Raised where linear_section_speed.py loads its first model: its checks passed."""


def _linear_section_speed(report: Path, monkeypatch, capsys) -> tuple[object, str]:
    import probes.core.loading

    def loaded(spec: str):
        raise _Loaded(spec)

    script = benchmark_module(ROOT / "benchmarks" / "linear_section_speed.py")
    monkeypatch.setattr(probes.core.loading, "load_model", loaded)
    monkeypatch.setattr(sys, "argv", ["linear_section_speed.py", "--report", str(report), "--models", "minilm-l6"])
    with pytest.raises((SystemExit, _Loaded)) as stopped:
        script.main()
    return stopped.value, capsys.readouterr().err.strip()


def test_a_report_folder_without_topics_or_toys_is_refused_before_any_model_loads(tmp_path, monkeypatch, capsys):
    """linear_section_speed.py --report EMPTY_FOLDER fitted an LDA, probed no toy and printed the timings as the
    report's linear section's, exit 0."""
    (tmp_path / "toy" / "topic").mkdir(parents=True)  # a folder that is not a toy's
    stopped, err = _linear_section_speed(tmp_path, monkeypatch, capsys)
    assert isinstance(stopped, SystemExit) and stopped.code == 2 and len(err.splitlines()) == 1, err
    assert f"--report '{tmp_path}' holds neither topics/ nor a toy folder (toy/" in err, err


def test_a_report_that_is_a_looping_link_is_named_as_one(tmp_path, monkeypatch, capsys):
    """It said "--report LOOP is not a folder" (issue 45: the wrong cause)."""
    (tmp_path / "loop").symlink_to("loop")
    stopped, err = _linear_section_speed(tmp_path / "loop", monkeypatch, capsys)
    assert isinstance(stopped, SystemExit) and stopped.code == 2 and len(err.splitlines()) == 1, err
    assert f"--report {tmp_path / 'loop'}: a symbolic link on it loops" in err, err


def test_a_report_folder_with_its_topic_model_is_taken(tmp_path, monkeypatch, capsys):
    (tmp_path / "topics").mkdir()
    (tmp_path / "topics" / "topic_config.json").write_text("{}")
    stopped, err = _linear_section_speed(tmp_path, monkeypatch, capsys)
    assert isinstance(stopped, _Loaded), err


def _stand_in_corpus(monkeypatch):
    """cooccurrence_counting.py with a stand-in corpus of 12 tokens (3 distinct) and tokenizer."""
    from types import SimpleNamespace

    script = benchmark_module(ROOT / "benchmarks" / "cooccurrence_counting.py")
    tokenizer = SimpleNamespace(encode=lambda text, add_special_tokens: [int(word) for word in text.split()])
    monkeypatch.setattr(script.probes, "load_model", lambda spec: SimpleNamespace(tokenizer=tokenizer))
    monkeypatch.setattr(script, "iter_documents", lambda corpus, min_chars: iter(
        [SimpleNamespace(text="1 2 3 1 2 3"), SimpleNamespace(text="3 2 1 3 2 1")]))
    return script


@pytest.mark.parametrize(("argv", "words"), [
    (["--windows", "1", "--seq-len", "100000000", "--top-k", "1"],
     "--windows 1 x --seq-len 100000000 = 100,000,000 tokens, but the corpus"),
    (["--windows", "13", "--seq-len", "1", "--top-k", "1"], "= 13 tokens, but the corpus"),
    (["--windows", "2", "--seq-len", "6", "--top-k", "4"],
     "--top-k 4: the 12 tokens counted hold 3 distinct tokens, so tokens never seen would be tracked; give --top-k 3"),
])
def test_more_tokens_than_the_corpus_gives_or_a_top_k_never_seen_is_one_line(argv, words, monkeypatch, capsys):
    """--seq-len 100000000 was a RuntimeError traceback (reshape), --top-k 100000 one too (topk), exit 1."""
    script = _stand_in_corpus(monkeypatch)
    monkeypatch.setattr(sys, "argv", ["cooccurrence_counting.py", *argv, "--repeats", "1"])
    with pytest.raises(SystemExit) as exited:
        script.main()
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1 and words in err, err


def test_windows_the_corpus_fills_are_counted(monkeypatch, capsys):
    script = _stand_in_corpus(monkeypatch)
    monkeypatch.setattr(sys, "argv", ["cooccurrence_counting.py", "--windows", "2", "--seq-len", "6", "--top-k",
                                      "3", "--repeats", "1"])
    script.main()
    assert "identical counts: True" in capsys.readouterr().out


@pytest.mark.parametrize(("flag", "below"), [("--scansnap-steps", 2), ("--induction-steps", 1), ("--full-steps", 1),
                                             ("--topic-steps", 2)])
def test_fewer_steps_than_a_rate_needs_are_a_usage_error(flag, below, capsys):
    """toy_training_speed.py --scansnap-steps 1 trained, then an IndexError traceback (a rate of one stamp);
    --induction-steps 1 a ZeroDivisionError."""
    parser = benchmark_parser(ROOT / "benchmarks" / "toy_training_speed.py")
    with pytest.raises(SystemExit) as exited:
        parser.parse_args([flag, str(below)])
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and f"argument {flag}: {below} is below {below + 1}" in err, err


def test_the_fewest_steps_taken_give_a_rate():
    script = benchmark_module(ROOT / "benchmarks" / "toy_training_speed.py")
    clock = script.StepClock()
    clock.stamps = [0.0, 1.0, 3.0]  # three steps; the first is not timed
    assert clock.rate(1) == 0.5


def test_a_json_in_a_folder_not_made_yet_is_written_not_lost_at_the_end(tmp_path, monkeypatch, capsys):
    """check_output_file passes a file in a folder that can be made; plan_ledger.py --json NEW/sub/x.json (and
    edge_cost.py --out, ablation_null_cost.py --json, gpu_long_context.py --json) ran, then lost every
    measurement: '[Errno 2] No such file or directory'."""
    script = benchmark_module(ROOT / "benchmarks" / "plan_ledger.py")
    out = tmp_path / "new" / "sub" / "x.json"
    monkeypatch.setattr(sys, "argv", ["plan_ledger.py", "--json", str(out), "--no-calibration", "--routes", "bare",
                                      "--lengths", "8192", "--shapes", "smollm2-135m"])
    script.main()
    assert [row["route"] for row in json.loads(out.read_text(encoding="utf-8"))] == ["bare"]


def test_a_write_stopped_part_way_leaves_the_earlier_file_whole(tmp_path, monkeypatch):
    import probes.core.atomic
    from analyses.output_paths import write_output_file

    out = tmp_path / "x.json"
    out.write_text('{"earlier": 1}', encoding="utf-8")

    def interrupted(source, target):
        raise KeyboardInterrupt

    monkeypatch.setattr(probes.core.atomic.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_output_file(out, '{"later": 2}')
    assert out.read_text(encoding="utf-8") == '{"earlier": 1}' and [p.name for p in tmp_path.iterdir()] == ["x.json"]


@pytest.mark.parametrize(("name", "documents", "reason"), [
    ("lda_speed.py", "1", "LDA needs at least 2 non-empty documents"),
    ("lda_speed.py", "2", "Holding out text needs at least 3 non-empty documents"),
    ("lda_speed.py", "10", "After filter_extremes only 0 words remain"),
    ("topic_coherence.py", "1", "LDA needs at least 2 non-empty documents"),
])
def test_too_few_documents_to_fit_name_max_documents_not_a_setting(name, documents, reason, monkeypatch, capsys):
    """lda_speed.py --max-documents 2 said 'Use a larger corpus or set held_out_fraction=0', --max-documents 10
    'or lower no_below': settings the script has no flag for."""
    script = benchmark_module(ROOT / "benchmarks" / name)
    monkeypatch.setattr(sys, "argv", [name, "--max-documents", documents])
    with pytest.raises(SystemExit) as exited:
        script.main()
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1, err
    assert f"--max-documents {documents}: too little data ({reason}" in err and "give a larger --max-documents" in err
    assert "held_out_fraction" not in err and "no_below" not in err, err


# A Ctrl-C while the script imports torch: the import sends this process SIGINT, as a Ctrl-C in those seconds does.
IMPORT_INTERRUPTED = (
    "import os, runpy, signal, sys\n"
    "class Interrupt:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'torch':\n"
    "            os.kill(os.getpid(), signal.SIGINT)\n"
    "sys.meta_path.insert(0, Interrupt())\n"
    "runpy.run_path(sys.argv[1], run_name='__main__')\n")


SCRIPTS = [path.name for path in benchmark_scripts()]


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_ctrl_c_while_a_script_imports_is_one_line_and_exit_130(name):
    """SIGINT in a script's first seconds (importing torch) was a KeyboardInterrupt traceback, killed by SIGINT."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", IMPORT_INTERRUPTED, str(ROOT / "benchmarks" / name)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120, preexec_fn=ctrl_c_as_at_a_terminal)
    assert (done.returncode, done.stderr) == (130, f"{name}: interrupted while starting; nothing was run\n"), \
        done.stderr[-2000:]


@pytest.mark.parametrize("seed", [str(2**32), str(2**63 - 1)])
def test_the_edge_cost_seed_has_every_commands_range(seed, capsys):
    """edge_cost.py --seed 9223372036854775807 ran (count_arg(0)); every other --seed is 0 <= seed < 2**32."""
    with pytest.raises(SystemExit) as exited:
        benchmark_parser(ROOT / "benchmarks" / "edge_cost.py").parse_args(["--seed", seed])
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and "argument --seed: seed must be an integer with 0 <= seed < 2**32" in err, err


@pytest.mark.parametrize("skip", ["smollm2:9:bare", "smollm2:08:bare", "llama1b:8:bare"])
def test_a_skip_that_names_no_measurement_of_the_run_is_refused(skip, monkeypatch, capsys):
    """gpu_long_context.py --lengths 8 --skip smollm2:9:bare measured everything, the skip ignored silently."""
    script = benchmark_module(ROOT / "benchmarks" / "gpu_long_context.py")
    monkeypatch.setattr(script, "_measure", lambda spec, timeout: pytest.fail(f"measured {spec}"))
    monkeypatch.setattr(sys, "argv", ["gpu_long_context.py", "--lengths", "8", "--layers", "--skip", skip])
    with pytest.raises(SystemExit) as exited:
        script.main()
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1, err
    assert f"--skip '{skip}' names no measurement of this run (--shapes smollm2, --lengths 8)" in err, err


def test_a_skip_of_a_measurement_of_the_run_skips_it(monkeypatch, capsys):
    script = benchmark_module(ROOT / "benchmarks" / "gpu_long_context.py")
    measured: list[str] = []
    monkeypatch.setattr(script, "_measure", lambda spec, timeout: measured.append(spec["route"]) or {
        **spec, "seconds": 1.0, "peak_mib": 1.0, "error": None})
    monkeypatch.setattr(sys, "argv", ["gpu_long_context.py", "--lengths", "8", "--layers", "--skip", "smollm2:8:cache"])
    script.main()
    assert "cache" not in measured and "bare" in measured


@pytest.mark.parametrize(("documents", "reason"), [("5", "After filter_extremes only 0 words remain"),
                                                   ("50", "The word -> topic assignment is empty")])
def test_too_few_lda_documents_name_the_flag_not_settings_the_script_lacks(documents, reason, tmp_path,
                                                                            monkeypatch, capsys):
    """probe_suite_speed.py --lda-documents 50 advised 'fewer topics or top words, chunk_words=0 or a lower
    no_below ... held_out_fraction=0': no flags of the script."""
    from tests.random_checkpoints import make_random_checkpoint

    model = make_random_checkpoint("llama", tmp_path / "llama")
    script = benchmark_module(ROOT / "benchmarks" / "probe_suite_speed.py")
    monkeypatch.setattr(sys, "argv", ["probe_suite_speed.py", "--model", str(model), "--seq-len", "32", "--batches",
                                      "1", "--batch-size", "1", "--repeats", "1", "--lda-documents", documents])
    with pytest.raises(SystemExit) as exited:
        script.main()
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert exited.value.code == 2 and len(err) == 1, err
    assert f"--lda-documents {documents}: too little data ({reason}" in err[0] and "no_below" not in err[0], err


@pytest.mark.parametrize("name", ["probe_suite_speed.py", "probe_memory.py"])
@pytest.mark.parametrize("seq_len", ["2", "16", "17"])
def test_a_seq_len_no_text_row_fits_is_a_usage_error(name, seq_len, capsys):
    """probe_suite_speed.py --seq-len 16 fitted the LDA, then an IndexError traceback: text_token_batches keeps
    rows of at least 16 tokens besides BOS/SEP, so no batch came; probe_memory.py --seq-len 4 said 'a step failed
    ...: No batches were given: the batch iterable was empty.; fix that', naming no flag."""
    with pytest.raises(SystemExit) as exited:
        benchmark_parser(ROOT / "benchmarks" / name).parse_args(["--seq-len", seq_len])
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and f"argument --seq-len: {seq_len} is below 18" in err, err


def test_the_least_seq_len_taken_gives_a_text_row():
    from probes.text.text_batches import document_windows

    assert benchmark_parser(ROOT / "benchmarks" / "probe_suite_speed.py").parse_args(["--seq-len", "18"]).seq_len == 18
    assert [len(piece) for piece in document_windows(list(range(40)), 18 - 2, 16)] == [16, 16]  # BOS and SEP


@pytest.mark.parametrize("name", ["head_scores_speed.py", "probe_suite_speed.py"])
def test_more_detect_sequences_than_a_batch_holds_are_refused_before_the_model_loads(name, monkeypatch, capsys):
    """head_scores_speed.py --batch-size 1 --detect-sequences 5 timed detect_head on 1 row, silently."""
    script = benchmark_module(ROOT / "benchmarks" / name)
    monkeypatch.setattr(script.probes, "load_model", lambda *args, **kwargs: pytest.fail("the model loaded"))
    monkeypatch.setattr(sys, "argv", [name, "--model", "minilm-l6", "--batch-size", "1", "--detect-sequences", "5"])
    with pytest.raises(SystemExit) as exited:
        script.main()
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1, err
    assert "--detect-sequences 5: detect_head is timed on rows of the first batch, which holds --batch-size 1" in err


def test_a_size_the_machine_cannot_hold_is_one_line_and_any_other_error_keeps_its_traceback(monkeypatch, capsys):
    """toy_training_speed.py --topic-batch 2**63-1 trained the other toys, then a RuntimeError traceback ('Storage
    size calculation overflowed'); a RuntimeError that is not a size is a bug and keeps its traceback."""
    import torch

    from analyses.cli_checks import script_main

    monkeypatch.setattr(sys, "argv", ["toy_training_speed.py"])
    with pytest.raises(SystemExit) as exited:
        script_main(lambda: torch.empty(2**63 - 1, dtype=torch.int64))()
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("toy_training_speed.py: error: out of memory (Storage size calculation overflowed"), err

    def bug() -> None:
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    with pytest.raises(RuntimeError, match="mat1 and mat2"):
        script_main(bug)()


@pytest.mark.parametrize(("name", "argv", "flag"), [
    ("gpu_check.py", ["--budget", "100", "--budget", "200"], "--budget"),
    ("plan_ledger.py", ["--json", "a.json", "--json", "b.json"], "--json"),
    ("plan_ledger.py", ["--lengths", "8", "--lengths", "16"], "--lengths"),
])
def test_a_flag_given_twice_is_a_usage_error(name, argv, flag, capsys):
    """argparse kept the last value silently (gpu_check.py --budget 100 --budget 200 ran on 200)."""
    with pytest.raises(SystemExit) as exited:
        benchmark_parser(ROOT / "benchmarks" / name).parse_args(argv)
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1, err
    assert f"argument {flag}: given twice ({flag} already); give it once" in err, err


@pytest.mark.parametrize("name", ["head_scores_speed.py", "edge_cost.py", "ablation_null_cost.py"])
def test_a_seq_len_longer_than_the_context_names_the_scripts_flag(name, tmp_path, monkeypatch, capsys):
    """``--seq-len 100000`` on SmolLM2 advised "Use seq_len <= 4095", the library's argument, not the script's flag."""
    from tests.random_checkpoints import N_CTX, make_random_checkpoint

    model = make_random_checkpoint("llama", tmp_path / "llama")
    script = benchmark_module(ROOT / "benchmarks" / name)
    monkeypatch.setattr(sys, "argv", [name, "--model", str(model), "--seq-len", str(N_CTX)])
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # ablation_null_cost.py measures in child processes
    with pytest.raises(SystemExit) as exited:
        script.main()
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert exited.value.code == 2 and len(err) == 1, err
    assert f"--seq-len {N_CTX}: the repeated block [BOS] X X needs {2 * N_CTX + 1} positions, more than the " \
           f"context of {N_CTX} of" in err[0] and f"give --seq-len {(N_CTX - 1) // 2} or less." in err[0], err
