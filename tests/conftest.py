import os
from pathlib import Path

import numpy as np
import pytest
import torch

ASSETS = Path(__file__).parent / "assets"


@pytest.fixture(autouse=True)
def _one_thread():
    """Test models are many small ops: one thread is faster, and safe from OpenMP threads spinning
    when the two cores are shared (torchrun tests, a busy machine)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    np.random.seed(0)


@pytest.fixture(scope="session")
def kaldi():
    """torchaudio's pure-Python Kaldi module, the reference for our features.

    `make test` sets SPEECHMT_REQUIRE_TORCHAUDIO=1 so that CI fails rather than skips without it.
    """
    try:
        import torchaudio.compliance.kaldi as kaldi_module
    except Exception as e:  # torchaudio's import can fail in many ways (missing CUDA libraries, ...)
        if os.environ.get("SPEECHMT_REQUIRE_TORCHAUDIO") == "1":
            raise RuntimeError(f"torchaudio.compliance.kaldi is required here but not importable: {e}") from e
        pytest.skip(f"torchaudio.compliance.kaldi not importable: {e}")
    return kaldi_module


@pytest.fixture
def mustc_root() -> Path:
    return ASSETS / "mustc"


@pytest.fixture
def covost_root() -> Path:
    return ASSETS / "covost2"


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """The committed MuST-C replica prepared, with a joint vocabulary (tags <en>, <de>) as spm.model."""
    from speechmt.data.mustc import prepare_mustc
    from speechmt.data.prepare import PrepareConfig
    from speechmt.tokenizer import TokenizerConfig, train_from_manifests

    out = tmp_path_factory.mktemp("tiny_data")
    prepare_mustc(ASSETS / "mustc", out, "de", cfg=PrepareConfig(jobs=1))
    manifests = [out / "train.jsonl", out / "dev.jsonl", out / "tst-COMMON.jsonl"]
    tok = train_from_manifests(manifests, ("src_text", "tgt_text"),
                               TokenizerConfig(vocab_size=150, lang_tags=("<en>", "<de>")))
    tok.save(out / "spm.model")
    return out
