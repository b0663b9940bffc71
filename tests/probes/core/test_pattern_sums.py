"""The one check of a hook's attention pattern every attention probe makes: the layout it expects, or its first block
of query rows, and one message naming both shapes."""

from __future__ import annotations

import pytest
import torch

from probes.core.errors import InputError
from probes.core.pattern_sums import check_pattern_block


def test_a_pattern_or_its_first_query_rows_pass_and_anything_else_names_both_shapes():
    check_pattern_block(torch.zeros(2, 3, 5, 5), 2, 3, 5)
    check_pattern_block(torch.zeros(2, 3, 2, 5), 2, 3, 5)  # the first two query rows
    check_pattern_block(torch.zeros(2, 7, 5, 5), 2, None, 5)  # any number of heads
    expected = r"\[batch head q_pos k_pos\] = \(2, 3, 5, 5\) \(or a first block of its query rows\); the model's " \
               r"hook gave \(2, 5, 5, 3\)\. Check the model's hook_pattern layout\."
    with pytest.raises(InputError, match=expected):
        check_pattern_block(torch.zeros(2, 5, 5, 3), 2, 3, 5)
    with pytest.raises(InputError, match=r"= \(any, any, 5, 5\); the model's hook gave \(2, 3, 2, 5\)"):
        check_pattern_block(torch.zeros(2, 3, 2, 5), None, None, 5, whole=True)
    with pytest.raises(InputError, match=r"gave \(3, 5, 5\)"):
        check_pattern_block(torch.zeros(3, 5, 5), None, None, 5)
