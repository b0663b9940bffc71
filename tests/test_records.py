"""mechprobe.records: every supported shape round-trips, hand-made documents read to known values, the JSON is
strict, and documents that do not fit fail with one line naming the key."""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import pytest
import torch
from torch import Tensor

from mechprobe.errors import InputError, RecordError
from mechprobe.records import UNSAVED_FIELD, dump, key, load, strict_json, to_json


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Inner:
    x: float
    label: str = ""


@dataclass(frozen=True)
class Outer:
    count: int
    flag: bool
    ratio: float
    maybe: float | None
    pair: tuple[float, float]
    many: tuple[int, ...]
    items: list[Inner]
    by_name: Mapping[str, Inner]
    plain: dict[str, float]
    kind: Literal["difference", "ratio"]
    colour: Colour
    nested: tuple[tuple[float, ...], ...]
    child: Inner | None = None
    note: str = field(default="", metadata=key("the note"))
    by_step: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WithTensors:
    scores: Tensor
    per_model: dict[str, Tensor]
    optional: Tensor | None = None


@dataclass(frozen=True)
class Derived:
    a: float
    b: float
    __record_derived__ = ("total",)

    @property
    def total(self) -> float:
        return self.a + self.b


def _outer(**changes: object) -> Outer:
    values: dict[str, object] = dict(
        count=3, flag=True, ratio=0.25, maybe=None, pair=(1.0, 2.5), many=(4, 5), items=[Inner(1.5, "a")],
        by_name={"q": Inner(-2.0)}, plain={"k": 7.0}, kind="ratio", colour=Colour.BLUE,
        nested=((1.0, 2.0), ()), child=Inner(0.5), note="hi", by_step={10: "ten"})
    values.update(changes)
    return Outer(**values)  # type: ignore[arg-type]


def _same(a: object, b: object) -> bool:
    """Equality with NaN == NaN (dataclass == compares floats with ==)."""
    return json.dumps(dump(a), sort_keys=True) == json.dumps(dump(b), sort_keys=True)


def test_every_supported_shape_round_trips_through_strict_json():
    outer = _outer()
    back = load(Outer, strict_json(to_json(outer)))
    assert back == outer
    assert isinstance(back.pair, tuple) and isinstance(back.items, list) and back.colour is Colour.BLUE
    assert back.by_step == {10: "ten"}


def test_a_hand_made_document_reads_to_known_values():
    document = {"count": 2, "flag": False, "ratio": None, "maybe": "NaN", "pair": [0, 1], "many": [],
                "items": [], "by_name": {}, "plain": {"x": None}, "kind": "difference", "colour": "red",
                "nested": [[3]], "the note": "renamed"}
    outer = load(Outer, document)
    assert outer.count == 2 and outer.flag is False and outer.kind == "difference" and outer.colour is Colour.RED
    assert math.isnan(outer.ratio) and outer.maybe is not None and math.isnan(outer.maybe)
    assert outer.pair == (0.0, 1.0) and isinstance(outer.pair[0], float)
    assert math.isnan(outer.plain["x"]) and outer.nested == ((3.0,),)
    assert outer.note == "renamed" and outer.child is None and outer.by_step == {}


def test_non_finite_floats_are_null_or_named_never_bare_nan():
    outer = _outer(ratio=float("inf"), maybe=float("nan"), pair=(float("-inf"), 1.0), plain={"a": float("nan")})
    text = to_json(outer)
    assert "NaN," not in text.replace('"NaN"', "") and "Infinity" not in text.replace('"-Infinity"', "")
    document = strict_json(text)
    assert document["ratio"] is None and document["maybe"] == "NaN" and document["pair"] == [None, 1.0]
    back = load(Outer, document)
    assert math.isnan(back.ratio) and back.maybe is not None and math.isnan(back.maybe)
    # a NaN where None is also allowed stays a number: null means None there
    assert load(Outer, {**document, "maybe": None}).maybe is None


def test_strict_json_refuses_nan_tokens():
    with pytest.raises(RecordError, match="NaN, which is not JSON"):
        strict_json('{"a": NaN}')
    with pytest.raises(RecordError, match="Infinity"):
        strict_json("[-Infinity]")


def test_tensors_go_inline_or_to_a_sidecar_and_come_back_exactly():
    record = WithTensors(torch.tensor([[1.0, float("nan")], [float("inf"), -2.0]]),
                         {"a": torch.arange(3), "b": torch.ones(2, dtype=torch.float16)})
    inline = strict_json(to_json(record))
    assert inline["scores"] == {"dtype": "float32", "shape": [2, 2], "values": [[1.0, "NaN"], ["Infinity", -2.0]]}
    back = load(WithTensors, inline)
    assert torch.equal(back.scores.nan_to_num(7.0), record.scores.nan_to_num(7.0))
    assert back.per_model["a"].dtype == torch.int64 and back.per_model["b"].dtype == torch.float16
    assert back.optional is None
    sidecar: dict[str, Tensor] = {}
    document = dump(record, sidecar)
    assert document["scores"] == {"__tensor__": "scores", "dtype": "float32", "shape": [2, 2]}
    assert set(sidecar) == {"scores", "per_model/a", "per_model/b"}
    again = load(WithTensors, document, sidecar)
    assert again.per_model["a"] is sidecar["per_model/a"]
    with pytest.raises(RecordError, match="sidecar"):
        load(WithTensors, document)
    del document["scores"]["dtype"], document["scores"]["shape"]  # as documents were written before they had them
    assert load(WithTensors, document, sidecar).scores is sidecar["scores"]


@pytest.mark.parametrize("other", [torch.zeros(3, 2), torch.zeros(2, 2, dtype=torch.float64), torch.zeros(4)])
def test_a_sidecar_tensor_of_another_shape_or_dtype_than_written_is_refused_naming_the_file(tmp_path, other):
    """A sidecar whose tensors were swapped for others of another shape (a damaged file, or the sidecar of another
    run) was read as it was: render drew per-head maps of another model's shape (issue 45). The document now keeps
    each sidecar tensor's dtype and shape, and reading checks them."""
    from safetensors.torch import save_file

    from mechprobe.records import read_tensors

    record = WithTensors(torch.ones(2, 2), {"a": torch.arange(3)})
    sidecar: dict[str, Tensor] = {}
    document = dump(record, sidecar)
    save_file({**sidecar, "scores": other}, str(tmp_path / "t.safetensors"))
    with pytest.raises(RecordError, match=re.escape(f"scores: {tmp_path / 't.safetensors'} holds "
                                                    f"{str(other.dtype)[6:]} {list(other.shape)} as 'scores', "
                                                    "where the document has float32 [2, 2]")):
        load(WithTensors, document, read_tensors(tmp_path / "t.safetensors", rerun="Re-run it."))


def test_derived_properties_are_written_for_readers_and_skipped_on_load():
    document = dump(Derived(1.0, 2.0))
    assert document == {"a": 1.0, "b": 2.0, "total": 3.0}
    assert load(Derived, document) == Derived(1.0, 2.0)


def test_documents_that_do_not_fit_fail_with_one_line_naming_the_key():
    good = dump(_outer())
    cases = {
        "unknown key 'colour_name' for Outer": {**good, "colour_name": "red"},
        "the Outer has no 'count', which it needs": {k: v for k, v in good.items() if k != "count"},
        "count: expected an integer; got 'three'": {**good, "count": "three"},
        "flag: expected true or false; got 1": {**good, "flag": 1},
        "kind: expected one of 'difference', 'ratio'; got 'sum'": {**good, "kind": "sum"},
        "pair: expected a list of 2 items; got 3": {**good, "pair": [1, 2, 3]},
        "items/0: unknown key 'y' for Inner": {**good, "items": [{"x": 1, "y": 2}]},
        "colour: expected one of ['red', 'blue']; got 'green'": {**good, "colour": "green"},
        "by_name: expected an object; got [1]": {**good, "by_name": [1]},
    }
    for message, document in cases.items():
        with pytest.raises(RecordError) as caught:
            load(Outer, document, where="x.json")
        text = str(caught.value)
        assert text.startswith("x.json: ") and message in text and "\n" not in text, text
    assert issubclass(RecordError, InputError)


def test_a_records_own_validation_is_a_record_error():
    @dataclass(frozen=True)
    class Positive:
        n: int

        def __post_init__(self) -> None:
            if self.n <= 0:
                raise ValueError(f"n must be positive; got {self.n}.")

    with pytest.raises(RecordError, match="not a valid Positive: n must be positive; got -1"):
        load(Positive, {"n": -1})


def test_values_that_are_not_records_refuse_to_be_written():
    with pytest.raises(RecordError, match="cannot write a object"):
        dump({"a": object()})


def test_unsaved_fields_stay_out_of_the_document_and_take_their_default():
    @dataclass(frozen=True)
    class WithCache:
        a: int
        cache: dict[str, int] = field(default_factory=dict, compare=False, metadata=UNSAVED_FIELD)

    assert dump(WithCache(1, {"x": 2})) == {"a": 1}
    assert load(WithCache, {"a": 1}).cache == {}
    with pytest.raises(RecordError, match="unknown key 'cache'"):
        load(WithCache, {"a": 1, "cache": {}})


@pytest.mark.parametrize("kind", ["missing", "a folder", "a loop", "a dangling link"])
def test_a_saved_file_that_does_not_read_is_named_as_what_it_is(tmp_path, kind):
    """A looping or dangling link where a saved file should be was called "missing" (issue 45: the wrong cause)."""
    from mechprobe.records import read_json, read_tensors

    path = tmp_path / "saved"
    if kind == "a folder":
        path.mkdir()
    elif kind != "missing":
        path.symlink_to("saved" if kind == "a loop" else "gone")
    what = {"missing": "is missing", "a folder": "is a folder, not the file it should be"}.get(
        kind, "is a symbolic link that loops or points nowhere")
    for read in (read_json, read_tensors):
        with pytest.raises(RecordError, match=re.escape(f"{path} {what}")) as caught:
            read(path, rerun="Re-run it.")
        assert str(caught.value).endswith("Re-run it.")
