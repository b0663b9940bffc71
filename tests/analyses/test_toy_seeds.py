"""analyses/toy_seeds.py: the further seeds measured in worker processes give the numbers one process gives."""

import pytest

from analyses.toy_seeds import run_toys_with_seeds, usable_cpus
from probes.core.errors import ConfigError
from tests.test_gpu import _tiny_config


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
