"""Saved results: probe results and toy summaries round-trip as strict JSON, and results saved by an older
mechprobe are refused in one line that says what to do."""

from __future__ import annotations

import json
import math

import pytest
import torch

import probes
from analyses.induction.result import InductionResult
from analyses.report.run_store import FORMAT, load_report_inputs
from probes.attention.generalized_induction import GeneralizedInductionScores
from probes.core.errors import InputError
from probes.core.result import Provenance, results_close
from tests.strict_json import assert_strict_json_everywhere


def _scores() -> GeneralizedInductionScores:
    provenance = Provenance("planted", "hand-made", "GeneralizedInductionProbe", {"distances": (1, 2)}, 0, 4, 40)
    return GeneralizedInductionScores(provenance, torch.tensor([[0.5, float("nan")], [1.0, 0.25]]),
                                      torch.tensor([[0.0, 0.1], [float("inf"), 0.2]]), float("nan"), 0.125, 7, [1, 2])


def _one_line(error: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(error.value)
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.mark.parametrize("where", ["heads.json", "heads"])
def test_a_probe_result_saves_as_strict_json_and_loads_back(tmp_path, where):
    result = _scores()
    result.save(tmp_path / where)
    assert assert_strict_json_everywhere(tmp_path) == 1
    back = probes.ProbeResult.load(tmp_path / where)
    assert type(back) is GeneralizedInductionScores and results_close(back, result)
    assert math.isnan(back.chance) and back.scores[0, 1].isnan() and back.last_token_only[1, 0] == float("inf")
    assert back.provenance.settings == {"distances": [1, 2]} and back.distances == [1, 2]


def test_probe_results_saved_by_an_older_mechprobe_fail_in_one_line(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"type": "GeneralizedInductionScores", "provenance": {}, "fields": {"chance": 0.5}}))
    with pytest.raises(InputError) as error:
        probes.ProbeResult.load(old)
    assert "saved by mechprobe < 0.2" in _one_line(error) and "run the probe again" in _one_line(error)
    old.write_text('{"type": "GeneralizedInductionScores", "chance": NaN}')
    with pytest.raises(InputError) as error:
        probes.ProbeResult.load(old)
    assert "holds NaN, which is not JSON" in _one_line(error)


def test_a_toy_summary_this_version_cannot_read_says_to_run_the_toy_again(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"model": "simplified", "val_loss": 1.0}))
    with pytest.raises(InputError) as error:
        InductionResult.load(tmp_path)
    text = _one_line(error)
    assert "summary.json: the InductionResult has no 'optimal_loss'" in text
    assert "run `mechprobe toy induction` again" in text


def test_a_results_folder_of_an_older_format_says_to_re_run_the_report(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "report.json").write_text(json.dumps({"format": 1, "toys": [], "pretrained": {}}))
    with pytest.raises(InputError) as error:
        load_report_inputs(tmp_path)
    assert f"results format 1; this mechprobe reads format {FORMAT}. Re-run mechprobe report." in _one_line(error)
    (tmp_path / "results" / "report.json").write_text('{"format": 1, "value": NaN}')
    with pytest.raises(InputError) as error:
        load_report_inputs(tmp_path)
    assert "NaN, which is not JSON" in _one_line(error) and "Re-run mechprobe report." in _one_line(error)
