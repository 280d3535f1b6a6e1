import os
from pathlib import Path

import numpy as np
import pytest
import torch

ASSETS = Path(__file__).parent / "assets"


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
