"""import-whisper: a tiny random Hugging Face Whisper, converted to CTranslate2 by ctranslate2's own converter
and imported back, must give the same tensors, configs and logits; broken inputs give a one-line error."""

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import (
    AutoFeatureExtractor,
    AutoTokenizer,
    GenerationConfig,
    WhisperConfig,
    WhisperFeatureExtractor,
    WhisperForConditionalGeneration,
    WhisperProcessor,
    WhisperTokenizerFast,
)

from speechmt.cli import main
from speechmt.interop import HFImportError
from speechmt.interop.whisper_ct2 import import_whisper, read_ct2_model
from tests.whisper_helpers import LANGUAGES, tiny_whisper_tokenizer_json

ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 (the `test` extra) checks the converter")

SOURCE_POSITIONS = 20  # 40 mel frames per input
SUPPRESS = [1, 2, 7]
HEADS = [[1, 0], [1, 3]]


def _tiny_hf_whisper(folder: Path) -> Path:
    """A random tiny WhisperForConditionalGeneration (every parameter random, layer norms and biases included,
    so that no mix-up can hide behind equal values) with tokenizer and generation config, as save_pretrained
    writes it."""
    folder.mkdir(parents=True)
    tok_file = folder / "tokenizer.json"
    tok_file.write_text(tiny_whisper_tokenizer_json(), encoding="utf-8")
    specials = [t["content"] for t in json.loads(tok_file.read_text())["added_tokens"] if t["special"]]
    tok = WhisperTokenizerFast(tokenizer_file=str(tok_file), additional_special_tokens=specials)
    eot, sot = tok.convert_tokens_to_ids(["<|endoftext|>", "<|startoftranscript|>"])
    config = WhisperConfig(
        vocab_size=len(tok),
        num_mel_bins=80,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=96,
        max_source_positions=SOURCE_POSITIONS,
        max_target_positions=24,
        pad_token_id=eot,
        bos_token_id=eot,
        eos_token_id=eot,
        decoder_start_token_id=sot,
        suppress_tokens=SUPPRESS,
        begin_suppress_tokens=[220, eot],
    )
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=sot,
        eos_token_id=eot,
        pad_token_id=eot,
        suppress_tokens=SUPPRESS,
        begin_suppress_tokens=[220, eot],
        alignment_heads=HEADS,
        lang_to_id={f"<|{x}|>": tok.convert_tokens_to_ids(f"<|{x}|>") for x in LANGUAGES},
    )
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    WhisperFeatureExtractor(feature_size=80).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    return _tiny_hf_whisper(tmp_path_factory.mktemp("whisper") / "hf")


def _ct2(hf_dir: Path, out: Path, quantization: str) -> Path:
    converter = ctranslate2.converters.TransformersConverter(str(hf_dir), copy_files=["tokenizer.json"])
    return Path(converter.convert(str(out), quantization=quantization))


@pytest.fixture(scope="module")
def ct2_dirs(hf_dir, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ct2")
    return {q: _ct2(hf_dir, root / q, q) for q in ("float32", "float16", "int8")}


def _logits(model, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(2, 80, 2 * SOURCE_POSITIONS, generator=g)
    tokens = torch.randint(0, model.config.vocab_size, (2, 7), generator=g)
    with torch.no_grad():
        return model(input_features=features, decoder_input_ids=tokens).logits


def _original(hf_dir: Path) -> WhisperForConditionalGeneration:
    return WhisperForConditionalGeneration.from_pretrained(hf_dir, dtype=torch.float32).eval()


def test_float32_conversion_comes_back_exactly(hf_dir, ct2_dirs, tmp_path):
    out = import_whisper(ct2_dirs["float32"], tmp_path / "hf")
    original, imported = _original(hf_dir), WhisperForConditionalGeneration.from_pretrained(out).eval()
    want, got = original.state_dict(), imported.state_dict()
    assert sorted(got) == sorted(want) and len(want) == 90
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert imported.proj_out.weight is imported.model.decoder.embed_tokens.weight
    assert torch.equal(_logits(imported), _logits(original))


def test_float16_conversion_is_the_original_rounded(hf_dir, ct2_dirs, tmp_path):
    out = import_whisper(ct2_dirs["float16"], tmp_path / "hf")
    on_disk = load_file(out / "model.safetensors")
    assert {t.dtype for t in on_disk.values()} == {torch.float16}
    assert "proj_out.weight" not in on_disk  # tied to the decoder's embeddings, stored once
    rounded = _original(hf_dir).half().float()
    imported = WhisperForConditionalGeneration.from_pretrained(out, dtype=torch.float32).eval()
    want, got = rounded.state_dict(), imported.state_dict()
    assert all(got[k].dtype == torch.float32 and torch.equal(got[k], want[k]) for k in want)
    assert torch.equal(_logits(imported), _logits(rounded))


def test_int8_weights_are_dequantized_within_half_a_step(hf_dir, ct2_dirs, tmp_path):
    out = import_whisper(ct2_dirs["int8"], tmp_path / "hf")
    want = _original(hf_dir).state_dict()
    got = WhisperForConditionalGeneration.from_pretrained(out, dtype=torch.float32).state_dict()
    quantized = 0
    for key, w in want.items():
        if w.ndim >= 2 and "embed_positions" not in key and not torch.equal(got[key], w):
            step = w.flatten(1).abs().amax(dim=1) / 127  # ctranslate2's int8 scale per output row / channel
            assert ((got[key] - w).flatten(1).abs() <= step[:, None] / 2 + 1e-6).all(), key
            quantized += 1
        else:
            assert torch.equal(got[key], w), key
    # convs, embeddings and the tied proj_out; per encoder layer q k v out fc1 fc2; per decoder layer those and
    # the cross-attention's q k v out
    assert quantized == 2 + 2 + 2 * 6 + 2 * 10


def test_config_generation_config_and_processor(hf_dir, ct2_dirs, tmp_path):
    out = import_whisper(ct2_dirs["float16"], tmp_path / "hf")
    original, config = WhisperConfig.from_pretrained(hf_dir), WhisperConfig.from_pretrained(out)
    for key in (
        "vocab_size",
        "num_mel_bins",
        "d_model",
        "encoder_layers",
        "decoder_layers",
        "encoder_attention_heads",
        "decoder_attention_heads",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
        "max_source_positions",
        "max_target_positions",
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
        "decoder_start_token_id",
        "suppress_tokens",
        "begin_suppress_tokens",
        "tie_word_embeddings",
    ):
        assert getattr(config, key) == getattr(original, key), key
    tok = AutoTokenizer.from_pretrained(out)
    gen = GenerationConfig.from_pretrained(out)
    ids = {
        t: tok.convert_tokens_to_ids(t)
        for t in (
            "<|endoftext|>",
            "<|startoftranscript|>",
            "<|translate|>",
            "<|transcribe|>",
            "<|startofprev|>",
            "<|notimestamps|>",
        )
    }
    assert gen.lang_to_id == {f"<|{x}|>": tok.convert_tokens_to_ids(f"<|{x}|>") for x in LANGUAGES}
    assert gen.task_to_id == {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]}
    assert (gen.suppress_tokens, gen.begin_suppress_tokens, gen.alignment_heads) == (
        SUPPRESS,
        [220, ids["<|endoftext|>"]],
        HEADS,
    )
    assert (gen.decoder_start_token_id, gen.eos_token_id, gen.no_timestamps_token_id, gen.prev_sot_token_id) == (
        ids["<|startoftranscript|>"],
        ids["<|endoftext|>"],
        ids["<|notimestamps|>"],
        ids["<|startofprev|>"],
    )
    assert gen.forced_decoder_ids == [[1, None], [2, ids["<|transcribe|>"]]] and gen.is_multilingual
    reference = AutoTokenizer.from_pretrained(hf_dir)
    text = "the cat sat on the mat"
    assert tok(text).input_ids == reference(text).input_ids
    assert tok.decode(tok(text).input_ids, skip_special_tokens=True) == text
    assert len(tok.all_special_ids) == 12 and tok.all_special_ids[-1] == ids["<|notimestamps|>"]
    assert AutoFeatureExtractor.from_pretrained(out).feature_size == 80
    processor = WhisperProcessor.from_pretrained(out)
    features = processor(np.zeros(16000, np.float32), sampling_rate=16000, return_tensors="pt").input_features
    assert features.shape == (1, 80, 3000)


def test_cli_converts_and_replaces_an_existing_folder(ct2_dirs, tmp_path, capsys):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    assert main(["import", "whisper", str(ct2_dirs["float16"]), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "preprocessor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no temporary folder left
    assert f"{out}: Hugging Face Whisper model of" in capsys.readouterr().out


def test_a_failure_while_writing_leaves_no_folder(ct2_dirs, tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(WhisperFeatureExtractor, "save_pretrained", fail)
    with pytest.raises(OSError, match="disk full"):
        import_whisper(ct2_dirs["float16"], tmp_path / "out" / "hf")
    assert list((tmp_path / "out").iterdir()) == []


def _ct2_bytes(spec: str, version: int = 6, variables: int = 0) -> bytes:
    def string(s: str) -> bytes:
        return struct.pack("<H", len(s) + 1) + s.encode() + b"\0"

    return struct.pack("<I", version) + string(spec) + struct.pack("<II", 1, variables) + struct.pack("<I", 0)


def _broken_copy(ct2_dir: Path, folder: Path, model_bin: bytes | None) -> Path:
    folder.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (folder / name).write_bytes((ct2_dir / name).read_bytes())
    if model_bin is not None:
        (folder / "model.bin").write_bytes(model_bin)
    return folder


@pytest.mark.parametrize(
    "case, expected",
    [
        ("no folder", "no such folder"),
        ("no model.bin", "model.bin: no such file"),
        ("truncated", "model.bin: truncated CTranslate2 model"),
        ("not whisper", "model.bin: spec TransformerSpec is not a Whisper model"),
        ("future version", "model.bin: CTranslate2 binary version 7 is not supported"),
        ("trailing bytes", "model.bin: 3 unexpected bytes after the last alias"),
        ("no tokenizer", "tokenizer.json: missing"),
    ],
)
def test_broken_inputs_give_one_line_errors(ct2_dirs, tmp_path, case, expected, capsys):
    source = ct2_dirs["float16"]
    whole = (source / "model.bin").read_bytes()
    model_bin = {
        "no folder": None,
        "no model.bin": None,
        "truncated": whole[: len(whole) // 2],
        "not whisper": _ct2_bytes("TransformerSpec"),
        "future version": _ct2_bytes("WhisperSpec", 7),
        "trailing bytes": whole + b"abc",
        "no tokenizer": whole,
    }[case]
    folder = tmp_path / "missing" if case == "no folder" else _broken_copy(source, tmp_path / "ct2", model_bin)
    if case == "no tokenizer":
        (folder / "tokenizer.json").unlink()
    with pytest.raises(HFImportError) as info:
        import_whisper(folder, tmp_path / "hf")
    message = str(info.value)
    assert "\n" not in message and expected in message and str(folder) in message
    assert not (tmp_path / "hf").exists()
    assert main(["import", "whisper", str(folder), "--out", str(tmp_path / "hf")]) == 2
    assert capsys.readouterr().err == f"speechmt: error: {message}\n"


def test_reader_resolves_aliases_and_keeps_dtypes(ct2_dirs):
    ct2 = read_ct2_model(ct2_dirs["float16"] / "model.bin")
    assert (ct2.spec, ct2.revision, ct2.version) == ("WhisperSpec", 3, 6)
    assert ct2.aliases["decoder/projection/weight"] == "decoder/embeddings/weight"
    assert ct2.variables["decoder/projection/weight"] is ct2.variables["decoder/embeddings/weight"]
    assert ct2.variables["encoder/layer_0/self_attention/linear_0/weight"].dtype == np.float16
    assert int(ct2.variables["encoder/num_heads"]) == 4
