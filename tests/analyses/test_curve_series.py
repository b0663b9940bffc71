"""The toys' recorded curves draw beside the measured series: a :class:`CurveSeries` carries its curves and event
marks, and the shared figure gives each toy role a column only when some series has it."""

from __future__ import annotations

import math

import pytest
import torch

from analyses.curve_series import SERIES_FILE, CurveSeries, load_curve_series, save_curve_series
from analyses.dynamics.figures import plot_series_together
from analyses.scansnap.order import order_series
from analyses.toy_orders import order_finding
from mechprobe.errors import RecordError
from probes.dynamics.event_orders import scan_snap_order


def test_a_scan_and_snap_series_marks_scan_and_snap_and_plots_beside_another(tmp_path):
    t = torch.arange(101, dtype=torch.float64)
    moved = 0.6 * (1 - torch.exp(-t / 10))
    orders = [scan_snap_order(torch.stack([0.9 - moved, 0.1 + moved], 1), list(range(101)))]
    finding = order_finding([o.order for o in orders], statistic="snap minus scan", min_effect=5.0)
    series = order_series(orders, range(101), finding)
    (scan, level, holds), (snap, at_snap, _) = series.marks("composition_displacement")
    assert math.isclose(level, 0.3, rel_tol=1e-3) and holds and 6 < scan < 7 and snap == 24.0
    assert at_snap == float(moved[24]) and series.tokens == (None,) * 101
    topic = CurveSeries("topic toy", (0, 10, 20), {"value_displacement": [0.0, 5.0, 6.0],
                                                   "key_query_displacement": [0.0, 0.1, 2.0]},
                        {"value_displacement": ((8.0, 3.0, True),)})
    path = plot_series_together({"scan and snap": series, "topic": topic}, tmp_path / "together.png")
    assert path.is_file() and path.stat().st_size > 10_000


def test_a_saved_toy_series_loads_back_and_a_damaged_one_is_one_line(tmp_path):
    series = CurveSeries("topic toy", (0, 10, 20), {"value_displacement": [0.0, 5.0, 6.0]},
                         {"value_displacement": ((8.0, 3.0, True),)})
    save_curve_series(series, tmp_path)
    assert load_curve_series(tmp_path, rerun="x") == series
    assert load_curve_series(tmp_path / "none", rerun="x") is None  # a toy without orders saved none
    (tmp_path / SERIES_FILE).write_text('{"series": "topic toy", "steps": [0, 10]')
    with pytest.raises(RecordError, match=f"{SERIES_FILE}.*re-run the topic toy"):
        load_curve_series(tmp_path, rerun="re-run the topic toy")


def test_compare_reads_a_toy_folder_as_its_recorded_curves(tmp_path):
    from analyses.dynamics.cli_commands import compared_series

    series = CurveSeries("scan and snap", (0, 5, 50), {"composition_displacement": [0.0, 0.2, 0.3]}, {})
    (tmp_path / "toy").mkdir()
    save_curve_series(series, tmp_path / "toy")
    (tmp_path / "toy" / "summary.json").write_text("{}")  # a toy folder also holds the toy's own summary.json
    assert compared_series(str(tmp_path / "toy"), "runs/lm") == series
