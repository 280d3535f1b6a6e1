"""One model for several directions: per-record target tags, temperature sampling across directions, the
directions a checkpoint records, and a two-direction model that writes each direction's exact target."""

import dataclasses
import json
import shutil

import numpy as np
import pytest

from speechmt.bundle import ModelBundle
from speechmt.checkpoint import CheckpointError
from speechmt.checks import ConfigError
from speechmt.config import DataConfig, load_config
from speechmt.data.batching import BucketBatchSampler
from speechmt.data.dataset import DirectionTags, TextDataset
from speechmt.data.manifest import Record, read_manifest, record_directions, split_direction
from speechmt.tokenizers.sentencepiece import Tokenizer
from tests.conftest import ASSETS
from tests.helpers import tiny_config


def _record(i: int, src: str, tgt: str) -> Record:
    return Record(f"u{i}", "a.wav", 0.0, 1.0, 100, "hello", "hallo", "spk", src, tgt)


def test_directions_are_named_and_split_back():
    assert split_direction("en-de") == ("en", "de")
    assert split_direction("zh-CN-en") == ("zh-CN", "en")
    assert split_direction("en-zh-CN") == ("en", "zh-CN")
    with pytest.raises(ValueError, match="no direction"):
        split_direction("english-german")
    index, names = record_directions([_record(0, "en", "de"), _record(1, "en", "fr"), _record(2, "", "")], ("en", "de"))
    assert names == ["en-de", "en-fr"] and index.tolist() == [0, 1, 0]


def test_a_config_names_its_directions_as_directions():
    assert DataConfig(directions=["en-de", "en-fr"]).directions == ["en-de", "en-fr"]
    with pytest.raises(ValueError, match="'en_de' is no direction"):
        DataConfig(directions=["en_de"])
    with pytest.raises(ValueError, match="directions repeat"):
        DataConfig(directions=["en-de", "en-de"])
    with pytest.raises(ConfigError, match="sampling_temperature"):
        load_config(None, ["data.sampling_temperature=0"])
    assert load_config(None, ["data.directions=[en-de, en-fr]"]).data.directions == ["en-de", "en-fr"]


def test_each_record_gets_its_own_directions_tag(tiny_data):
    tok = Tokenizer.load(tiny_data / "spm.model")
    tags = DirectionTags({"en-de": "<de>", "de-en": "<en>"}, "en-de")
    records = [_record(0, "en", "de"), _record(1, "de", "en"), _record(2, "", "")]
    ds = TextDataset.from_records(records, tok, tok, tgt_tag=tags)
    firsts = [int(ds[i].tgt_ids[0]) for i in range(3)]
    assert firsts == [tok.tag_id("<de>"), tok.tag_id("<en>"), tok.tag_id("<de>")]
    assert ds.directions()[0].tolist() == [0, 1, 2] and ds.directions(("en", "de"))[1] == ["en-de", "de-en"]
    with pytest.raises(ConfigError, match="direction en-fr, which data.directions"):
        TextDataset.from_records([_record(0, "en", "fr")], tok, tok, tgt_tag=tags)[0]


def _shares(sampler: BucketBatchSampler, groups: np.ndarray) -> np.ndarray:
    items = np.concatenate(sampler.epoch_batches())
    return np.bincount(groups[items], minlength=groups.max() + 1) / len(items)


def test_temperature_sampling_draws_directions_by_size_to_the_power_one_over_t():
    groups = np.repeat([0, 1, 2], [800, 150, 50])
    sizes = np.full(len(groups), 10)

    def sampler(t, **kw):
        return BucketBatchSampler(sizes, 100, seed=4, groups=groups, temperature=t, **kw)

    natural = sampler(1.0)
    assert not natural.resamples and _shares(natural, groups) == pytest.approx([0.8, 0.15, 0.05])
    p = np.array([800, 150, 50]) ** (1 / 5)
    assert sampler(5.0).direction_shares() == pytest.approx(p / p.sum())
    assert _shares(sampler(5.0), groups) == pytest.approx(p / p.sum(), abs=2e-3)
    assert _shares(sampler(1e9), groups) == pytest.approx([1 / 3] * 3, abs=2e-3)
    # an epoch keeps about N items, the small direction's repeated whole and then sampled without replacement
    items = np.concatenate(sampler(5.0).epoch_batches())
    assert abs(len(items) - 1000) <= 3
    small = items[groups[items] == 2]
    assert np.bincount(small, minlength=1000)[950:].min() >= len(small) // 50
    # a function of (seed, epoch): resume and every rank see the same epoch; the ranks share it out
    a, b = sampler(5.0), sampler(5.0)
    a.set_epoch(3), b.set_epoch(3)
    assert a.epoch_batches() == b.epoch_batches()
    b.set_epoch(4)
    assert a.epoch_batches() != b.epoch_batches()
    ranks = [sampler(5.0, rank=r, world_size=2) for r in (0, 1)]
    shards = [x for r in ranks for x in r.rank_batches()]
    assert set(map(tuple, shards)) == set(map(tuple, ranks[0].epoch_batches()))
    assert ranks[0].epoch_batches() == sampler(5.0).epoch_batches()


def test_the_bundle_picks_the_tag_of_the_direction_asked(tiny_data):
    bundle = ModelBundle(
        None,
        None,
        None,
        "st",
        {"st": "<de>"},
        directions={"st": {"en-de": "<de>", "en-fr": "<fr>", "de-fr": "<fr>"}},
    )
    assert bundle.direction_tag("st") == "<de>"
    assert bundle.direction_tag("st", tgt_lang="de") == "<de>"
    assert bundle.direction_tag("st", "en", "fr") == "<fr>"
    with pytest.raises(CheckpointError, match=r"\*-fr: the model knows several such directions; it knows en-de"):
        bundle.direction_tag("st", tgt_lang="fr")
    with pytest.raises(CheckpointError, match="en-es: the model was not trained in that direction"):
        bundle.direction_tag("st", "en", "es")


@pytest.fixture(scope="module")
def two_directions(tmp_path_factory):
    """The replica as MuST-C en-de and en-fr: the same audio, the en-fr "translation" its English transcript, so
    only the tag tells the model which to write; prepared into one folder with a joint vocabulary."""
    from speechmt.data.mustc import prepare_mustc
    from speechmt.data.prepare import PrepareConfig
    from speechmt.data.vocab import train_from_manifests
    from speechmt.tokenizers.sentencepiece import TokenizerConfig

    root, out = tmp_path_factory.mktemp("mustc2"), tmp_path_factory.mktemp("data2")
    shutil.copytree(ASSETS / "mustc/en-de", root / "en-de")
    shutil.copytree(ASSETS / "mustc/en-de", root / "en-fr")
    for de in (root / "en-fr").rglob("*.de"):
        de.with_suffix(".fr").write_text(de.with_suffix(".en").read_text())
        de.unlink()
    prepare_mustc(root, out, ["de", "fr"], cfg=PrepareConfig(jobs=1))
    tok = train_from_manifests(
        [out / "train.jsonl"], ("src_text", "tgt_text"), TokenizerConfig(vocab_size=150, lang_tags=("<de>", "<fr>"))
    )
    tok.save(out / "spm.model")
    return out


def test_a_run_keeps_the_directions_it_names(two_directions, tmp_path):
    from speechmt.training.builders import build_dataset, stream_tags, tokenizers_for

    cfg = tiny_config(two_directions, tmp_path)
    both = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, directions=["en-de", "en-fr"]))
    french = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, directions=["en-fr"]))
    toks = tokenizers_for(both)
    assert stream_tags(french, "st") == "<fr>" and stream_tags(both, "st").tags == {"en-de": "<de>", "en-fr": "<fr>"}
    ds = build_dataset(both, "train", toks, None, True)
    assert len(ds) == 12 and sorted(ds.directions()[0].tolist()) == [0] * 6 + [1] * 6
    ds = build_dataset(french, "train", toks, None, True)
    fr = toks.tgt.tag_id("<fr>")
    assert len(ds) == 6 and len(ds.sizes) == 6 and all(int(ds[j].tgt_ids[0]) == fr for j in range(6))
    assert {ds[j].id for j in range(6)} == {
        r.id for r in read_manifest(two_directions / "train.jsonl") if r.tgt_lang == "fr"
    }
    spanish = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, directions=["en-es"]))
    with pytest.raises(ConfigError, match="no records in data.directions \\(en-es\\); it holds en-de, en-fr"):
        build_dataset(spanish, "train", toks, None, True)


@pytest.fixture(scope="module")
def multilingual(two_directions, tmp_path_factory):
    from speechmt.cli import main
    from speechmt.config import save_config

    exp = tmp_path_factory.mktemp("exp2")
    cfg = tiny_config(
        two_directions, exp, max_updates=250, save_interval_updates=250, validate_interval_updates=250, lr=3e-3
    )
    cfg = dataclasses.replace(
        cfg, data=dataclasses.replace(cfg.data, directions=["en-de", "en-fr"], sampling_temperature=5.0)
    )
    save_config(cfg, exp / "conf.yaml")
    assert main(["train", "--config", str(exp / "conf.yaml")]) == 0
    return exp


@pytest.mark.slow
def test_one_model_writes_each_directions_exact_target(multilingual, two_directions):
    from speechmt import load_model
    from speechmt.evaluation.evaluate import decode_split

    ckpt = multilingual / "checkpoint_last.safetensors"
    records = read_manifest(two_directions / "train.jsonl")
    assert {(r.src_lang, r.tgt_lang) for r in records} == {("en", "de"), ("en", "fr")}
    lm = load_model(ckpt)
    assert lm.directions == {"en-de": "<de>", "en-fr": "<fr>"}
    decoded = decode_split(lm, two_directions, "train", lm.decode_options(beam=2))
    assert decoded.hyps == [r.tgt_text for r in records]  # each utterance in its own record's direction
    from speechmt import translate
    from speechmt.audio import read_audio

    french_records = [r for r in records if r.tgt_lang == "fr"]
    waves = [read_audio(r.audio, r.offset, r.duration) for r in french_records]
    assert [t.text for t in translate(lm, waves, beam=2, tgt_lang="fr")] == [r.tgt_text for r in french_records]
    german = {r.id.split("@")[0]: r.tgt_text for r in records if r.tgt_lang == "de"}
    assert [t.text for t in translate(lm, waves, beam=2)] == [german[r.id.split("@")[0]] for r in french_records]
    french = load_model(ckpt, tgt_lang="fr")
    assert french.tag == "<fr>" and french.decode_options().prefix == (french.tokenizer.tag_id("<fr>"),)
    with pytest.raises(
        CheckpointError, match=r"\*-es: the model was not trained in that direction; it knows en-de, en-fr"
    ):
        load_model(ckpt, tgt_lang="es")
    valid = [json.loads(line) for line in (multilingual / "train_log.jsonl").read_text().splitlines()]
    valid = [v for v in valid if v.get("type") == "valid"][-1]
    assert {"valid_bleu_en-de", "valid_bleu_en-fr", "valid_bleu"} <= set(valid)


@pytest.mark.parametrize(
    "overrides, st, asr",
    [
        ([], {"en-fr": "<fr>", "de-fr": "<fr>", "en-es": "<es>"}, {"en-fr": "<en>", "de-fr": "<de>", "en-es": "<en>"}),
        (
            ["model.decoder.kind=whisper", "model.decoder.name_or_path=w"],
            {"en-fr": "<|fr|>", "de-fr": "<|fr|>", "en-es": "<|es|>"},
            {"en-fr": "<|en|>", "de-fr": "<|de|>", "en-es": "<|en|>"},
        ),
        (  # Whisper's translate task names the source language
            ["model.decoder.kind=whisper", "model.decoder.name_or_path=w", "data.whisper_task=translate"],
            {"en-fr": "<|en|>", "de-fr": "<|de|>", "en-es": "<|en|>"},
            {"en-fr": "<|en|>", "de-fr": "<|de|>", "en-es": "<|en|>"},
        ),
        (
            ["model.decoder.kind=lm", "model.decoder.name_or_path=g"],
            {"en-fr": "<fr>", "de-fr": "<fr>", "en-es": "<es>"},
            {"en-fr": "<en>", "de-fr": "<de>", "en-es": "<en>"},
        ),
    ],
)
def test_every_decoder_kind_tags_each_direction(overrides, st, asr):
    from speechmt.training.builders import prompt_language, stream_tags

    cfg = load_config(None, [*overrides, "data.directions=[en-fr,de-fr,en-es]"])
    assert stream_tags(cfg, "st").tags == st and stream_tags(cfg, "asr").tags == asr
    assert prompt_language(cfg) == ""  # an LM decoder's prompt names no source of several
    one_source = load_config(None, [*overrides, "data.directions=[en-fr,en-es]"])
    assert prompt_language(one_source) == "en"


def test_a_run_of_several_sources_resolves_them_for_a_transcribing_encoder():
    """whisper_asr hears each utterance in its own source: the run's sources go to the build (which resolves their
    Whisper tokens), from its cached search alone; one source resolves none (its prompt's language)."""
    from speechmt.training.builders import resolved_for

    asr = ["model.encoder.kind=whisper_asr", "model.encoder.name_or_path=w", "data.whisper_pad_seconds=30"]
    cfg = load_config(None, [*asr, "data.directions=[en-fr,de-fr,en-es]"])
    assert resolved_for(cfg, None) == {"encoder.asr_languages": ["en", "de"]}
    assert resolved_for(load_config(None, [*asr, "data.directions=[en-fr,en-es]"]), None) == {}
    assert resolved_for(load_config(None, ["data.directions=[en-fr,de-fr]"]), None) == {}  # a conv encoder
    with pytest.raises(ConfigError, match=r"several sources \(en, de\) .* set data.cache_encoder true$"):
        resolved_for(load_config(None, [*asr, "data.directions=[en-fr,de-fr]", "data.cache_encoder=false"]), None)


def test_an_lm_prompt_of_several_sources_is_its_start_token(lm_dir):
    from speechmt.tokenizers.lm import LMTokenizer

    tok = LMTokenizer.from_pretrained(str(lm_dir), role="source")
    assert tok.prompt_ids("") == (tok.lm.bos,)
    assert tok.prompt_ids("en") == (tok.lm.bos, *tok.text_ids("English:"))


@pytest.fixture(scope="module")
def cascade_of_two(two_directions, tmp_path_factory):
    """(ASR checkpoint, en-de + en-fr text MT checkpoint) trained on the two-direction replica until each
    reproduces its training targets."""
    from speechmt.cli import main
    from speechmt.config import save_config

    common = dict(
        max_updates=250, save_interval_updates=250, validate_interval_updates=250, lr=3e-3, valid_decode=False
    )
    paths = []
    for task in ("asr", "mt"):
        exp = tmp_path_factory.mktemp(f"cascade_{task}")
        cfg = tiny_config(two_directions, exp, task=task, **common)
        if task == "asr":  # the joint vocabulary has the targets' tags only
            cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, lang_tag=False))
        if task == "mt":
            cfg.model.text_encoder.layers = cfg.model.encoder.layers
            cfg.model.text_encoder.shared = True
            cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, directions=["en-de", "en-fr"]))
        save_config(cfg, exp / "conf.yaml")
        assert main(["train", "--config", str(exp / "conf.yaml")]) == 0
        paths.append(exp / "checkpoint_last.safetensors")
    return paths


@pytest.mark.slow
def test_a_cascade_translates_each_record_into_its_own_direction(cascade_of_two, two_directions, tmp_path):
    from speechmt.decoding.cascade import load_cascade
    from speechmt.evaluation.evaluate import evaluate_cascade

    asr, mt = load_cascade(*cascade_of_two)
    assert mt.directions == {"en-de": "<de>", "en-fr": "<fr>"}
    report = evaluate_cascade(asr, mt, two_directions, "train", beam=2, out_dir=tmp_path)
    records = read_manifest(two_directions / "train.jsonl")
    hyps = (tmp_path / "hyps.txt").read_text().splitlines()
    assert hyps == [r.tgt_text for r in records]  # German for en-de records, the English transcript for en-fr ones
    assert report.n == 12 and report.metrics["BLEU"].score == pytest.approx(100.0)
