"""analyses/toy_seeds.py: the further seeds measured in worker processes give the numbers one process gives."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from analyses.toy_seeds import run_toys_with_seeds, usable_cpus
from probes.core.errors import ConfigError
from tests.test_gpu import _tiny_config

ROOT = Path(__file__).resolve().parents[2]


def _runs(tmp_path, tag):
    runs = []
    for toy in ("induction", "topic"):
        out = tmp_path / tag / toy
        out.mkdir(parents=True)
        runs.append((toy, _tiny_config(toy, "fast"), out))
    return runs


def test_seeds_in_two_worker_processes_equal_one_process_bit_for_bit(tmp_path):
    alone = run_toys_with_seeds(_runs(tmp_path, "alone"), n_seeds=2, progress=False, workers=1)
    pooled = run_toys_with_seeds(_runs(tmp_path, "pooled"), n_seeds=2, progress=False, workers=2)
    assert [r.to_json() for r in pooled] == [r.to_json() for r in alone]
    for result in pooled:  # the findings are over both seeds, not the first one alone
        assert {len(f.per_seed) for f in result.toy_findings().values()} == {2}
    for toy in ("induction", "topic"):
        assert (tmp_path / "pooled" / toy / "summary.json").read_text() == (
            tmp_path / "alone" / toy / "summary.json").read_text()


def test_worker_and_seed_counts_are_checked_before_any_training(tmp_path):
    with pytest.raises(ConfigError, match="workers"):
        run_toys_with_seeds(_runs(tmp_path, "bad"), n_seeds=2, progress=False, workers=0)
    assert not list((tmp_path / "bad" / "topic").iterdir())
    assert usable_cpus() >= 1


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(pid):
            found.add(int(status.parent.name))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the workers follow their parent through prctl")
def test_killing_the_process_that_started_the_workers_ends_them(tmp_path):
    """SIGKILL gives the parent no chance to stop its workers; they end with it instead of finishing their seeds,
    which here would take minutes (a killed report leaves no process behind)."""
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from analyses.toy_seeds import toy_seeds\n"
        "from tests.test_gpu import _tiny_config\n"
        "from analyses.config_overrides import apply_overrides\n"
        "config = apply_overrides(_tiny_config('topic', 'fast'), ['joint.n_steps=1000000'])  # minutes a seed\n"
        "runs = [('topic', config, Path(sys.argv[1]))]\n"
        "with toy_seeds(runs, n_seeds=3, workers=2):\n"
        "    print('started', flush=True)\n"
        "    time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "started"
        workers = _children(parent.pid)
        assert len(workers) == 2
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while workers and time.monotonic() < deadline:
        workers = {pid for pid in workers if Path(f"/proc/{pid}").exists()
                   and "zombie" not in Path(f"/proc/{pid}/status").read_text()}
        time.sleep(0.1)
    assert not workers, f"workers {sorted(workers)} outlived their parent"
