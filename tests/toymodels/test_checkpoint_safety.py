"""Checkpoints: damaged files raise one clear CheckpointError, writes are atomic, divergence keeps
the last good checkpoint, SIGTERM saves and stops, and no code loads pickles or remote code unsafely."""

from __future__ import annotations

import io
import json
import os
import random
import re
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import save as save_safetensors
from torch import nn

from analyses.cli import main
from tests.interrupt_points import raising_at
from toymodels.errors import CheckpointError, TrainingDiverged, TrainingInterrupted
from toymodels.topic.model import TopicModel, TopicModelConfig
from toymodels.training import Checkpointer, History, _all_finite, train

REPO = Path(__file__).resolve().parents[2]


class Tiny(nn.Module):
    """A 3 -> 2 linear map with a buffer, so the state dict holds parameters and buffers."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(3, 2)
        self.register_buffer("scale", torch.tensor(2.0))


def setup() -> tuple[Tiny, list[torch.optim.Optimizer], torch.Generator]:
    model = Tiny()
    return model, [torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)], torch.Generator().manual_seed(1)


def regression_loss(model: Tiny):
    def loss_fn(step: int, gen: torch.Generator) -> torch.Tensor:
        x = torch.randn(8, 3, generator=gen)
        return ((model.linear(x) * model.scale - x[:, :2]) ** 2).mean()

    return loss_fn


def run(folder: Path, n_steps: int, every: int = 3, loss_at=None) -> tuple[Tiny, History]:
    """Train ``Tiny`` for ``n_steps`` with a checkpointer; ``loss_at(step, model)`` overrides the loss."""
    model, optimizers, generator = setup()
    loss = regression_loss(model)

    def loss_fn(step, gen):
        value = loss(step, gen)
        return value if loss_at is None else loss_at(step, model, value)

    history = train(model, loss_fn, optimizers, n_steps=n_steps, generator=generator,
                    checkpointer=Checkpointer(folder, every=every))
    return model, history


def restore(folder: Path) -> tuple[Tiny, int, History]:
    model, optimizers, generator = setup()
    step, history = Checkpointer(folder, every=3).restore(model, optimizers, generator)
    return model, step, history


def meta(folder: Path) -> dict:
    return json.loads((folder / "checkpoint.json").read_text())


def assert_same_weights(a: nn.Module, b: nn.Module) -> None:
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name


# -- damaged checkpoints ----------------------------------------------------------------------------
class Payload:
    """Unpickling this would create the marker file: the state file must never be unpickled unsafely."""

    marker = ""

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def _pickle_bytes(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def damage(folder: Path, case: str) -> tuple[str, str]:
    """Damage the checkpoint in ``folder``; return (the file the error must name, words it must say)."""
    info = meta(folder)
    weights, state, meta_path = folder / info["weights"], folder / info["state"], folder / "checkpoint.json"
    if case == "weights truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
        return str(weights), "not a readable safetensors file"
    if case == "weights random bytes":
        weights.write_bytes(random.Random(0).randbytes(300))
        return str(weights), "not a readable safetensors file"
    if case == "weights are a pickle":
        weights.write_bytes(_pickle_bytes(Tiny().state_dict()))
        return str(weights), "not a readable safetensors file"
    if case == "weights of another model":
        weights.write_bytes(save_safetensors({"linear.weight": torch.zeros(5, 3), "other": torch.zeros(1)}))
        return str(weights), "do not fit this model (missing: linear.bias, scale; unexpected: other; other shape"
    if case == "weights missing":
        weights.unlink()
        return str(weights), "(the model weights) is missing"
    if case == "meta garbage":
        meta_path.write_bytes(b"\x00{not json at all")
        return str(meta_path), "is not valid JSON"
    if case == "meta random bytes":
        meta_path.write_bytes(random.Random(2).randbytes(200))
        return str(meta_path), "is not valid JSON"
    if case == "meta truncated":
        meta_path.write_bytes(meta_path.read_bytes()[:40])
        return str(meta_path), "is not valid JSON"
    if case == "meta without a step":
        meta_path.write_text(json.dumps({**info, "step": "six"}))
        return str(meta_path), "does not hold a step"
    if case == "meta names a file outside the folder":
        meta_path.write_text(json.dumps({**info, "weights": "../weights-6.safetensors"}))
        return str(meta_path), "does not hold a step, the weights and state file names"
    if case == "meta history malformed":
        meta_path.write_text(json.dumps({**info, "history": {"steps": [1, "two"]}}))
        return str(meta_path), "malformed history"
    if case == "optimizer state missing":
        state.unlink()
        return str(state), "(the optimiser and data-generator state) is missing"
    if case == "optimizer state truncated":
        state.write_bytes(state.read_bytes()[:200])
        return str(state), "is truncated or corrupted"
    if case == "optimizer state random bytes":
        state.write_bytes(random.Random(1).randbytes(500))
        return str(state), "is truncated or corrupted"
    if case == "optimizer state without optimizers":
        state.write_bytes(_pickle_bytes({"generator": torch.Generator().get_state()}))
        return str(state), "does not hold 1 optimiser state(s) and a data-generator state"
    if case == "optimizer state holds code":
        state.write_bytes(_pickle_bytes({"optimizers": [Payload()], "generator": torch.zeros(1)}))
        return str(state), "refuses"
    raise AssertionError(case)


CASES = ["weights truncated", "weights random bytes", "weights are a pickle", "weights of another model",
         "weights missing", "meta garbage", "meta random bytes", "meta truncated", "meta without a step",
         "meta names a file outside the folder", "meta history malformed", "optimizer state missing",
         "optimizer state truncated", "optimizer state random bytes", "optimizer state without optimizers",
         "optimizer state holds code"]


@pytest.mark.parametrize("case", CASES)
def test_a_damaged_checkpoint_raises_one_line_naming_the_file_and_leaves_the_objects_unchanged(tmp_path, case):
    Payload.marker = str(tmp_path / "code-ran")
    run(tmp_path / "ck", n_steps=6)
    bad_file, words = damage(tmp_path / "ck", case)
    model, optimizers, generator = setup()
    fresh = Tiny()
    with pytest.raises(CheckpointError) as caught:
        Checkpointer(tmp_path / "ck", every=3).restore(model, optimizers, generator)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"Checkpoint file {bad_file} ") and words in message, message
    assert message.endswith(f"Delete the folder {tmp_path / 'ck'} to start training from scratch."), message
    assert "weights_only=False" not in message  # torch's hint to load unsafely is not passed on
    assert not (tmp_path / "code-ran").exists()
    assert_same_weights(model, fresh)  # every file is checked before anything is loaded
    assert optimizers[0].state_dict()["state"] == {}


@pytest.mark.slow
def test_the_cli_reports_a_truncated_checkpoint_in_one_line_and_exits_2(tmp_path, capsys):
    out, partial = tmp_path / "run", tmp_path / "run.partial"
    argv = ["toy", "induction", "--preset", "fast", "--out", str(out), "--no-progress"]
    for item in ["checkpoint_every=2", "n_train=32", "n_val=16", "train.stage_steps=2,2,2", "data.seq_len=20",
                 "probe_sequences=8", "eval_seq_lens=10", "eval_alphas=1.0"]:
        argv += ["--set", item]
    assert main(argv) == 0
    out.rename(partial)  # as a run killed after its last checkpoint leaves it: the same command resumes there
    folder = partial / "checkpoint"
    weights = folder / meta(folder)["weights"]
    weights.write_bytes(weights.read_bytes()[:100])
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"mechprobe: error: Checkpoint file {weights} is not a readable" in err, err
    assert weights.is_file() and not out.exists()  # the unfinished run it did not make is kept; no --out folder


def test_resuming_with_another_checkpoint_interval_is_allowed(tmp_path):
    """The fingerprint of `toy induction` leaves out checkpoint_every: how often to save changes nothing."""
    import dataclasses

    from analyses.induction.experiment import PRESETS, _checkpointer

    a = _checkpointer(dataclasses.replace(PRESETS["fast"], checkpoint_every=5), tmp_path)
    b = _checkpointer(dataclasses.replace(PRESETS["fast"], checkpoint_every=7), tmp_path)
    c = _checkpointer(dataclasses.replace(PRESETS["fast"], checkpoint_every=7,
                                          train=dataclasses.replace(PRESETS["fast"].train, lr_c=1.0)), tmp_path)
    assert a.fingerprint == b.fingerprint != c.fingerprint


# -- atomic writes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("failing_rename", [1, 2, 3])
def test_a_crash_in_any_rename_of_a_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch, failing_rename):
    """Renames 1, 2, 3 of a save put the weights, the state, then checkpoint.json in place."""
    import toymodels.training as training

    folder = tmp_path / "ck"
    reference, _ = run(folder, n_steps=3)
    before = meta(folder)
    calls = []
    real_replace = os.replace

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == failing_rename:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(training.os, "replace", replace)
    model, optimizers, generator = setup()
    Checkpointer(folder, every=3).restore(model, optimizers, generator)
    with pytest.raises(OSError, match="No space left"):
        train(model, regression_loss(model), optimizers, n_steps=6, generator=generator,
              checkpointer=Checkpointer(folder, every=3))
    monkeypatch.undo()
    assert meta(folder) == before
    assert sorted(p.name for p in folder.iterdir()) == sorted(["checkpoint.json", before["weights"], before["state"]])
    restored, step, history = restore(folder)
    assert step == 3 and history.steps == [1, 2, 3]
    assert_same_weights(restored, reference)


# os calls of one save: per file (weights, state, checkpoint.json) the temporary's close, fsync and replace
# (mechprobe.atomic.atomic_file), and the folder's open, fsync, close (toymodels.training)
SAVE_OS_CALLS = range(1, 19)


@pytest.mark.parametrize("n", SAVE_OS_CALLS)
def test_a_ctrl_c_at_any_os_call_of_a_save_leaves_a_whole_checkpoint_in_force(tmp_path, monkeypatch, n):
    """A Ctrl-C at the Nth os call of a save (the files written, renamed, the folder synced) leaves the previous
    checkpoint or the new one, every file it names there (issue 45: one after checkpoint.json's rename, while the
    folder was synced, removed the files the new checkpoint.json named, and the same command then refused)."""
    import mechprobe.atomic
    import toymodels.training as training

    folder = tmp_path / "ck"
    run(folder, n_steps=3)
    calls = []

    class Os:
        def __getattr__(self, name):
            real = getattr(os, name)
            return raising_at(n, calls, name, real) if name in ("fsync", "replace", "open", "close") else real

    for module in (training, mechprobe.atomic):  # one count over both: the file's calls, then the folder's
        monkeypatch.setattr(module, "os", Os())
    model, optimizers, generator = setup()
    Checkpointer(folder, every=3).restore(model, optimizers, generator)
    with pytest.raises(KeyboardInterrupt):
        train(model, regression_loss(model), optimizers, n_steps=6, generator=generator,
              checkpointer=Checkpointer(folder, every=3))
    monkeypatch.undo()
    assert Checkpointer(folder, every=3).verify() in (3, 6)


def test_a_crash_while_writing_bytes_leaves_no_partial_file(tmp_path, monkeypatch):
    import toymodels.training as training

    folder = tmp_path / "ck"
    run(folder, n_steps=3)
    before = sorted(p.name for p in folder.iterdir())

    def fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(training.os, "fsync", fsync)
    model, optimizers, generator = setup()
    with pytest.raises(OSError, match="Input/output"):
        train(model, regression_loss(model), optimizers, n_steps=6, generator=generator,
              checkpointer=Checkpointer(folder, every=3))
    assert sorted(p.name for p in folder.iterdir()) == before
    with pytest.raises(OSError):
        History(steps=[1], values={"loss": [0.5]}).save(tmp_path / "history.json")
    assert list(tmp_path.iterdir()) == [folder]


def test_files_left_by_a_killed_save_are_ignored_then_removed(tmp_path):
    """A SIGKILL mid-save leaves temporaries and files checkpoint.json does not name; neither is read."""
    folder = tmp_path / "ck"
    whole, _ = run(tmp_path / "whole", n_steps=9)
    run(folder, n_steps=3)
    leftovers = [folder / ".checkpoint.json.x1.tmp", folder / ".weights-6-aa.safetensors.x2.tmp",
                 folder / "weights-6-0badf00d.safetensors", folder / "state-6-0badf00d.pt"]
    for path in leftovers:
        path.write_bytes(b"partial")
    resumed, history = run(folder, n_steps=9)
    assert_same_weights(resumed, whole)
    assert history.steps == list(range(1, 10))
    assert not any(path.exists() for path in leftovers)
    assert len(list(folder.iterdir())) == 3


def test_saving_the_same_step_twice_never_mixes_the_two(tmp_path):
    folder = tmp_path / "ck"
    model, optimizers, generator = setup()
    checkpointer = Checkpointer(folder, every=1)
    checkpointer.save(1, model, optimizers, generator, History())
    first = meta(folder)
    with torch.no_grad():
        model.linear.weight.fill_(7.0)
    checkpointer.save(1, model, optimizers, generator, History())
    assert meta(folder)["weights"] != first["weights"]
    restored, step, _ = restore(folder)
    assert step == 1 and bool((restored.linear.weight == 7.0).all())


# -- divergence -------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(tmp_path, bad):
    folder = tmp_path / "ck"
    clean, _ = run(tmp_path / "clean", n_steps=6)
    with pytest.raises(TrainingDiverged) as caught:
        run(folder, n_steps=20, loss_at=lambda step, model, loss: loss * bad if step == 8 else loss)
    assert str(caught.value) == (
        f"Training diverged: the loss became {bad} at step 8. The last good checkpoint (step 6) is kept in {folder}; "
        f"delete that folder before running with other settings. Lower the learning rates and run again.")
    restored, step, history = restore(folder)
    assert step == 6 and history.steps == list(range(1, 7))
    assert all(bool(t.isfinite().all()) for t in restored.state_dict().values())
    assert_same_weights(restored, clean)


def test_weights_made_non_finite_under_a_finite_loss_are_caught_before_they_are_saved(tmp_path):
    """At step 6 (a checkpoint step) the loss is finite but its gradient is NaN (sqrt at 0): weights go NaN."""
    folder = tmp_path / "ck"

    def explode(step, model, loss):
        return loss + torch.sqrt(model.linear.weight * 0).sum() if step == 6 else loss

    with pytest.raises(TrainingDiverged, match=r"^Training diverged: the weights became non-finite \(the loss "
                                               r"was [0-9.e-]+\) at step 6\. The last good checkpoint \(step 3\)"):
        run(folder, n_steps=9, loss_at=explode)
    restored, step, _ = restore(folder)
    assert step == 3 and all(bool(t.isfinite().all()) for t in restored.state_dict().values())


def test_the_weights_check_agrees_with_isfinite_on_every_entry():
    """The topic toy's parameters (one-hot frozen embeddings: six tensors) as they are, with a NaN or an infinity
    planted at each of a few entries of each one, at the float32 extremes, and with an empty tensor beside them."""
    params = [p.detach() for p in TopicModel(TopicModelConfig(embedding="one_hot_frozen")).parameters()]
    cases = [params, [*params, torch.empty(0)], [torch.tensor([torch.finfo().max, torch.finfo().min])]]
    for which, param in enumerate(params):
        for bad in (float("nan"), float("inf"), -float("inf")):
            for entry in (0, param.numel() // 2, param.numel() - 1):
                planted = param.clone()
                planted.view(-1)[entry] = bad
                cases.append([*params[:which], planted, *params[which + 1:]])
    checks = [_all_finite(case) for case in cases]
    assert checks == [all(bool(p.isfinite().all()) for p in case) for case in cases]
    assert checks[:3] == [True] * 3 and not any(checks[3:])


def test_divergence_before_any_checkpoint_says_so(tmp_path):
    with pytest.raises(TrainingDiverged, match=r"at step 2\. No checkpoint was saved before it \(one is saved "
                                               r"every 3 steps\)"):
        run(tmp_path, n_steps=9, loss_at=lambda step, model, loss: loss * float("nan") if step == 2 else loss)
    assert not (tmp_path / "checkpoint.json").exists()


@pytest.mark.slow
def test_a_huge_learning_rate_in_the_cli_exits_2_keeping_the_checkpoint(tmp_path, capsys):
    out, partial = tmp_path / "run", tmp_path / "run.partial"
    argv = ["toy", "induction", "--preset", "fast", "--out", str(out), "--no-progress"]
    for item in ["checkpoint_every=1", "n_train=32", "n_val=16", "train.schedule=joint", "train.n_steps=10",
                 "data.seq_len=20", "probe_sequences=8", "eval_seq_lens=10", "eval_alphas=1.0", "train.lr_c=1e38"]:
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("mechprobe: error: Training diverged: the loss became nan at step 2. The last good "
                          f"checkpoint (step 1) is kept in {partial / 'checkpoint'}") and err.count("\n") == 1, err
    assert meta(partial / "checkpoint")["step"] == 1 and not (partial / "summary.json").exists()
    assert not out.exists()  # the unfinished run is in run.partial; --out appears only when a run is done


# -- SIGTERM ----------------------------------------------------------------------------------------
def test_sigterm_finishes_the_step_saves_it_and_raises_then_resume_is_exact(tmp_path):
    folder = tmp_path / "ck"
    whole, whole_history = run(tmp_path / "whole", n_steps=12, every=10)

    def terminate_at_5(step, model, loss):
        if step == 5:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives mid-step; the step still completes
        return loss

    with pytest.raises(TrainingInterrupted,
                       match=r"^Training stopped by SIGTERM after step 5 of 12; the checkpoint in .* holds it\. "
                             r"Run the same command again to resume\.$"):
        run(folder, n_steps=12, every=10, loss_at=terminate_at_5)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler is removed again
    assert meta(folder)["step"] == 5
    resumed, history = run(folder, n_steps=12, every=10)
    assert_same_weights(resumed, whole)
    assert history == whole_history


def test_sigterm_is_left_alone_without_a_checkpointer_or_with_an_own_handler(tmp_path):
    seen = []
    model, optimizers, generator = setup()
    record = lambda step, m, h: seen.append(signal.getsignal(signal.SIGTERM))  # noqa: E731
    train(model, regression_loss(model), optimizers, n_steps=1, generator=generator, callbacks=[record])

    def own(signum, frame):
        seen.append("own handler ran")

    previous = signal.signal(signal.SIGTERM, own)
    try:
        model, optimizers, generator = setup()
        train(model, regression_loss(model), optimizers, n_steps=1, generator=generator, callbacks=[record],
              checkpointer=Checkpointer(tmp_path, every=1))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen == [signal.SIG_DFL, own]


# -- safe loading across the code base ---------------------------------------------------------------
def test_no_code_loads_pickles_or_remote_code_unsafely():
    """Every torch.load passes weights_only=True; trust_remote_code is never switched on by default."""
    sources = [p for package in ("probes", "toymodels", "analyses") for p in (REPO / package).rglob("*.py")]
    assert len(sources) > 20
    for path in sources:
        text = path.read_text()
        for call in re.finditer(r"torch\.load\(([^)]*)\)", text):
            assert "weights_only=True" in call.group(1), f"{path}: {call.group(0)}"
        assert not re.search(r"trust_remote_code\s*[:=]\s*(bool\s*=\s*)?True", text), path
        assert "pickle.load" not in text and "allow_pickle=True" not in text, path
