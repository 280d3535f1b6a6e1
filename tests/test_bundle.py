"""The model bundle: what a checkpoint carries beside its weights, written and read in one place."""

import dataclasses
from dataclasses import asdict

import pytest

from speechmt.audio import CMVNConfig, FbankConfig
from speechmt.bundle import KEYS, ModelBundle, direction_source, pick_tag
from speechmt.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from speechmt.frontend import FbankFrontend, WaveformFrontend
from speechmt.models import preset
from speechmt.models.config import ModelConfig
from speechmt.pretrained import DEFAULT_MODEL
from speechmt.tokenizers.pair import Tokenizers
from speechmt.tokenizers.sentencepiece import Tokenizer


@pytest.fixture
def bundle(tiny_data):
    tok = Tokenizer.load(tiny_data / "spm.model")
    return ModelBundle(
        preset("tiny", tgt_vocab_size=len(tok)),
        Tokenizers(tok, tok),
        FbankFrontend(FbankConfig(), CMVNConfig("global", (0.5,) * 80, (2.0,) * 80)),
        "st",
        {"st": "<de>", "asr": "<en>"},
        "tgt",
    )


def test_a_bundle_round_trips_through_a_checkpoint(bundle, tmp_path):
    save_checkpoint(tmp_path / "b.safetensors", bundle.state_dict())
    back = ModelBundle.from_checkpoint(load_checkpoint(tmp_path / "b.safetensors"))
    assert back.config == bundle.config and back.frontend == bundle.frontend
    assert (back.task, back.decoder_tags, back.decoder_side, back.decoder_start, back.base) == (
        "st",
        {"st": "<de>", "asr": "<en>"},
        "tgt",
        "bos",
        None,
    )
    assert back.tokenizers.state_dict() == bundle.tokenizers.state_dict()
    assert set(bundle.state_dict()) == set(KEYS) - {"base", "resolved", "directions"}
    assert bundle.state_dict()["decoder_tag"] == "<de>"


def test_a_bundle_keeps_the_directions_it_knows(bundle, tmp_path):
    """A multilingual model's directions and their tags round-trip; an older bundle knows its tag's language."""
    many = dataclasses.replace(bundle, directions={"st": {"en-de": "<de>", "en-fr": "<fr>"}})
    save_checkpoint(tmp_path / "m.safetensors", many.state_dict())
    back = ModelBundle.from_checkpoint(load_checkpoint(tmp_path / "m.safetensors"))
    assert back.directions == {"st": {"en-de": "<de>", "en-fr": "<fr>"}}
    assert back.direction_tag("st", tgt_lang="fr") == "<fr>" and back.direction_tag("st") == "<de>"
    assert bundle.direction_tag("st", tgt_lang="de") == "<de>"
    with pytest.raises(CheckpointError, match="fr: the model writes de only"):
        bundle.direction_tag("st", tgt_lang="fr")
    with pytest.raises(CheckpointError, match="directions must map tasks"):
        ModelBundle.from_checkpoint({**many.state_dict(), "directions": {"st": "<fr>"}})


def test_a_model_that_hears_its_source_needs_no_src_lang(bundle):
    """A whisper_asr model of several sources (Whisper detects the language) takes a target that several sources
    share, one tag; another model names its sources in one line; a model of one source does not hear it."""
    directions = {"st": {"en-de": "<de>", "de-en": "<en>", "fr-en": "<en>"}}
    many = dataclasses.replace(bundle, directions=directions)
    assert many.sources() == ["en", "de", "fr"] and not many.hears_source  # a conv encoder: it names them
    with pytest.raises(CheckpointError) as e:
        many.direction_tag("st", tgt_lang="en")
    assert (
        str(e.value)
        == "*-en: the model knows several such directions; it knows en-de, de-en, fr-en (name --src-lang / --tgt-lang)"
    )
    cascade = {"kind": "whisper_asr", "name_or_path": "whisper", "finetune": "frozen"}
    hears = dataclasses.replace(many, config=ModelConfig(encoder=cascade, tgt_vocab_size=10, n_heads=2))
    assert hears.hears_source
    assert hears.direction_tag("st", tgt_lang="en") == "<en>" and hears.direction_tag("st", "fr", "en") == "<en>"
    assert hears.direction_tag("st") == "<de>"
    with pytest.raises(CheckpointError, match="was not trained in that direction"):
        hears.direction_tag("st", "de", "fr")
    one = dataclasses.replace(hears, directions={"st": {"en-de": "<de>", "en-fr": "<fr>"}})
    assert one.sources() == ["en"] and not one.hears_source
    mixed = {"en-de": "<de>", "de-en": "<en>", "fr-en": "<fr-en>"}  # one target, two tags: the source decides
    with pytest.raises(CheckpointError, match="knows several such directions"):
        pick_tag(mixed, "<de>", None, "en", hears_source=True)


def test_the_source_of_a_direction_is_the_one_named_or_the_one_its_target_leaves():
    known = {"en-de": "<de>", "de-en": "<en>", "fr-en": "<en>"}
    assert direction_source(known, "fr", "en") == "fr" and direction_source(known, "fr", None) == "fr"
    assert direction_source(known, None, "de") == "en"
    assert direction_source(known, None, "en") is None and direction_source(known, None, None) is None


def test_the_bundled_model_reads_as_a_bundle():
    bundle = ModelBundle.from_checkpoint(load_checkpoint(DEFAULT_MODEL))
    assert bundle.frontend.name == bundle.config.encoder.frontend == "whisper_mel"
    assert bundle.tag("st") == "<de>" and bundle.base["sources"] == ["whisper-base", "gemma-3-270m"]
    assert bundle.decoder_tokenizer("st") is bundle.tokenizers.tgt
    # its config holds the search prompt and the complete HF configs its build derived and the LM decoder's
    # vocabulary and prompt its run derived (as checkpoints did): the bundle's `resolved` now
    resolved = bundle.resolved
    assert set(resolved) == {
        "encoder.asr_prompt",
        "decoder.vocab",
        "decoder.prompt",
        "encoder.hf_config",
        "decoder.hf_config",
    }
    assert (resolved["encoder.hf_config"]["model_type"], resolved["encoder.hf_config"]["d_model"]) == ("whisper", 512)
    assert (resolved["decoder.hf_config"]["model_type"], resolved["decoder.hf_config"]["hidden_size"]) == (
        "gemma3_text",
        640,
    )
    assert bundle.config.encoder.hf_config == bundle.config.decoder.hf_config == {}  # nothing the user wrote
    assert resolved["encoder.asr_prompt"] == [50258, 50259, 50359, 50363] and resolved["decoder.prompt"] == [
        2,
        27832,
        236787,
    ]
    assert (
        resolved["decoder.vocab"] == list(bundle.tokenizers.tgt.config.vocab)
        and len(resolved["decoder.vocab"]) == 18306
    )
    assert "asr_prompt" not in asdict(bundle.config.encoder) and not {"vocab", "prompt"} & set(
        asdict(bundle.config.decoder)
    )
    assert bundle.state_dict()["resolved"] == resolved


def test_a_checkpoint_before_decoder_tags_does_its_own_task(bundle):
    state = {k: v for k, v in bundle.state_dict().items() if k not in ("decoder_tags", "decoder_side")}
    old = ModelBundle.from_checkpoint(state)
    assert old.decoder_tags == {"st": "<de>"} and old.decoder_side is None
    with pytest.raises(CheckpointError, match=r"not trained for task 'asr'; it does st"):
        old.tag("asr")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"decoder_start": "pad"}, "unknown decoder_start 'pad'"),
        ({"decoder_side": "both"}, "unknown decoder_side 'both'"),
        ({"decoder_tags": ["<de>"]}, "decoder_tags must map tasks to tags, got list"),
        (
            {"features": {"waveform": asdict(WaveformFrontend().config)}},
            "its encoder reads fbank input, but the checkpoint "
            r"has no such front-end settings \(features.fbank\)",
        ),
        ({"tokenizers": None}, "checkpoint lacks or mismatches what a model needs"),
    ],
)
def test_a_bundle_that_does_not_fit_is_one_line_naming_the_file(bundle, change, message):
    with pytest.raises(CheckpointError, match=f"^m.safetensors: {message}"):
        ModelBundle.from_checkpoint({**bundle.state_dict(), **change}, "m.safetensors")
