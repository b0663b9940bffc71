"""One command that checks mechprobe's device paths and their speed on a machine with one NVIDIA GPU (no network).

Parts, in order, each in its own process with its own time budget (the process group is killed when it runs
over); a part that fails or runs over is recorded as such and the next part runs. The whole stays within
``--budget`` seconds (default 480, 8 minutes); the CPU report runs only if its whole budget is still left.

1. ``checkpoint``: a random-weight checkpoint of SmolLM2-135M's exact shape, from the packaged config and tokenizer;
2. ``long-context``: ``benchmarks/gpu_long_context.py`` (bf16; SmolLM2 and Llama-1B shapes at 8k and 32k tokens;
   bare SDPA and suite routes; 2 repeats; each layer's attention kernels logged; the bridge's eager route, measured
   on the H200 at b81b399 and de21b09, is left out: 3 rows of 20 s each that the tests need);
3. ``ablation-null``: ``benchmarks/ablation_null_cost.py`` with 200 draws on the checkpoint of part 1;
4. ``report-<device>``: ``mechprobe report --fast --no-toys --device <device>`` on the checkpoint of part 1;
5. ``tests``: the ``<device>`` cases of ``pytest tests/test_gpu.py tests/analyses/test_toy_device.py`` (its tests
   that need the packaged weights run on random-weight models of the same shape where the weights are absent, and
   warn that they do; CI runs their ``cpu`` cases);
6. ``report-cpu``: part 4 on the CPU, if its whole budget is left; its verdicts are compared with part 4's.

The must-show parts come first. The long-context and null budgets come from the cost ledger (``analyses.plan``:
the same code on meta tensors through the CUDA branch, estimated for ``--gpu``): a measuring process gets
:data:`STARTUP_S` plus :data:`SAFETY` times its passes' estimated time, and a row the ledger says will not fit is
skipped; ``ledger_plan.json`` in ``--work`` keeps the estimates (or, where the ledger fails on the machine's torch,
its error, and the parts run with hand-set budgets). The summary ends with issue 44's must-shows, each pass, FAIL
or not measured.

It prints one table and writes every part's status, seconds and numbers to ``--out`` (JSON; the reading of the
numbers, the must-shows and the summary are in ``gpu_check_results.py`` beside it); the parts' logs and
outputs go to ``--work`` (default ``gpu_check_work``). ``--quick`` shrinks every part (the checkpoint to SmolLM2's
architecture at 2 layers) so that ``--quick --device cpu`` runs on a 2-core CPU in about a minute; CI runs it
(``tests/test_gpu_check.py``) to test this script's wiring.

On the GPU machine (torch 2.11 and transformers 5.17 installed, no network) carry ``.whl/`` (35 MB: 31 MB of
wheels, 4 MB of configs and tokenizers; benchmarks/README.md lists them) and run from the repository root::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \\
        .whl/*.whl && export PYTHONPATH=/tmp/site
    python3 benchmarks/gpu_check.py --device cuda --configs .whl/mechprobe-cache --out gpu_check.json

Prepare ``.whl/`` here (a machine with the packaged models and PyPI)::

    .venv/bin/python benchmarks/gpu_check.py --pack-configs .whl/mechprobe-cache   # configs + tokenizers, no weights
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl \\
        transformer-lens==4.3.0 datasets==5.2.0 gensim==4.4.0 dill==0.4.1 multiprocess==0.70.19 smart_open==9.0.2
    .venv/bin/python -m pip wheel --no-deps -w .whl .
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# this checkout's code before an installed mechprobe: on the GPU machine the carried wheel (its metadata) is on
# PYTHONPATH, and its copy of the code, older than the checkout, ran the ledger's plan at de21b09; and this script's
# folder, for gpu_check_results beside it (put first by Python when run as a script, not when imported by the tests)
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import analyses.script_start  # noqa: E402, F401  (a Ctrl-C while the imports below run: one line)

# isort: split

from gpu_check_results import (  # noqa: E402  (this script's numbers, must-shows and summary)
    PartReader,
    read_ablation,
    read_long_context,
    read_nothing,
    read_report,
    read_tests,
    summarise,
)

from analyses.cli_checks import ScriptParser, naming, number_arg, script_main, text_arg  # noqa: E402
from analyses.output_paths import (  # noqa: E402
    check_not_read,
    check_output_file,
    check_output_folder,
    write_output_file,
)
from probes.core.errors import InputError  # noqa: E402

PACKAGED = ("smollm2-135m", "minilm-l6")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
GRACE_S = 15.0  # a part over its budget is interrupted (SIGINT: pytest still writes its XML), killed this much later
MIN_START_S = GRACE_S + 10.0  # a part is not started with less time than this left: it runs 10 s before the SIGINT


@dataclass(frozen=True)
class Part:
    """One step of the check: a command run from the repository root, its budget and how to read its numbers."""

    name: str
    command: list[str]
    budget_s: float
    read: PartReader
    needs_whole_budget: bool = False  # run only if the whole budget is still left (the optional CPU report)
    env: tuple[tuple[str, str], ...] = ()  # extra environment variables


def pack_configs(target: Path) -> Path:
    """Write the packaged models' configs and tokenizers, without weights, as a mechprobe cache at ``target``."""
    from probes.core.loading import PACKAGED_MODELS, _package_dir, converted_gguf_dir

    for spec in PACKAGED:
        entry = PACKAGED_MODELS[spec]
        source = converted_gguf_dir(entry) if entry.gguf_file else _package_dir(entry) / (entry.subdir or "")
        folder = target / "models" / spec
        folder.mkdir(parents=True, exist_ok=True)
        for file in source.iterdir():
            if file.is_file() and file.suffix not in WEIGHT_SUFFIXES:
                shutil.copy2(file, folder / file.name)
    return target


def run_part(part: Part, timeout: float, work: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run ``part`` for at most ``timeout`` seconds (its whole process group killed past that); its result row."""
    log = work / f"{part.name}.log"
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as handle:
        process = subprocess.Popen(part.command, cwd=ROOT, env={**env, **dict(part.env)}, stdout=handle,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = stop_at(process, time.perf_counter() + timeout)
        except BaseException:  # Ctrl-C: the part, in a session of its own, did not get it and ran on, orphaned
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
    seconds = time.perf_counter() - start
    output = log.read_text(encoding="utf-8", errors="replace")
    status = "timeout" if code is None else "passed" if code == 0 else "failed"
    try:
        numbers = part.read(work, output)
    except (OSError, ValueError, KeyError, TypeError, ElementTree.ParseError) as error:
        numbers = {"unreadable": f"{type(error).__name__}: {error}"}
    row = {"part": part.name, "status": status, "seconds": round(seconds, 1), "budget_s": round(timeout, 1),
           "returncode": code, "numbers": numbers, "log": str(log)}
    if status != "passed":
        row["tail"] = output[-2000:]
    return row


def stop_at(process: subprocess.Popen, deadline: float) -> int | None:
    """Wait for ``process`` until ``deadline``; past it interrupt its process group, then kill it ``GRACE_S`` later.
    Its exit code, or ``None`` when it had to be stopped."""
    try:
        return process.wait(timeout=max(deadline - time.perf_counter() - GRACE_S, 1.0))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return None


def skipped(part: Part, why: str) -> dict[str, Any]:
    """The row of a part that was not run."""
    return {"part": part.name, "status": "skipped", "seconds": 0.0, "budget_s": part.budget_s, "returncode": None,
            "numbers": {}, "why": why}


def run_parts(parts: list[Part], budget_s: float, work: Path, env: dict[str, str], keep: Path | None = None
              ) -> list[dict[str, Any]]:
    """Run ``parts`` in order within ``budget_s`` seconds in all, each within its own budget. A Ctrl-C or SIGTERM
    after a part ran writes the rows of those that ran to ``keep`` (not ``--out``: not a finished run; not in
    ``--work``, which the next run replaces) and says so in the interrupt's line."""
    deadline = time.perf_counter() + budget_s
    rows: list[dict[str, Any]] = []
    try:
        for part in parts:
            left = deadline - time.perf_counter()
            if left < MIN_START_S or (part.needs_whole_budget and left < part.budget_s):
                rows.append(skipped(part, f"{left:.0f} s of the {budget_s:.0f} s budget left"))
                continue
            rows.append(run_part(part, min(part.budget_s, left), work, env))
            print(f"{part.name}: {rows[-1]['status']} in {rows[-1]['seconds']:.0f} s", flush=True)
    except KeyboardInterrupt:
        ran = [row for row in rows if row["status"] != "skipped"]
        if keep is None or not ran:
            raise
        write_output_file(keep, json.dumps({"interrupted": True, "all_passed": False, "parts": rows}, indent=1))
        raise KeyboardInterrupt(f"the rows of the {len(ran)} part(s) that ran are kept in {keep}; run the same "
                                f"command again for the whole check") from None
    return rows



def report_command(python: str, checkpoint: Path, device: str, dtype: str, out: Path, quick: bool) -> list[str]:
    """``mechprobe report --fast --no-toys`` on ``checkpoint`` (with ``quick``: a few batches, small LDA, no
    ablations and no linear section)."""
    command = [python, "-m", "analyses.cli", "report", "--fast", "--no-toys", "--no-progress", "--model",
               str(checkpoint), "--device", device, "--dtype", dtype, "--out", str(out)]
    if quick:
        command += ["--max-batches", "4", "--seq-len", "32", "--no-control"]
        for setting in ("max_documents=600", "topics.passes=2", "topics.chunk_words=0", "topics.no_below=5",
                        "topics.held_out_fraction=0", "pretrained.n_permutations=100", "pretrained.n_boot=100",
                        "pretrained.protocol_batches=4", "pretrained.causal.enabled=false", "linear.enabled=false"):
            command += ["--set", setting]
    return command


TEST_FILES = ("tests/test_gpu.py", "tests/analyses/test_toy_device.py")
"""The device tests: each parametrised over ``cpu`` (CI runs those) and ``cuda`` (``tests/devices.py``)."""


def tests_command(python: str, device: str, quick: bool, work: Path) -> list[str]:
    """``pytest`` over :data:`TEST_FILES`, only their cases on ``device``'s type (CI runs the CPU cases; with
    ``quick``: the check of the induction toy's tiny settings alone, which trains nothing: the part's wiring is what
    a quick run checks)."""
    kind = device.split(":")[0]
    on_device = "cuda" if kind == "cuda" else "not cuda"  # the case ids: [cpu-...], [cuda-...]
    selected = f"tiny_settings and induction and {on_device}" if quick else on_device
    command = [python, "-m", "pytest", *TEST_FILES, "-m", "slow or not slow", "-k", selected, "-p",
               "no:cacheprovider", "-ra", "-q", f"--junitxml={work / 'tests.xml'}"]
    if kind == "cuda" and importlib.util.find_spec("xdist") is not None:
        command += ["-n", "4", "--dist", "load"]  # the tests' CPU halves (reports, toys) in parallel, 4 threads each
    return command


STARTUP_S = 20.0  # one measuring process: Python, torch, transformers and TransformerLens imported, the model built
SAFETY = 4.0  # a part's budget over the ledger's estimate of its GPU time
LONG_CONTEXT = (("smollm2", "8192"), ("smollm2", "32768"), ("llama1b", "8192"), ("llama1b", "32768"))
LONG_ROUTES = ("bare", "suite")  # the must-shows
LEDGER_SHAPES = {"smollm2": "smollm2-135m", "llama1b": "llama-3.2-1b"}
NULL_SHAPE = (8, 101)  # ablation_null_cost.py's default batches: rows x ([BOS] + 2 x 50 tokens)


@dataclass(frozen=True)
class LedgerPlan:
    """What the cost ledger (analyses.plan, meta tensors through the CUDA branch) says of the GPU parts: each
    long-context row's estimated seconds, the rows that will not fit, and the parts' budgets taken from them."""

    gpu: str
    seconds: dict[str, float]  # "shape:tokens:route" -> estimated seconds of one pass
    skip: tuple[str, ...]  # rows that will not fit in the GPU's memory
    long_context_budget_s: float
    long_context_timeout_s: float  # one measurement's process
    null_budget_s: float

    def as_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "seconds": self.seconds, "skip": list(self.skip),
                "long_context_budget_s": self.long_context_budget_s,
                "long_context_timeout_s": self.long_context_timeout_s, "null_budget_s": self.null_budget_s}


def ledger_plan(gpu: str, repeats: int) -> LedgerPlan:
    """The long-context and null budgets from the ledger's estimates on ``gpu`` ("h100" or "h200"): a measuring
    process gets :data:`STARTUP_S` plus :data:`SAFETY` times its passes' estimated time; rows that will not fit are
    skipped."""
    from analyses.plan.estimate import GPUS, estimate
    from analyses.plan.routes import run
    from analyses.plan.shapes import meta_models

    card = GPUS[gpu]
    seconds, skip, timeouts = {}, [], []
    for shape, length in LONG_CONTEXT:
        models = meta_models(LEDGER_SHAPES[shape], n_pos=int(length))
        for route in LONG_ROUTES:
            found = estimate(run(models, route, int(length)), card)
            key = f"{shape}:{length}:{route}"
            seconds[key] = found.seconds
            if not found.fits:
                skip.append(key)
            else:
                timeouts.append(STARTUP_S + SAFETY * (repeats + 1) * found.seconds)
    rows, length = NULL_SHAPE
    models = meta_models(LEDGER_SHAPES["smollm2"], n_pos=length)
    null = sum(estimate(run(models, route, length, batch=rows), card).seconds for route in ("bare", "null"))
    seconds["smollm2:101x8:null"] = null
    return LedgerPlan(gpu, seconds, tuple(skip), sum(timeouts) + GRACE_S, max(timeouts),
                      3 * STARTUP_S + GRACE_S + SAFETY * null)


def detect_gpu() -> str:
    """"h200" on an H200, else "h100" (the smaller memory: a row that fits it fits both)."""
    import torch

    name = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    return "h200" if "H200" in name else "h100"


def planned(gpu: str, work: Path) -> LedgerPlan | None:
    """:func:`ledger_plan`, or None (its error kept in ``ledger_plan.json``) where the ledger fails on this machine's
    torch: the check then runs with hand-set budgets rather than not at all."""
    try:
        return ledger_plan(gpu, repeats=2)
    except Exception as error:  # any failure of the estimate: the parts still run
        note = f"{type(error).__name__}: {error}"
        print(f"the cost ledger failed ({note}); hand-set budgets", flush=True)
        (work / "ledger_plan.json").write_text(json.dumps({"error": note}, indent=1), encoding="utf-8")
        return None


def build_parts(args: argparse.Namespace, work: Path) -> list[Part]:
    """The parts for ``args``' device, shrunk with ``--quick``."""
    python, quick, cuda = sys.executable, args.quick, args.device.startswith("cuda")
    checkpoint = work / "smollm2-135m-random"
    dtype = "bfloat16" if cuda else "float32"
    build = ("import sys; from pathlib import Path; from tests.random_checkpoints import same_shape_random_checkpoint;"
             " same_shape_random_checkpoint('smollm2-135m', Path(sys.argv[1]))")
    if quick:  # SmolLM2's architecture and tokenizer at 2 layers: the same routes in seconds
        build = ("import sys; from pathlib import Path; from tests.random_checkpoints import make_random_checkpoint;"
                 " make_random_checkpoint('llama', Path(sys.argv[1]))")
    tests = tests_command(python, args.device, quick, work)
    plan = None if quick or not cuda else planned(args.gpu or detect_gpu(), work)
    if quick:  # the same wiring on a 2-layer model at 256 tokens, hand-set budgets
        rows = ["--shapes", "smollm2", "--lengths", "256", "--n-layers", "2", "--repeats", "1", "--timeout", "60"]
        long_budget, null_budget = 165.0, 120.0
    elif plan is None:  # the ledger failed (ledger_plan.json says why): every row, with the H200's measured times
        rows = ["--shapes", "smollm2", "llama1b", "--lengths", "8192", "32768", "--repeats", "2", "--timeout", "60"]
        long_budget, null_budget = 200.0, 3 * STARTUP_S + GRACE_S
    else:
        skip = ["--skip", *plan.skip] if plan.skip else []
        rows = ["--shapes", "smollm2", "llama1b", "--lengths", "8192", "32768", "--repeats", "2",
                "--timeout", f"{plan.long_context_timeout_s:.0f}", *skip]
        long_budget, null_budget = plan.long_context_budget_s, plan.null_budget_s
        (work / "ledger_plan.json").write_text(json.dumps(plan.as_json(), indent=1), encoding="utf-8")
    long_context = [python, "benchmarks/gpu_long_context.py", "--device", args.device, "--dtype", dtype, *rows,
                    "--routes", *LONG_ROUTES, "--layers", "--json", str(work / "long_context.json")]
    draws = ["--draws", "10", "--batches", "1", "--batch-size", "2", "--seq-len", "10"] if quick else ["--draws", "200"]
    ablation = [python, "benchmarks/ablation_null_cost.py", "--model", str(checkpoint), "--device", args.device,
                *draws, "--json", str(work / "ablation_null.json")]
    device_report = f"report-{args.device.split(':')[0]}"
    # the must-shows first (long contexts, the null, the device's report, the tests), then the CPU report if it fits
    parts = [Part("checkpoint", [python, "-c", build, str(checkpoint)], 45, read_nothing),
             Part("long-context", long_context, long_budget, read_long_context),
             Part("ablation-null", ablation, null_budget, read_ablation),
             Part(device_report, report_command(python, checkpoint, args.device, dtype, work / device_report, quick),
                  240 if quick else 90, read_report(device_report)),
             Part("tests", tests, 150, read_tests, env=(("OMP_NUM_THREADS", "4"),) if cuda else ())]
    if cuda:
        parts.append(Part("report-cpu", report_command(python, checkpoint, "cpu", "float32", work / "report-cpu",
                                                       quick), 90, read_report("report-cpu"), needs_whole_budget=True))
    return parts


def child_env(configs: Path | None, work: Path) -> dict[str, str]:
    """The parts' environment: offline, this checkout first on the path, and the packed configs as a private
    mechprobe cache (a copy, so nothing is ever converted into the packed folder)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    if configs is not None:  # check_args made sure it holds models/
        cache = work / "mechprobe-cache"
        shutil.rmtree(cache, ignore_errors=True)
        shutil.copytree(configs, cache)
        env["MECHPROBE_CACHE"] = str(cache)
    return env


def path_arg(text: str) -> Path:
    """argparse type of the path flags: not empty text (``Path("")`` is the working folder, which the checks then
    named as ``.``)."""
    return Path(text_arg(text))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = ScriptParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu to test this script")
    parser.add_argument("--quick", action="store_true", help="shrink every part (about a minute on a 2-core CPU)")
    parser.add_argument("--gpu", choices=("h100", "h200"), help="the card the ledger's budgets are for (default: "
                        "read off the device, h100 where it is neither)")
    parser.add_argument("--budget", type=number_arg(positive=True), default=480.0,
                        help="seconds for all parts together (default 480)")
    parser.add_argument("--configs", type=path_arg, help="packed configs and tokenizers (--pack-configs) used as the "
                        "mechprobe cache where the packaged weights are absent")
    parser.add_argument("--work", type=path_arg, default=Path("gpu_check_work"), help="the parts' logs and outputs")
    parser.add_argument("--out", type=path_arg, default=Path("gpu_check.json"), help="the JSON summary")
    parser.add_argument("--pack-configs", type=path_arg, metavar="DIR",
                        help="write the packaged models' configs and tokenizers (no weights) to DIR and exit")
    return parser.parse_args(argv)


def check_pack_folder(folder: Path) -> None:
    """``folder`` is one that --pack-configs may write: new, empty or an earlier --pack-configs folder."""
    check_output_folder("--pack-configs", str(folder), earlier_output=lambda found: (found / "models").is_dir())


WORK_MARK = ".gpu_check_work"  # in --work: this script made the folder (a later run may replace it)


def check_args(args: argparse.Namespace) -> None:
    """Every flag checked before any part runs or anything is written (one line and exit 2 otherwise): the device,
    a --budget that lets a part start, --configs, and --work and --out as places this script may write (--work new,
    empty or an earlier run's; --out outside it)."""
    from probes.core.loading import check_device

    if args.pack_configs:
        defaults = vars(parse_args([]))
        ignored = [f"--{name.replace('_', '-')}" for name, value in vars(args).items() if value != defaults[name]
                   and name != "pack_configs"]
        if ignored:
            raise InputError(f"--pack-configs {args.pack_configs} writes the configs and exits, so "
                             f"{', '.join(ignored)} would do nothing; give --pack-configs alone, then run the check "
                             f"with --configs {args.pack_configs}.")
        check_pack_folder(args.pack_configs)
        return
    with naming("--device"):
        check_device(args.device)
    if args.gpu and (args.quick or not args.device.startswith("cuda")):  # build_parts asks the ledger for neither
        mode = "--quick" if args.quick else f"--device {args.device}"
        raise InputError(f"--gpu {args.gpu} picks the card whose cost ledger sets a full CUDA run's budgets; {mode} "
                         f"runs with hand-set budgets, which --gpu does not change; leave --gpu out.")
    if args.budget < MIN_START_S:
        raise InputError(f"--budget {args.budget:g}: no part is started with less than {MIN_START_S:g} s left, so "
                         f"every part would be skipped; give --budget >= {MIN_START_S:g} (default 480).")
    if args.configs is not None and not (args.configs / "models").is_dir():
        try:  # the advice is one that is then accepted: not a file, a folder of other files or the working folder
            check_pack_folder(args.configs)
            fix = f"write it with --pack-configs {args.configs}"
        except InputError:
            fix = "give the folder that --pack-configs wrote, or write one with --pack-configs NEW_FOLDER"
        raise InputError(f"--configs {args.configs} holds no models/ folder; {fix}.")
    check_output_folder("--work", str(args.work), earlier_output=lambda folder: (folder / WORK_MARK).is_file())
    check_output_file("--out", str(args.out))
    if args.configs is not None:  # --out CONFIGS/models/smollm2-135m/config.json replaced the packed config
        check_not_read("--out", str(args.out), "--configs", str(args.configs))
    work, out = args.work.resolve(), args.out.resolve()
    configs = None if args.configs is None else args.configs.resolve()
    if configs is not None and (configs == work or work in configs.parents or configs in work.parents):
        # --configs in --work: deleted with it by a later run, before it is read; --work in --configs: the copy
        # of --configs made in --work copied itself, without end
        fix = (f"give a --work outside it, such as {configs.parent / 'gpu_check_work'}" if work != configs and
               configs in work.parents else f"move --configs out of it first, e.g. to {work.parent / configs.name}")
        raise InputError(f"--configs {args.configs} and --work {args.work} overlap (--work, replaced whole by a "
                         f"later run, gets a copy of --configs); {fix}.")
    if out == work or work in out.parents:  # --work: a folder made first (the write at the end would fail), and
        # replaced whole by the next run
        raise InputError(f"--out {args.out} is {'' if out == work else 'inside '}--work {args.work}, the folder "
                         f"this script fills and a later run replaces; give a file outside it, such as "
                         f"gpu_check.json.")


def terminated(signum: int, frame: Any) -> None:
    """SIGTERM (``timeout``, a scheduler): as a Ctrl-C, so that the running part, in a session of its own that the
    signal does not reach, is stopped with the script (:func:`run_part`) rather than left running on the GPU."""
    raise KeyboardInterrupt


@script_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_args(args)
    if args.pack_configs:
        print(f"packed configs and tokenizers in {pack_configs(args.pack_configs)}")
        return 0
    signal.signal(signal.SIGTERM, terminated)
    work = args.work.resolve()
    if (work / WORK_MARK).is_file():  # an earlier run's work folder, which this script made: replaced
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / WORK_MARK).touch()
    env = child_env(args.configs, work)
    if "MECHPROBE_CACHE" in env:  # the ledger's plan (build_parts) reads the packaged tokenizer in this process too
        os.environ["MECHPROBE_CACHE"] = env["MECHPROBE_CACHE"]
    meta = {"device": args.device, "quick": args.quick, "budget_s": args.budget, "python": sys.version.split()[0],
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "work": str(work)}
    start = time.perf_counter()
    rows = run_parts(build_parts(args, work), args.budget, work, env,
                     keep=args.out.with_name(f"{args.out.stem}.interrupted.json"))
    meta["seconds"] = round(time.perf_counter() - start, 1)
    summary = summarise(rows, meta, args.out, keep=work / "gpu_check.json")
    return 0 if summary["all_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
