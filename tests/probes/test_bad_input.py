"""Bad input gets one clear, typed error that says how to fix it."""

from __future__ import annotations

import re

import pytest
import torch

import probes
from probes import ConfigError, InputError, ModelError, ProbeStateError
from probes.core.loading import check_device
from tests.hooked_models import NoHooksModel, OracleConfig, OracleModel
from toymodels.errors import CheckpointError
from toymodels.training import Checkpointer, History


def test_unknown_model_name_offline():
    with pytest.raises(ModelError, match="nope-not-a-model"):
        probes.load_model("nope-not-a-model")


def test_missing_local_folder():
    with pytest.raises(ModelError, match="No model folder"):
        probes.load_model("./no/such/checkpoint")


@pytest.mark.parametrize("name", ["neox", "gpt2"])  # gpt2: an alias that never failed, as a control
def test_a_relative_folder_named_like_a_transformer_lens_alias_loads_the_folder(name, tmp_path, monkeypatch):
    """``--model neox`` (a checkpoint folder in the working folder) once booted TransformerLens's alias ``neox``
    (EleutherAI/gpt-neox-20b) from the hub: offline, 'Cannot load the checkpoint in neox: We couldn't connect to
    https://huggingface.co ... Check that the folder holds the config, weights ...', the wrong cause."""
    from tests.random_checkpoints import make_random_checkpoint

    make_random_checkpoint("gpt_neox", tmp_path / name, seed=0)
    monkeypatch.chdir(tmp_path)
    model = probes.load_model(name)
    assert model.cfg.d_model == 64 and model.cfg.n_layers == 2 and model.cfg.model_name == name


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_checkpoint_with_a_weight_that_is_not_finite_is_refused_naming_it(tmp_path, value, capsys):
    """A Hugging Face folder whose weights hold a NaN loaded, and ``heads`` ranked heads of score nan (issue 45,
    inputs read): the load now refuses it in one line naming the parameter as the checkpoint names it."""
    from safetensors.torch import load_file, save_file

    from analyses.cli import main
    from tests.random_checkpoints import make_random_checkpoint

    folder = make_random_checkpoint("llama", tmp_path / "llama")
    assert probes.load_model(str(folder)) is not None  # the same folder, undamaged, loads
    weights = load_file(folder / "model.safetensors")
    weights["model.layers.1.self_attn.q_proj.weight"][0, 0] = value
    save_file(weights, folder / "model.safetensors")
    with pytest.raises(ModelError, match=r"its parameter model\.layers\.1\.self_attn\.q_proj\.weight holds NaN or "
                                         r"infinite values: the checkpoint is damaged"):
        probes.load_model(str(folder))
    capsys.readouterr()  # the loads' progress bars
    assert main(["heads", "--model", str(folder), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mechprobe: error: {folder}: its parameter model.layers.1"), err


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelError, match=re.escape("config.json")):
        probes.load_model(tmp_path)


def test_model_without_attention_pattern_hooks():
    with pytest.raises(ModelError, match="hook_pattern"):
        probes.head_scores(NoHooksModel())
    with pytest.raises(ModelError, match="hooked model"):
        probes.load_model(torch.nn.Linear(2, 2))


def test_tokens_longer_than_context():
    model = OracleModel(OracleConfig(n_ctx=16))
    with pytest.raises(InputError, match="longer than the model's context of 16"):
        probes.head_scores(model, torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(InputError, match="seq_len <= 8"):
        probes.head_scores(model, seq_len=9)


@pytest.mark.parametrize("seq_len", [1, 0, -3])
def test_seq_len_below_two(seq_len):
    with pytest.raises(ConfigError, match="seq_len must be an integer >= 2"):
        probes.head_scores(OracleModel(), seq_len=seq_len)


def test_wrong_dtype_rank_and_ids():
    model = OracleModel()
    with pytest.raises(InputError, match="integer ids"):
        probes.head_scores(model, torch.zeros(2, 5))
    with pytest.raises(InputError, match="rank 2"):
        probes.head_scores(model, torch.zeros(5, dtype=torch.long))
    with pytest.raises(InputError, match="rank 2"):
        probes.head_scores(model, torch.zeros(1, 2, 5, dtype=torch.long))
    with pytest.raises(InputError, match=r"\[0, 50\)"):
        probes.head_scores(model, torch.full((1, 5), 50))
    with pytest.raises(InputError, match="must be None"):
        probes.head_scores(model, "some text")


def test_unknown_kind_and_empty_batches():
    with pytest.raises(ConfigError, match=re.escape("Unknown head pattern 'inductoin'. Did you mean induction")):
        probes.HeadScoreProbe(kinds=("inductoin",))
    with pytest.raises(InputError, match="empty"):
        probes.run_probes(OracleModel(), [probes.HeadScoreProbe()], [], progress=False)


def test_update_without_binding():
    with pytest.raises(ProbeStateError, match="not bound"):
        probes.HeadScoreProbe().update({}, probes.TokenBatch(torch.zeros(1, 2, dtype=torch.long),
                                                             torch.ones(1, 2, dtype=torch.bool)))


def test_merge_incompatible():
    with pytest.raises(ProbeStateError, match="one type and settings"):
        probes.HeadScoreProbe(("induction",)).merge(probes.HeadScoreProbe())


def test_load_of_a_folder_that_is_not_a_result(tmp_path):
    with pytest.raises(InputError, match="not a saved probe result"):
        probes.ProbeResult.load(tmp_path)
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match="not valid JSON"):
        probes.ProbeResult.load(tmp_path / "broken.json")
    (tmp_path / "other.json").write_text('{"type": "Unknown", "fields": {}}', encoding="utf-8")
    with pytest.raises(InputError, match="holds a 'Unknown' result"):
        probes.ProbeResult.load(tmp_path / "other.json")


def test_bad_device_and_dtype():
    with pytest.raises(ConfigError, match="'gpu' is not a torch device"):
        probes.load_model("minilm-l6", device="gpu")
    with pytest.raises(ConfigError, match="mechprobe runs on cpu, cuda or mps"):
        check_device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no usable CUDA GPU"):
            probes.load_model("minilm-l6", device="cuda")
    with pytest.raises(ConfigError, match=re.escape("torch.dtype")):
        probes.load_model("minilm-l6", dtype="float16")
    assert check_device("cpu") == torch.device("cpu")


def test_empty_model_spec_and_unsupported_architecture(tmp_path):
    with pytest.raises(ModelError, match="spec is empty"):
        probes.load_model("")
    (tmp_path / "config.json").write_text('{"architectures": ["XLNetLMHeadModel"], "model_type": "xlnet"}')
    with pytest.raises(ModelError, match=r"'xlnet' checkpoint .* cannot wrap"):
        probes.load_model(tmp_path)


def test_model_cfg_sizes_must_be_positive():
    model = OracleModel(OracleConfig(n_layers=0))
    with pytest.raises(ModelError, match="n_layers=0"):
        probes.ModelInfo.of(model)
    model.cfg.n_layers, model.cfg.n_ctx = 2, True  # a bool is not an int here
    with pytest.raises(ModelError, match="not an int: n_ctx"):
        probes.ModelInfo.of(model)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"spec": ""}, InputError, "spec is empty"),
    ({"spec": None}, InputError, "got NoneType"),
    ({"min_chars": -1}, InputError, "min_chars must be an integer >= 0"),
    ({"min_chars": "5"}, InputError, "min_chars must be an integer >= 0"),
    ({"max_documents": 0}, InputError, "max_documents must be an integer >= 1"),
    ({"max_documents": "3"}, InputError, "max_documents must be an integer >= 1"),
    ({"unit": "sentence"}, InputError, "unit must be"),
])
def test_iter_documents_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        next(probes.iter_documents(**kwargs))


def test_short_corpus_says_how_many_characters(tmp_path):
    (tmp_path / "short.txt").write_text("a few words\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"no paragraph of at least 50 characters.*lower min_chars"):
        list(probes.iter_documents(tmp_path / "short.txt", min_chars=50))


def test_fit_lda_topics_arguments():
    with pytest.raises(InputError, match=r"iterable of Document or str .* got str"):
        probes.fit_lda_topics("one long text instead of a list of documents")
    with pytest.raises(InputError, match="got NoneType"):
        probes.fit_lda_topics(None)
    with pytest.raises(InputError, match="Each document must be"):
        probes.fit_lda_topics([1, 2, 3])
    with pytest.raises(ConfigError, match="LdaTopicConfig; got dict"):
        probes.fit_lda_topics(["a b c"], {"n_topics": 2})
    with pytest.raises(ConfigError, match="threshold must be a number"):
        probes.LdaTopicConfig(threshold="0.5")


class CharTokenizer:
    """Every character is one token id (ord % 50)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) % 50 for c in text]


def test_token_topic_labels_arguments():
    with pytest.raises(InputError, match="map word -> topic"):
        probes.token_topic_labels(["river"], CharTokenizer(), 50)
    with pytest.raises(InputError, match="topic ids >= 0; got 'river' -> 'water'"):
        probes.token_topic_labels({"river": "water"}, CharTokenizer(), 50)
    with pytest.raises(InputError, match="topic ids >= 0; got 'river' -> -1"):
        probes.token_topic_labels({"river": -1}, CharTokenizer(), 50)
    with pytest.raises(InputError, match="tokenizer must have encode"):
        probes.token_topic_labels({"river": 0}, None, 50)
    with pytest.raises(InputError, match=r"assignment is empty.*top_words_per_topic words of exactly one topic"):
        probes.token_topic_labels({}, CharTokenizer(), 50)
    with pytest.raises(InputError, match="d_vocab must be a positive integer"):
        probes.token_topic_labels({"river": 0}, CharTokenizer(), -1)


def test_topics_with_no_overlap_with_the_vocabulary():
    # Every word is several characters, so none is a single token of the character tokenizer.
    with pytest.raises(InputError, match="None of the topic words is a single token"):
        probes.token_topic_labels({"river": 0, "music": 1}, CharTokenizer(), 50)


@pytest.mark.parametrize("documents, kwargs, error, message", [
    ("one text, not a list", {}, InputError, "iterable of Document or str; got str"),
    (None, {}, InputError, "got NoneType"),
    ([1, 2], {}, InputError, "Each document must be"),
    (["text"], {"seq_len": "10"}, ConfigError, "seq_len must be an integer >= 2"),
    (["text"], {"batch_size": 0}, ConfigError, "batch_size must be an integer >= 1"),
    (["text"], {"max_batches": 0}, ConfigError, "max_batches must be an integer >= 1"),
])
def test_text_token_batches_arguments(documents, kwargs, error, message):
    info = probes.ModelInfo.of(OracleModel())
    with pytest.raises(error, match=message):
        next(probes.text_token_batches(documents, CharTokenizer(), info, **kwargs))
    with pytest.raises(InputError, match=re.escape("ModelInfo.of")):
        next(probes.text_token_batches(["text"], CharTokenizer(), OracleModel()))


def test_text_windows_never_exceed_the_context():
    info = probes.ModelInfo.of(OracleModel(OracleConfig(n_ctx=16)))
    batch = next(probes.text_token_batches(["x" * 100], CharTokenizer(), info, seq_len=128, min_tokens=1))
    assert batch.tokens.shape[1] == 16


def test_apply_overrides_python_api():
    from analyses.config_overrides import apply_overrides
    from analyses.scansnap.config import PRESETS

    config = PRESETS["fast"]
    assert apply_overrides(config, ["sweep.eta_z=(0.5, 2)", " seed = 3 "]).sweep.eta_z == (0.5, 2.0)
    assert apply_overrides(config, ["sweep.num_last=(4,)"]).sweep.num_last == (4,)
    with pytest.raises(ConfigError, match="expected comma-separated numbers"):
        apply_overrides(config, ["sweep.eta_z=0.5,,2"])
    with pytest.raises(ConfigError, match="given twice"):
        apply_overrides(config, ["seed=1", "seed=1"])


def test_resuming_with_other_settings(tmp_path):
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    Checkpointer(tmp_path, every=1, fingerprint="seed=0").save(1, model, [optimizer], torch.Generator(), History())
    with pytest.raises(CheckpointError, match="made with other settings"):
        Checkpointer(tmp_path, every=1, fingerprint="seed=1").restore(model, [optimizer], torch.Generator())
