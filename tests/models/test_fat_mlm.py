"""FAT-MLM: masking ratios and spans, reconstruction targets, losses on crafted cases, absent parts, masks
that a resumed run draws again, FAT-ST's initialisation from FAT-MLM (named tensors and exact encoder
outputs), and a tiny FAT-MLM trained on the corpus then a FAT-ST from it that trains and translates; the
same on a tiny random Whisper (frozen encoder states, identity stack, Whisper's decoder for FAT-ST)."""

import dataclasses
import json
import math
from dataclasses import asdict

import pytest
import torch

from speechmt import load_model, translate
from speechmt.checkpoint import save_checkpoint
from speechmt.data.encoder_cache import cache_key
from speechmt.data.manifest import read_manifest, record_audio
from speechmt.models import preset
from speechmt.models.build import build
from speechmt.models.config import ModelConfig
from speechmt.models.fat_mlm import (
    FatMasks,
    FatMLM,
    WhisperFatMLM,
    fat_mlm_loss,
    reconstruction_frames,
    span_mask,
    translator_state,
)
from speechmt.tasks import Stage, TaskData
from speechmt.tokenizers.whisper import WhisperTokenizer
from speechmt.training.builders import frontend_for
from speechmt.training.run import init_encoder_from, run_training
from tests.helpers import tiny_config
from tests.whisper_helpers import tiny_whisper_dir

SRC_V, TGT_V = 30, 40
NO_DROPOUT = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)


def _fat(**options) -> FatMLM:
    return build(
        preset(
            "tiny",
            **NO_DROPOUT,
            tgt_vocab_size=TGT_V,
            src_vocab_size=SRC_V,
            semantic={"kind": "fat_mlm", "options": options},
        )
    ).eval()


def _runs(row: torch.Tensor) -> list[int]:
    """Lengths of the runs of True in a 1-D bool tensor."""
    runs, n = [], 0
    for v in row.tolist() + [False]:
        if v:
            n += 1
        elif n:
            runs, n = runs + [n], 0
    return runs


def test_span_mask_masks_the_share_in_spans_of_real_frames_only():
    lengths = torch.randint(10, 200, (400,), generator=torch.Generator().manual_seed(0))
    mask = span_mask(lengths, 0.3, 5, torch.Generator().manual_seed(1))
    assert mask.shape == (400, int(lengths.max()))
    counts = mask.sum(1)
    assert counts.tolist() == [round(0.3 * n) for n in lengths.tolist()]  # the share, per utterance
    assert not mask[torch.arange(mask.size(1))[None, :] >= lengths[:, None]].any()  # never past the length
    assert float(counts.sum() / lengths.sum()) == pytest.approx(0.3, abs=0.005)
    for row, n in zip(mask, counts.tolist()):  # spans of 5 (the last one shorter), adjacent ones merging
        runs = _runs(row)
        assert len(runs) <= math.ceil(n / 5) and all(r >= min(5, n % 5 or 5) for r in runs)


def test_model_masks_subsampled_frames_and_bert_tokens_at_their_shares():
    """Over a large crafted batch: 30% of the subsampled frames, 15% of the text tokens (never specials or
    tags), of which 80% the mask vector, 10% a random token, 10% themselves."""
    model = _fat(speech_mask=0.3, token_mask=0.15).train()
    gen = torch.Generator().manual_seed(2)
    b, s = 300, 60
    feat_lengths = torch.randint(40, 400, (b,), generator=gen)
    tokens = torch.randint(7, SRC_V, (b, s), generator=gen)
    tokens[:, 0], tokens[:, -1] = 5, 3  # a tag (below first_text_id 7) and eos: never masked
    lengths = torch.full((b,), s)
    masks = model.draw_masks(feat_lengths, tokens, lengths, None, None, first_text_id=7)
    frames = model.speech_encoder.subsampler.output_lengths(feat_lengths)
    assert masks.speech.shape == (b, int(frames.max())) and masks.tgt is None
    assert float(masks.speech.sum() / frames.sum()) == pytest.approx(0.3, abs=0.005)
    m = masks.src
    assert not m.predicted[:, [0, -1]].any()
    eligible = (s - 2) * b
    assert float(m.predicted.sum()) / eligible == pytest.approx(0.15, abs=0.005)
    n = float(m.predicted.sum())
    changed = m.predicted & ~m.masked & (m.inputs != tokens)
    kept = m.predicted & ~m.masked & (m.inputs == tokens)
    assert float(m.masked.sum()) / n == pytest.approx(0.8, abs=0.02)
    assert float(changed.sum()) / n == pytest.approx(0.1 * (1 - 1 / (SRC_V - 7)), abs=0.015)
    assert float(kept.sum()) / n == pytest.approx(0.1 + 0.1 / (SRC_V - 7), abs=0.015)
    assert not (m.masked & ~m.predicted).any() and torch.equal(m.inputs[~m.predicted], tokens[~m.predicted])
    assert int(m.inputs.min()) >= 3 and int(m.inputs[m.predicted].min()) >= 7


def test_masks_repeat_after_before_update_and_in_eval():
    model = _fat().train()
    lengths, tokens = torch.tensor([200, 120]), torch.randint(5, SRC_V, (2, 40))
    tl = torch.tensor([40, 30])

    def draw():
        m = model.draw_masks(lengths, tokens, tl, None, None)
        return m.speech, m.src.predicted, m.src.inputs

    model.before_update(5)
    first, later = draw(), draw()
    model.before_update(5)
    assert all(torch.equal(a, b) for a, b in zip(draw(), first))  # a resumed run at update 5 draws the same
    assert not all(torch.equal(a, b) for a, b in zip(later, first))
    model.before_update(6)
    assert not all(torch.equal(a, b) for a, b in zip(draw(), first))
    model.eval()
    assert all(torch.equal(a, b) for a, b in zip(draw(), draw()))


def test_reconstruction_targets_are_exactly_the_masked_fbank_frames():
    speech = torch.tensor([[False, True, False, False, True]])  # subsampled frames 1 and 4 of 5
    frames = reconstruction_frames(speech, torch.tensor([18]), 20, 4)
    expected = torch.zeros(1, 20, dtype=torch.bool)
    expected[0, 4:8] = expected[0, 16:18] = True  # frame 4 covers 16..19, of which 18, 19 are padding
    assert torch.equal(frames, expected)


@pytest.mark.parametrize("kind", ["l1", "l2"])
def test_speech_loss_on_crafted_masks_and_predictions(kind):
    """A head that predicts zeros: the loss is the mean |x| (or x^2) over exactly the masked fbank values."""
    model = _fat(speech_loss=kind, token_mask=0.0)
    torch.nn.init.zeros_(model.reconstruct.weight), torch.nn.init.zeros_(model.reconstruct.bias)
    feats, lengths = torch.randn(2, 20, 80), torch.tensor([18, 9])
    speech = torch.zeros(2, 5, dtype=torch.bool)
    speech[0, [1, 4]] = speech[1, 2] = True  # row 1 has 3 subsampled frames; frame 2 covers 8 (9.. padding)
    model.draw_masks = lambda *a, **k: FatMasks(speech=speech)
    loss, stats = fat_mlm_loss(model, feats, lengths, None, None, None, None)
    target = torch.cat([feats[0, 4:8], feats[0, 16:18], feats[1, 8:9]])  # 7 frames
    expected = target.abs().mean() if kind == "l1" else target.pow(2).mean()
    assert float(stats["masked_frames"]) == 7 and float(stats["tokens"]) == 0
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-6)


def test_losses_are_zero_for_a_perfect_head_or_nothing_masked_and_finite_otherwise():
    model = _fat(token_mask=0.0)
    torch.nn.init.zeros_(model.reconstruct.weight)
    with torch.no_grad():
        model.reconstruct.bias.copy_(torch.arange(80.0).repeat(4) / 80)
    feats = (torch.arange(80.0) / 80).expand(2, 40, 80).clone()  # every frame what the head predicts
    lengths = torch.tensor([40, 25])
    loss, stats = fat_mlm_loss(model, feats, lengths, None, None, None, None)
    assert float(stats["masked_frames"]) > 0 and loss.item() == 0.0
    nothing = _fat(speech_mask=0.0, token_mask=0.0)
    src, src_lengths = torch.randint(5, SRC_V, (2, 6)), torch.tensor([6, 4])
    loss, stats = fat_mlm_loss(nothing, feats, lengths, src, src_lengths, None, None)
    assert loss.item() == 0.0 and float(stats["masked_tokens"]) == 0
    loss.backward()  # still a graph
    model = _fat().train()
    tgt, tgt_lengths = torch.randint(5, TGT_V, (2, 8)), torch.tensor([8, 5])
    loss, stats = fat_mlm_loss(model, torch.randn(2, 40, 80), lengths, src, src_lengths, tgt, tgt_lengths)
    assert math.isfinite(loss.item()) and float(stats["masked_frames"]) > 0 and loss.item() > 0
    loss.backward()
    assert model.speech_mask.grad is not None and model.tgt_embedding.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("parts", [("speech", "src", "tgt"), ("speech", "src"), ("src", "tgt"), ("tgt",), ("speech",)])
def test_absent_parts_are_absent_from_the_concatenation(parts):
    """ST triples, ASR pairs, MT pairs, monolingual text, untranscribed audio: each example is its parts
    back to back (speech 40 and 18 fbank frames -> 10 and 5 subsampled), padding after them."""
    model = _fat()
    given = {
        "speech": (torch.randn(2, 40, 80), torch.tensor([40, 18])),
        "src": (torch.randint(5, SRC_V, (2, 6)), torch.tensor([6, 3])),
        "tgt": (torch.randint(5, TGT_V, (2, 7)), torch.tensor([7, 2])),
    }
    args = [t for name in ("speech", "src", "tgt") for t in (given[name] if name in parts else (None, None))]
    out = model(*args)
    sizes = {"speech": [10, 5], "src": [6, 3], "tgt": [7, 2]}
    expected_lengths = [sum(sizes[p][i] for p in parts) for i in range(2)]
    assert out.lengths.tolist() == expected_lengths and out.x.shape == (2, max(expected_lengths), 64)
    assert set(out.parts) == set(parts)
    for i in range(2):
        row = [{"speech": 0, "src": 1, "tgt": 2}[p] for p in parts for _ in range(sizes[p][i])]
        assert out.segments[i].tolist() == row + [-1] * (max(expected_lengths) - len(row))
    alone = model(*[t[1:] if t is not None else None for t in args])  # the second example alone: same states
    assert torch.allclose(alone.x[0, : expected_lengths[1]], out.x[1, : expected_lengths[1]], atol=1e-5)


def _fat_st_pair(tmp_path, subsampler: str):
    fat = build(
        preset(
            "tiny",
            **NO_DROPOUT,
            tgt_vocab_size=TGT_V,
            src_vocab_size=SRC_V,
            encoder={"subsampler": subsampler},
            semantic={"kind": "fat_mlm"},
        )
    ).eval()
    path = tmp_path / "fat.safetensors"
    save_checkpoint(path, {"model_config": asdict(fat.config), "model": fat.state_dict()})
    st = build(
        preset(
            "tiny",
            **NO_DROPOUT,
            tgt_vocab_size=TGT_V,
            src_vocab_size=SRC_V,
            encoder={"subsampler": subsampler},
            text_encoder={"layers": 2, "shared": True},
        )
    ).eval()
    return fat, st, path


@pytest.mark.parametrize("subsampler", ["conv1d", "conv2d"])
def test_fat_st_loads_fat_mlm_weights(tmp_path, subsampler):
    fat, st, path = _fat_st_pair(tmp_path, subsampler)
    cross = {k: v.clone() for k, v in st.state_dict().items() if ".cross_" in k}
    n = init_encoder_from(st, str(path), ("speech_encoder.", "text_encoder.", "decoder."))
    own, src = st.state_dict(), fat.state_dict()
    mapped = translator_state(src)
    assert n == len(set(mapped) & set(own))
    for name, value in src.items():
        if name.startswith("speech_encoder.") and not name.endswith("subsampler.out.bias"):
            assert torch.equal(own[name], value), name
    for i in range(2):
        for enc, dec in (
            ("attn_norm", "self_norm"),
            ("attn.q_proj", "self_attn.q_proj"),
            ("attn.out_proj", "self_attn.out_proj"),
            ("ffn_norm", "ffn_norm"),
            ("ffn.fc2", "ffn.fc2"),
        ):
            for p in ("weight", "bias"):
                assert torch.equal(
                    own[f"decoder.layers.{i}.{dec}.{p}"], src[f"speech_encoder.encoder.layers.{i}.{enc}.{p}"]
                )
    assert torch.equal(own["decoder.norm.weight"], src["speech_encoder.encoder.norm.weight"])
    assert all(torch.equal(own[k], v) for k, v in cross.items())  # cross-attention stays as built
    seg, scale = src["segments.weight"], 8.0  # sqrt(64)
    assert torch.allclose(own["decoder.embed.weight"][1:], src["tgt_embedding.weight"][1:] + seg[2] / scale)
    assert torch.equal(own["decoder.embed.weight"][0], torch.zeros(64))  # padding stays zero
    assert torch.allclose(own["text_encoder.embedding.weight"][1:], src["src_embedding.weight"][1:] + seg[1] / scale)
    # the FAT-ST encoder is FAT-MLM's on one part: text exactly, speech exactly with conv2d (conv1d ends in a GLU)
    tokens, lengths = torch.randint(5, SRC_V, (2, 6)), torch.tensor([6, 4])
    text = st.encode_text(tokens, lengths)
    assert torch.allclose(text.x, fat(src=tokens, src_lengths=lengths).x, atol=1e-5)
    feats, feat_lengths = torch.randn(2, 40, 80), torch.tensor([40, 30])
    speech, fused = st.encode_speech(feats, feat_lengths), fat(feats, feat_lengths).x
    assert torch.allclose(speech.x, fused, atol=1e-5) == (subsampler == "conv2d")


def test_tiny_fat_mlm_pretrains_then_fat_st_fine_tunes_and_translates(tiny_data, tmp_path):
    fat_dir, st_dir = tmp_path / "fat", tmp_path / "st"
    cfg = tiny_config(
        tiny_data,
        fat_dir,
        max_updates=4,
        valid_decode=False,
        save_interval_updates=4,
        validate_interval_updates=4,
        log_interval=1,
    )
    cfg.model = preset("tiny", **NO_DROPOUT, semantic={"kind": "fat_mlm", "options": {"speech_span": 2}})
    cfg.train.stages = [
        Stage(
            "fat", [TaskData("fat", {"fat_mlm": 1.0}), TaskData("fat_text", {"fat_mlm": 1.0}, data_dir=str(tiny_data))]
        )
    ]
    state = run_training(cfg)
    assert state.step == 4 and math.isfinite(state.best_loss)
    log = [json.loads(x) for x in (fat_dir / "train_log.jsonl").read_text().splitlines()]
    train = [r for r in log if r["type"] == "train"]
    assert len(train) == 4 and all(math.isfinite(r["loss"]) for r in train)
    print(
        "fat-mlm losses:",
        [round(r["loss"], 3) for r in train],
        {k: v for k, v in train[-1].items() if k.startswith(("fat_", "fat_text"))},
    )

    cfg = tiny_config(
        tiny_data,
        st_dir,
        max_updates=4,
        valid_decode=False,
        save_interval_updates=4,
        validate_interval_updates=4,
        log_interval=1,
        init_encoder_from=str(fat_dir / "checkpoint_last.safetensors"),
        init_prefixes=("speech_encoder.", "text_encoder.", "decoder."),
    )
    cfg.model = preset("tiny", **NO_DROPOUT, text_encoder={"layers": 2, "shared": True})
    cfg.train.stages = [Stage("st+mt", [TaskData("st"), TaskData("mt")])]
    state = run_training(cfg)
    assert state.step == 4 and math.isfinite(state.best_loss)
    lm = load_model(st_dir / "checkpoint_last.safetensors")
    (result,) = translate(lm, [record_audio(read_manifest(tiny_data / "dev.jsonl")[0], tiny_data)], beam=2)
    assert isinstance(result.text, str) and len(result.nbest) == 1
    st_log = [json.loads(x) for x in (st_dir / "train_log.jsonl").read_text().splitlines()]
    print("fat-st losses:", [round(r["loss"], 3) for r in st_log if r["type"] == "train"])


def test_fat_mlm_pretrains_on_whatever_data_there_is(tiny_data, tmp_path):
    """ST triples, ASR pairs, untranscribed audio, MT pairs and monolingual text, each a stream with its parts:
    the absent parts are absent from the concatenation (nothing of them is masked or predicted)."""
    cfg = tiny_config(
        tiny_data,
        tmp_path,
        max_updates=2,
        valid_decode=False,
        save_interval_updates=2,
        validate_interval_updates=2,
        log_interval=1,
    )
    cfg.model = preset("tiny", **NO_DROPOUT, semantic={"kind": "fat_mlm", "options": {"speech_span": 2}})
    fat = lambda task, parts, **kw: TaskData(task, {"fat_mlm": 1.0}, parts=parts, **kw)  # noqa: E731
    cfg.train.stages = [
        Stage(
            "fat",
            [
                fat("fat", []),
                fat("fat", ["speech", "src"]),
                fat("fat", ["speech"]),
                fat("fat_text", [], data_dir=str(tiny_data)),
                fat("fat_text", ["src"]),
            ],
        )
    ]
    assert run_training(cfg).step == 2
    log = [json.loads(x) for x in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    train, valid = [r for r in log if r["type"] == "train"], [r for r in log if r["type"] == "valid"][-1]
    for r in train:
        frames = {
            k: r[f"{k}_fat_mlm_masked_frames"]
            for k in ("fat", "fat[speech+src]", "fat[speech]", f"fat_text@{tiny_data}", "fat_text[src]")
        }
        assert frames["fat"] > 0 and frames["fat[speech+src]"] > 0 and frames["fat[speech]"] > 0
        assert frames[f"fat_text@{tiny_data}"] == frames["fat_text[src]"] == 0
        assert r["fat[speech]_fat_mlm_masked_tokens"] == 0 and r["fat[speech]_fat_mlm_tokens"] == 0
        assert r["fat_text[src]_fat_mlm_masked_tokens"] > 0 and r["fat[speech+src]_fat_mlm_masked_tokens"] > 0
        assert r["fat[speech]_fat_mlm_speech"] > 0 and math.isfinite(r["loss"])
    # validation (fixed eval masks): the ASR-pair stream masks the same frames as the triple stream, and
    # fewer tokens (the translation is absent)
    assert valid["valid_fat[speech+src]_fat_mlm_masked_frames"] == valid["valid_fat_fat_mlm_masked_frames"]
    assert 0 < valid["valid_fat[speech+src]_fat_mlm_masked_tokens"] < valid["valid_fat_fat_mlm_masked_tokens"]


def test_options_are_checked():
    with pytest.raises(ValueError, match="speech_loss must be one of l1, l2"):
        _fat(speech_loss="l3")
    with pytest.raises(ValueError, match="needs the conv encoder"):
        from speechmt.models.fat_mlm import fat_mlm

        fat_mlm(ModelConfig(src_vocab_size=5, encoder={"kind": "wav2vec2"}))
    with pytest.raises(ValueError, match="options layers and init are the whisper encoder's"):
        _fat(init="identity")
    with pytest.raises(ValueError, match="semantic fat_mlm init must be one of random, identity, got 'ones'"):
        _fat(init="ones")
    with pytest.raises(ValueError, match="semantic fat_mlm layers must be an integer >= 1, got 0"):
        _fat(layers=0)


# --- on Whisper ---


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper_fat"), d_model=32)


def _whisper_cfg(base, semantic: dict, **fields) -> ModelConfig:
    """A Whisper-backbone config as training builds it (the decoder's pad id is Whisper's tokenizer's)."""
    return ModelConfig(
        encoder={"kind": "whisper", "name_or_path": str(base), "finetune": "frozen", **fields.pop("encoder", {})},
        decoder={"kind": "whisper", **fields.pop("decoder", {})},
        src_vocab_size=SRC_V,
        pad_id=WhisperTokenizer.from_pretrained(base).pad_id,
        semantic=semantic,
        **NO_DROPOUT,
        **fields,
    )


def _whisper_fat(base, **options) -> WhisperFatMLM:
    options = {"layers": 2, "init": "identity", **options}
    return build(_whisper_cfg(base, {"kind": "fat_mlm", "options": options})).eval()


def _fat_st_whisper(base) -> "torch.nn.Module":
    return build(
        _whisper_cfg(
            base,
            {"kind": "xstnet", "options": {"layers": 2, "init": "identity", "audio_tag": False, "segments": True}},
            text_encoder={"embed_only": True},
            decoder={"finetune": "lora"},
        )
    ).eval()


STATES, STATE_LENGTHS = torch.randn(2, 10, 32), torch.tensor([10, 6])  # cached Whisper states (H = D = 32)
MELS, MEL_LENGTHS = torch.randn(2, 40, 80), torch.tensor([40, 25])


def test_whisper_fat_mlm_takes_whispers_dimensions_vocabulary_and_token_embedding(whisper_dir):
    from transformers import WhisperForConditionalGeneration

    model = _whisper_fat(whisper_dir)
    hf = WhisperForConditionalGeneration.from_pretrained(whisper_dir)
    c = hf.config
    assert isinstance(model.speech_encoder.proj, torch.nn.Identity)  # D == Whisper's width: no projection
    assert (model.config.d_model, model.config.n_heads, model.config.ffn_dim) == (32, 4, 64)
    assert model.config.tgt_vocab_size == c.vocab_size and model.tgt_text_ids == (0, c.eos_token_id)
    assert torch.equal(model.tgt_embedding.weight, hf.model.decoder.embed_tokens.weight)
    # a checkpoint rebuilds it without the folder: the bundle keeps the complete HF configs, the config what was given
    assert model.resolved["encoder.hf_config"]["d_model"] == 32 and model.config.encoder.hf_config == {}
    assert model.resolved["decoder.hf_config"] == model.resolved["encoder.hf_config"]
    assert not any(p.requires_grad for p in model.speech_encoder.parameters())  # frozen: its states are cached
    assert model.reconstruct.out_features == 32 and model.factor == 1
    rebuilt = build(model.config, pretrained=False, resolved=model.resolved)
    assert isinstance(rebuilt, WhisperFatMLM) and rebuilt.state_dict().keys() == model.state_dict().keys()
    assert rebuilt.resolved == model.resolved
    with pytest.raises(ValueError, match="needs encoder.finetune frozen"):
        build(_whisper_cfg(whisper_dir, {"kind": "fat_mlm", "options": {"layers": 1}}, encoder={"finetune": "full"}))
    with pytest.raises(ValueError, match="needs options.layers"):
        build(_whisper_cfg(whisper_dir, {"kind": "fat_mlm"}))


def test_whisper_fat_mlm_masks_speech_states_with_the_mask_vector_and_reconstructs_them(whisper_dir):
    """An identity stack hands back its input: masked speech positions are the mask vector (+ the speech
    segment), the others Whisper's states; the reconstruction loss is the mean |head - state| (or squared)
    over exactly the masked states."""
    model = _whisper_fat(whisper_dir, token_mask=0.0)
    speech = torch.zeros(2, 10, dtype=torch.bool)
    speech[0, [1, 2, 7]] = speech[1, 4] = True
    out = model(STATES, STATE_LENGTHS, masks=FatMasks(speech=speech), precomputed=True)
    x, seg = out.parts["speech"][0], model.segments.weight[0]
    assert torch.equal(out.speech_states, STATES)
    for b, n in enumerate(STATE_LENGTHS.tolist()):
        for t in range(n):
            expected = model.speech_mask if speech[b, t] else STATES[b, t]
            assert torch.allclose(x[b, t], expected + seg, atol=1e-6), (b, t)
    torch.nn.init.zeros_(model.reconstruct.weight)
    with torch.no_grad():
        model.reconstruct.bias.copy_(torch.linspace(-1, 1, 32))
    model.draw_masks = lambda *a, **k: FatMasks(speech=speech)
    for kind in ("l1", "l2"):
        model.options = dataclasses.replace(model.options, speech_loss=kind)
        loss, stats = fat_mlm_loss(model, STATES, STATE_LENGTHS, None, None, None, None, precomputed=True)
        diff = model.reconstruct.bias.detach() - torch.stack([STATES[0, 1], STATES[0, 2], STATES[0, 7], STATES[1, 4]])
        expected = diff.abs().mean() if kind == "l1" else diff.pow(2).mean()
        assert float(stats["masked_frames"]) == 4 and float(loss.detach()) == pytest.approx(float(expected), rel=1e-6)


def test_whisper_fat_mlm_mask_shares_and_whisper_text_ids(whisper_dir):
    """30% of the states in spans (state lengths: the cached ones, or ceil(mel frames / 2)); target tokens
    are Whisper's: only its text ids (below <|endoftext|>) are predicted or drawn at random."""
    model = _whisper_fat(whisper_dir).train()
    lengths = torch.randint(20, 300, (200,), generator=torch.Generator().manual_seed(3))
    cached = model.draw_masks(lengths, None, None, None, None, precomputed=True).speech
    assert cached.sum(1).tolist() == [round(0.3 * n) for n in lengths.tolist()]
    mel = model.draw_masks(lengths, None, None, None, None).speech
    assert mel.sum(1).tolist() == [round(0.3 * n) for n in ((lengths + 1) // 2).tolist()]
    eot = model.tgt_text_ids[1]
    tgt = torch.randint(0, eot, (200, 30), generator=torch.Generator().manual_seed(4))
    tgt[:, :3] = torch.tensor([eot + 3, eot + 7, eot + 11])  # a language, task and no-timestamps prefix
    tgt[:, -1] = eot
    m = model.draw_masks(None, None, None, tgt, torch.full((200,), 30)).tgt
    assert not m.predicted[:, :3].any() and not m.predicted[:, -1].any()
    assert float(m.predicted.sum()) / (200 * 26) == pytest.approx(0.15, abs=0.01)
    assert int(m.inputs[m.predicted].max()) < eot


def test_whisper_fat_mlm_identity_stack_hands_back_whisper_states_plus_the_segment(whisper_dir):
    """init identity, nothing masked: the speech part out of the stack is its input, Whisper's states (cached,
    or computed from the mel features) + the speech segment, whatever text is packed beside it; text parts are
    their embeddings * sqrt(D) + positions + segment."""
    model = _whisper_fat(whisper_dir)
    src, src_lengths = torch.randint(5, SRC_V, (2, 6)), torch.tensor([6, 3])
    seg = model.segments.weight
    for feats, lengths, precomputed in ((STATES, STATE_LENGTHS, True), (MELS, MEL_LENGTHS, False)):
        out = model(feats, lengths, src, src_lengths, precomputed=precomputed)
        states, n = (feats, lengths) if precomputed else model.speech_encoder.states(feats, lengths)
        x = out.parts["speech"][0]
        assert out.parts["speech"][1].tolist() == n.tolist()
        for b, k in enumerate(n.tolist()):
            assert torch.allclose(x[b, :k], states[b, :k] + seg[0], atol=1e-6)
        text = model.positions(model.src_embedding(src) * math.sqrt(32)) + seg[1]
        for b, k in enumerate(src_lengths.tolist()):
            assert torch.allclose(out.parts["src"][0][b, :k], text[b, :k], atol=1e-5)


def _trained_like(fat: WhisperFatMLM) -> WhisperFatMLM:
    """FAT-MLM with every stack tensor, segment and source embedding moved away from its initial value."""
    with torch.no_grad():
        for name, p in fat.named_parameters():
            if name.startswith(("stack.", "segments.", "src_embedding.")):
                p.add_(torch.randn_like(p) * 0.1)
        fat.src_embedding.weight[0].zero_()  # the padding row
    return fat


def test_fat_st_on_whisper_loads_fat_mlm_weights(whisper_dir, tmp_path):
    fat = _trained_like(_whisper_fat(whisper_dir))
    path = tmp_path / "fat.safetensors"
    save_checkpoint(path, {"model_config": asdict(fat.config), "model": fat.state_dict()})
    st = _fat_st_whisper(whisper_dir)
    with torch.no_grad():  # before: the identity stack and zero segments hand the decoder Whisper's states
        assert torch.equal(st.encode_speech(MELS, MEL_LENGTHS).x, st.speech_encoder(MELS, MEL_LENGTHS).x)
    decoder = {k: v.clone() for k, v in st.state_dict().items() if k.startswith("decoder.")}
    n = init_encoder_from(st, str(path), ("semantic.", "text_encoder."))
    own, src = st.state_dict(), fat.state_dict()
    stack = {k: v for k, v in src.items() if k.startswith("stack.")}
    assert stack and n == len(stack) + 2  # the stack, the segments, the source embedding
    assert all(torch.equal(own["semantic." + k], v) for k, v in stack.items())
    assert torch.equal(own["semantic.segments.weight"][0], src["segments.weight"][0])
    assert not own["semantic.segments.weight"][1].any()  # the source segment is in the embedding
    assert torch.allclose(
        own["text_encoder.embedding.weight"][1:],
        src["src_embedding.weight"][1:] + src["segments.weight"][1] / math.sqrt(32),
    )
    assert all(torch.equal(own[k], v) for k, v in decoder.items())  # Whisper's decoder (and LoRA) as built
    # FAT-ST's encoder is FAT-MLM's on one part, exactly
    tokens, lengths = torch.randint(5, SRC_V, (2, 6)), torch.tensor([6, 4])
    with torch.no_grad():
        assert torch.allclose(st.encode_text(tokens, lengths).x, fat(src=tokens, src_lengths=lengths).x, atol=1e-5)
        assert torch.allclose(st.encode_speech(MELS, MEL_LENGTHS).x, fat(MELS, MEL_LENGTHS).x, atol=1e-5)


def _whisper_experiment(tiny_data, base, save_dir, model: ModelConfig, stages, **train):
    cfg = tiny_config(tiny_data, save_dir, valid_decode=False, log_interval=1, lr=3e-3, warmup_updates=2, **train)
    cfg.model, cfg.data.tgt_lang = model, "de"
    cfg.train.stages = stages
    return cfg


def test_tiny_fat_mlm_on_whisper_pretrains_then_fat_st_fine_tunes_and_translates(tiny_data, whisper_dir, tmp_path):
    fat_dir, st_dir = tmp_path / "fat", tmp_path / "st"
    model = _whisper_cfg(
        whisper_dir, {"kind": "fat_mlm", "options": {"layers": 1, "init": "identity", "speech_span": 2}}
    )
    stages = [
        Stage(
            "fat", [TaskData("fat", {"fat_mlm": 1.0}), TaskData("fat_text", {"fat_mlm": 1.0}, data_dir=str(tiny_data))]
        )
    ]
    cfg = _whisper_experiment(
        tiny_data,
        whisper_dir,
        fat_dir,
        model,
        stages,
        max_updates=12,
        save_interval_updates=12,
        validate_interval_updates=4,
    )
    state = run_training(cfg)
    assert state.step == 12 and math.isfinite(state.best_loss)
    log = [json.loads(x) for x in (fat_dir / "train_log.jsonl").read_text().splitlines()]
    valid = [r["valid_loss"] for r in log if r["type"] == "valid"]  # eval masks are fixed: comparable losses
    print("fat-mlm (whisper) dev losses:", [round(v, 3) for v in valid])
    assert len(valid) == 3 and valid[0] > valid[1] > valid[2]
    assert all(r["fat_fat_mlm_masked_frames"] > 0 and r["fat_fat_mlm_speech"] > 0 for r in log if r["type"] == "train")
    key, _ = cache_key(build(cfg.model).speech_encoder, frontend_for(cfg).settings)  # its states were cached
    assert {p.name for p in (tiny_data / "encoder_cache" / key).glob("*.index.npz")} == {
        "train.index.npz",
        "dev.index.npz",
    }

    cfg = _whisper_experiment(
        tiny_data,
        whisper_dir,
        st_dir,
        _whisper_cfg(
            whisper_dir,
            {"kind": "xstnet", "options": {"layers": 1, "init": "identity", "audio_tag": False, "segments": True}},
            text_encoder={"embed_only": True},
            decoder={"finetune": "lora"},
        ),
        [Stage("st+mt", [TaskData("st"), TaskData("mt")])],
        max_updates=4,
        save_interval_updates=4,
        validate_interval_updates=4,
        init_encoder_from=str(fat_dir / "checkpoint_last.safetensors"),
        init_prefixes=("semantic.", "text_encoder."),
    )
    state = run_training(cfg)
    assert state.step == 4 and math.isfinite(state.best_loss)
    lm = load_model(st_dir / "checkpoint_last.safetensors")
    assert lm.model.config.semantic.options["segments"] is True and lm.tokenizer.kind == "whisper"
    (result,) = translate(lm, [record_audio(read_manifest(tiny_data / "dev.jsonl")[0], tiny_data)], beam=2)
    assert isinstance(result.text, str) and len(result.nbest) == 1


def test_fat_mlm_is_no_translator_and_no_semantic_layer():
    """FAT-MLM has its own builder (speechmt.models.build picks it); build_model builds Translators only."""
    from speechmt.models import build_model
    from speechmt.models.semantic import SEMANTICS

    cfg = preset("tiny", tgt_vocab_size=TGT_V, src_vocab_size=SRC_V, semantic={"kind": "fat_mlm"})
    assert "fat_mlm" not in SEMANTICS and isinstance(build(cfg), FatMLM)
    with pytest.raises(ValueError, match="semantic 'fat_mlm' names a pretraining model, not a Translator"):
        build_model(cfg)
