"""Decoding with bfloat16 weights (`load_model(dtype=...)`, `--dtype`): every floating weight is cast, the
features follow into the encoder, the search's scores stay float32, and the encoder output and first-step
log-probabilities stay within bfloat16's precision of the float32 model's: for a conv encoder + Transformer
decoder and for a whisper_asr encoder + Gemma-architecture LM decoder (tiny, trained a few updates). A bad
dtype is one line."""

import pytest
import torch

from speechmt import api
from speechmt.audio import read_audio
from speechmt.cli import main
from speechmt.decoding.search import next_log_probs, start_tokens
from speechmt.decoding.translate import encode_audio, load_model, translate
from speechmt.evaluation.benchmark import _device_label
from tests.conftest import ASSETS
from tests.helpers import two_update_st
from tests.lm_helpers import tiny_lm_dir, train_whisper_lm
from tests.whisper_helpers import tiny_whisper_dir

WAV = ASSETS / "mustc/en-de/data/dev/wav/ted_3.wav"


@pytest.fixture(scope="module")
def conv(tiny_data, tmp_path_factory) -> str:
    return two_update_st(tiny_data, tmp_path_factory.mktemp("dtype_conv"))


@pytest.fixture(scope="module")
def wasr(tiny_data, tmp_path_factory) -> str:
    lm = tiny_lm_dir(tmp_path_factory.mktemp("dtype_lm"), hidden=48)
    whisper = tiny_whisper_dir(tmp_path_factory.mktemp("dtype_whisper"), d_model=32, seed=5)
    return str(train_whisper_lm(tiny_data, lm, whisper, "whisper_asr", tmp_path_factory.mktemp("dtype_wasr")))


def _first_step(lm, wave):
    """(encoder output, log-probabilities (1, V) of the first token after the start and prefix)."""
    with torch.no_grad():
        enc = encode_audio(lm, [wave])
        options = lm.decode_options(1)
        return enc, next_log_probs(lm.model, start_tokens(options, 1, lm.device), enc, lm.model.new_cache())


@pytest.mark.parametrize("which", ["conv", "wasr"])
def test_bfloat16_weights_decode_close_to_float32(which, request):
    path = request.getfixturevalue(which)
    full, half = load_model(path), load_model(path, dtype="bfloat16")
    floats = [p for p in half.model.parameters() if p.is_floating_point()]
    assert floats and all(p.dtype == torch.bfloat16 for p in floats)
    assert half.dtype == torch.bfloat16 and full.dtype == torch.float32
    wave = read_audio(WAV)
    (enc32, lp32), (enc16, lp16) = _first_step(full, wave), _first_step(half, wave)
    assert enc16.lengths.tolist() == enc32.lengths.tolist()
    if enc32.x.is_floating_point():  # whisper_asr hands the LM its transcript's ids
        assert enc16.x.dtype == torch.bfloat16
        rel = ((enc16.x.float() - enc32.x).norm() / enc32.x.norm()).item()
        assert rel < 0.05
    else:
        assert torch.equal(enc16.x, enc32.x)
    assert lp16.dtype == torch.float32 and lp16.shape == lp32.shape
    assert torch.allclose(lp16.exp().sum(-1), torch.ones(1), atol=1e-4)
    assert (lp16 - lp32).abs().max().item() < 0.15
    (text,) = translate(half, [str(WAV)], beam=2, max_len_b=8)
    assert text.error is None and text.text.strip()


def test_the_benchmark_row_names_the_dtype(conv):
    assert _device_label(load_model(conv)) == "cpu"
    assert _device_label(load_model(conv, dtype="bfloat16")) == "cpu bfloat16"


def test_translate_dtype_option(conv, capsys):
    assert main(["translate", str(WAV), "--model", conv, "--dtype", "bfloat16", "--beam", "1", "--max-len-b", "8"]) == 0
    assert capsys.readouterr().out.strip()
    assert main(["translate", str(WAV), "--model", conv, "--dtype", "float16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "speechmt translate: error: argument --dtype: invalid choice: 'float16' (choose from 'float32', 'bfloat16')"
    ]


def test_a_bad_dtype_is_one_line(conv):
    with pytest.raises(api.OptionError, match=r"^dtype: invalid value 'float16': expected float32 or bfloat16$"):
        api.load_model(conv, dtype="float16")
    with pytest.raises(ValueError, match="dtype must be one of float32, bfloat16; got 'half'"):
        load_model(conv, dtype="half")
