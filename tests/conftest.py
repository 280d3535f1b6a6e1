import os
from pathlib import Path

import numpy as np
import pytest
import torch

ASSETS = Path(__file__).parent / "assets"

if torch.cuda.is_available():  # the tests train on the GPU where there is one, and compare resumed runs bit for bit
    from speechmt.training.run import use_deterministic_kernels

    use_deterministic_kernels()


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
    from speechmt.data.vocab import train_from_manifests
    from speechmt.tokenizers.sentencepiece import TokenizerConfig

    out = tmp_path_factory.mktemp("tiny_data")
    prepare_mustc(ASSETS / "mustc", out, "de", cfg=PrepareConfig(jobs=1))
    manifests = [out / "train.jsonl", out / "dev.jsonl", out / "tst-COMMON.jsonl"]
    tok = train_from_manifests(
        manifests, ("src_text", "tgt_text"), TokenizerConfig(vocab_size=150, lang_tags=("<en>", "<de>"))
    )
    tok.save(out / "spm.model")
    return out


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory, tiny_data) -> Path:
    """A tiny random BERT (2 layers, width 16) with a WordPiece vocabulary of the replica's transcript words,
    saved by save_pretrained: a text teacher that loads offline."""
    import re

    from transformers import BertConfig, BertModel, BertTokenizerFast

    from speechmt.data.manifest import read_manifest

    out = tmp_path_factory.mktemp("tiny_bert")
    words = sorted(
        {
            w
            for split in ("train", "dev", "tst-COMMON")
            for r in read_manifest(tiny_data / f"{split}.jsonl")
            for w in re.findall(r"\w+|[^\w\s]", r.src_text.lower())
        }
    )
    (out / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=5 + len(words),
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=128,
        )
    ).save_pretrained(out)
    BertTokenizerFast(str(out / "vocab.txt")).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def lm_dir(tmp_path_factory) -> Path:
    """A tiny random Gemma 3 saved to a folder (tests.lm_helpers.tiny_lm_dir: seeded, read only by the tests)."""
    from tests.lm_helpers import tiny_lm_dir

    return tiny_lm_dir(tmp_path_factory.mktemp("tiny_lm"))


@pytest.fixture(scope="module")
def bridge(lm_dir):
    """A tiny CTC-bridge model over `lm_dir` (tests.lm_helpers.ctc_bridge_model), one per test module."""
    from tests.lm_helpers import ctc_bridge_model

    return ctc_bridge_model(lm_dir)
