"""``mechprobe report --series SPEC``: a "Dynamics" section (the shared-axis figure, each series' figure, a table of
its events and orders) built by ``mechprobe dynamics``'s own code, rebuilt by ``render`` from the saved runs; a report
without ``--series`` has no such section."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from analyses.cli import main
from analyses.curve_series import load_curve_series
from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.run import run_dynamics
from analyses.report.build import render_report, run_report
from analyses.report.compare import compare
from analyses.report.config import ReportConfig
from analyses.report.dynamics_section import series_folder
from analyses.report.linear_section import LinearReportConfig
from mechprobe.errors import RecordError
from probes import ConfigError
from tests.stand_in_hub import REPO, make_stand_in_hub, use_stand_in_hub

pytestmark = pytest.mark.usefixtures("one_thread")
SERIES = f"{REPO}@revisions=step0,step512,step1000"
TITLE = "Dynamics: how the mechanisms form over training"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    return make_stand_in_hub(tmp_path_factory.mktemp("hub"), {"step0": 0, "step512": 1, "step1000": 2})


def test_report_with_a_series_has_a_dynamics_section_that_render_rebuilds(hub, tmp_path, monkeypatch):
    use_stand_in_hub(monkeypatch, hub)
    config = ReportConfig(models=(), toys=(), series=(SERIES,), linear=LinearReportConfig(enabled=False))
    run_report(config, tmp_path / "report", progress=False, echo=lambda _: None)
    out = tmp_path / "report"
    markdown = (out / "report.md").read_text()
    assert f"## {TITLE}" in markdown and "figures/dynamics_together.png" in markdown
    assert (out / "figures" / "dynamics_together.png").stat().st_size > 10_000
    summary = json.loads((out / "summary.json").read_text())
    # the same numbers mechprobe dynamics writes into its own summary.json
    own = json.loads((series_folder(out, 0) / "summary.json").read_text())
    assert summary["dynamics"][SERIES]["curves"] == own["curves"] and own["steps"] == [0, 512, 1000]
    table = markdown.split(f"## {TITLE}")[1]
    for curve in ("previous_token", "induction", "duplicate_token", "repeat_loss_gain",
                  "previous_token_before_induction"):
        assert f"| {SERIES} | {curve} |" in table
    assert "| holds |" not in table  # random-weight revisions: no event holds
    (out / "report.md").unlink()
    render_report(out)
    assert (out / "report.md").read_text() == markdown
    damaged = series_folder(out, 0) / "summary.json"
    damaged.write_text("{broken")
    with pytest.raises(RecordError, match=f"{damaged} is not valid JSON.*Re-run mechprobe report"):
        render_report(out)  # the report wrote that folder: its fix, not dynamics'
    assert (out / "report.md").read_text() == markdown


def test_a_series_summary_of_zero_one_or_unordered_steps_is_refused_by_render_in_one_line(hub, tmp_path,
                                                                                          monkeypatch):
    """render of a report whose dynamics/00/summary.json lists 1 step beside 3 values per curve was a ValueError
    traceback (matplotlib: 'x and y must have same first dimension'), of 0 steps an IndexError; steps swapped or
    given twice were drawn as if measured."""
    use_stand_in_hub(monkeypatch, hub)
    config = ReportConfig(models=(), toys=(), series=(SERIES,), linear=LinearReportConfig(enabled=False))
    out = tmp_path / "report"
    run_report(config, out, progress=False, echo=lambda _: None)
    path = series_folder(out, 0) / "summary.json"
    saved = json.loads(path.read_text())
    markdown = (out / "report.md").read_text()
    steps = "its steps must be two or more, increasing from 0 or more; got "
    damages = {f"{steps}[0]": {"steps": [0], "tokens": [0]}, f"{steps}[]": {"steps": [], "tokens": []},
               f"{steps}[0, 1000, 512]": {"steps": [0, 1000, 512]}, f"{steps}[0, 512, 512]": {"steps": [0, 512, 512]},
               "tokens has 2 values for its 3 steps": {"tokens": saved["tokens"][:2]},
               f"{steps}[-5, 512, 1000]": {"steps": [-5, 512, 1000]}}
    curve = next(iter(saved["curves"]))
    damages[f"{curve} has 2 values for its 3 steps"] = {"curves": {**saved["curves"],
                                                                   curve: saved["curves"][curve][:2]}}
    for words, change in damages.items():
        path.write_text(json.dumps({**saved, **change}))
        with pytest.raises(RecordError, match=re.escape(f"{path}: not a valid DynamicsSummary: {words}.") +
                           " Re-run mechprobe report"):
            render_report(out)
        assert (out / "report.md").read_text() == markdown
    path.write_text(json.dumps(saved))
    render_report(out)
    assert (out / "report.md").read_text() == markdown


def test_without_series_the_report_has_no_dynamics_section(hub, tmp_path, monkeypatch):
    use_stand_in_hub(monkeypatch, hub)
    dynamics = run_dynamics(SERIES, tmp_path / "dyn", DynamicsConfig(seq_len=12, n_batches=8, batch_size=4,
                                                                     n_boot=200), progress=False)
    without = compare({}, {}, folder=tmp_path / "a")
    with_series = compare({}, {}, folder=tmp_path / "b", dynamics={SERIES: dynamics})
    assert [s.title for s in with_series.sections] == [s.title for s in without.sections] + [TITLE]
    assert "dynamics" not in without.summary and set(with_series.summary) - set(without.summary) == {"dynamics"}


def test_series_flag_reaches_the_config_and_a_bad_spec_fails_before_work(tmp_path, capsys):
    from analyses.cli import build_parser
    from analyses.commands.report import report_config

    args = build_parser().parse_args(["report", "--out", str(tmp_path / "r"), "--series", "a@revisions=step0,step1",
                                      "--series", str(tmp_path)])
    assert report_config(args).series == ("a@revisions=step0,step1", str(tmp_path))
    assert ReportConfig(models=(), toys=(), series=("x",)).series == ("x",)
    with pytest.raises(ConfigError, match="--series"):
        dataclasses.replace(ReportConfig(), models=(), toys=())
    assert main(["report", "--out", str(tmp_path / "r"), "--series", "gpt2"]) == 2
    assert "names one model, not a series" in capsys.readouterr().err


@pytest.mark.slow
def test_the_toys_orders_are_drawn_beside_the_series_and_rendered_again(hub, tmp_path, monkeypatch):
    use_stand_in_hub(monkeypatch, hub)
    config = ReportConfig(models=(), toys=("topic", "scansnap"), toy_seeds=2, series=(SERIES,),
                          linear=LinearReportConfig(enabled=False))
    run_report(config, tmp_path / "report", progress=False, echo=lambda _: None)
    out = tmp_path / "report"
    markdown = (out / "report.md").read_text()
    assert "figures/toy_orders_together.png" in markdown and "figures/dynamics_together.png" in markdown
    topic = load_curve_series(out / "toy" / "topic", rerun="-")
    scansnap = load_curve_series(out / "toy" / "scansnap", rerun="-")
    assert topic is not None and set(topic.curves) == {"value_displacement", "key_query_displacement"}
    assert scansnap is not None and set(scansnap.curves) == {"composition_displacement"}
    value_step = topic.marks("value_displacement")[0][0]
    assert value_step < topic.marks("key_query_displacement")[0][0]  # W_V first on the fast preset (seed 0)
    assert len(scansnap.marks("composition_displacement")) >= 2  # scans and snaps of the facts
    for name in ("value_before_key_query", "scan_before_snap"):
        assert f"| {name} |" in markdown
    (out / "report.md").unlink()
    render_report(out)
    assert (out / "report.md").read_text() == markdown
