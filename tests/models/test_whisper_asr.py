"""The whisper_asr encoder (a cascade's ASR and bridge: searchable hidden intermediates): Whisper's greedy transcript
(its search: speechmt.decoding.transcribe) and its decoder's states, checked against transformers'
WhisperForConditionalGeneration run teacher-forced on that transcript."""

import numpy as np
import pytest
import torch

from speechmt.decoding.transcribe import SEARCH, beam_tokens, beam_transcript, greedy_transcript
from speechmt.frontend.whisper_mel import WhisperMelConfig, whisper_log_mel
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig
from speechmt.models.encoders.whisper_asr import whisper_asr_encoder_from_hf
from speechmt.models.hf_whisper import load_hf_whisper, whisper_asr_prompt
from tests.lm_helpers import LM_RESOLVED, tiny_lm_dir
from tests.whisper_helpers import tiny_whisper_dir


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper_asr"), d_model=32)


@pytest.fixture(scope="module")
def hf(whisper_dir):
    return load_hf_whisper(str(whisper_dir), {}).eval()


@pytest.fixture(scope="module")
def asr(hf):
    return whisper_asr_encoder_from_hf(hf, 48, whisper_asr_prompt(hf, "en"), transcription=SEARCH).eval()


def _mels(seconds=(1.3, 0.7, 2.05), pad=30):
    """Waves of `seconds`, their features padded to `pad` s, zero-padded to the longest: (B, T, 80), lengths (B,)."""
    rng = np.random.RandomState(0)
    waves = [
        (
            0.3 * np.sin(2 * np.pi * (150 + 200 * i) * np.arange(int(s * 16000)) / 16000)
            + 0.05 * rng.randn(int(s * 16000))
        ).astype(np.float32)
        for i, s in enumerate(seconds)
    ]
    feats = [whisper_log_mel(w, WhisperMelConfig(pad_seconds=pad)) for w in waves]
    lengths = torch.tensor([len(f) for f in feats])
    mels = torch.zeros(len(feats), int(lengths.max()), 80)
    for i, f in enumerate(feats):
        mels[i, : len(f)] = f
    return mels, lengths


def _greedy(asr, memory, memory_lengths):
    """speechmt.decoding.transcribe's greedy search as a tuple: (ids, states (B, U, H), lengths (B,), first (B, H))."""
    found = greedy_transcript(asr, memory, memory_lengths)
    return found.ids, found.states, found.lengths, found.first


def _beam(asr, memory, memory_lengths):
    """As `_greedy`, by beam search (asr.beam)."""
    found = beam_transcript(asr, memory, memory_lengths)
    return found.ids, found.states, found.lengths, found.first


def _banned(logits: torch.Tensor, step: int, eos: int) -> torch.Tensor:
    logits = logits.clone()
    logits[eos + 1 :] = float("-inf")
    if step == 0:
        logits[eos] = float("-inf")
        logits[220] = float("-inf")
    return logits


@torch.no_grad()
def test_the_search_and_its_states_equal_whisper_run_teacher_forced_on_its_transcript(hf, asr):
    mels, lengths = _mels()
    memory, memory_lengths = asr.encoder.states(mels, lengths)
    ids, states, token_lengths, first = _greedy(asr, memory, memory_lengths)
    assert token_lengths.tolist() == [len(i) for i in ids] and min(token_lengths) >= 1
    assert states.shape == (3, int(token_lengths.max()), 32)
    prompt, eos = list(asr.prompt), asr.eos_id
    assert prompt == [hf.config.decoder_start_token_id]  # the tiny model has no generation config
    for row, tokens in enumerate(ids):
        out = hf(
            input_features=mels[row : row + 1].transpose(1, 2),
            decoder_input_ids=torch.tensor([prompt + tokens]),
            output_hidden_states=True,
        )
        logits, hidden = out.logits[0], out.decoder_hidden_states[-1][0]  # after the decoder's final LayerNorm
        p = len(prompt)
        greedy = [int(_banned(logits[p - 1 + i], i, eos).argmax()) for i in range(len(tokens) + 1)]
        stopped = len(tokens) == asr.max_tokens or greedy[-1] == eos
        assert greedy[:-1] == tokens and stopped
        torch.testing.assert_close(states[row, : len(tokens)], hidden[p : p + len(tokens)], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(first[row], hidden[p - 1], atol=1e-4, rtol=1e-4)
        assert states[row, len(tokens) :].abs().max() == 0 if len(tokens) < states.size(1) else True


@torch.no_grad()
def test_an_utterance_alone_gets_what_it_gets_in_a_batch(asr):
    mels, lengths = _mels()
    batch, batch_lengths = asr.states(mels, lengths)
    for row in range(3):
        alone, alone_length = asr.states(mels[row : row + 1], lengths[row : row + 1])
        n = int(alone_length)
        assert n == int(batch_lengths[row])
        torch.testing.assert_close(batch[row, :n], alone[0, :n], atol=1e-5, rtol=1e-5)
    out = asr.project(batch, batch_lengths)  # the prompt's last state first, then one per token
    assert out.x.shape == (3, batch.size(1) - 1, 48) and out.lengths.tolist() == (batch_lengths - 1).tolist()
    torch.testing.assert_close(asr.project(8 * batch + 1, batch_lengths).x, out.x, atol=1e-4, rtol=1e-4)  # normalised


@torch.no_grad()
def test_a_shorter_window_batched_with_a_longer_clip_gets_what_it_gets_alone(asr):
    mels, lengths = _mels((1.3, 12.5, 0.7), pad=10)  # 1000, 1250 and 1000 frames
    assert lengths.tolist() == [1000, 1250, 1000] and mels.size(1) == 1250
    batch, batch_lengths = asr.states(mels, lengths)
    for row in range(3):
        n = int(lengths[row])
        alone, alone_length = asr.states(mels[row : row + 1, :n], lengths[row : row + 1])
        assert int(alone_length) == int(batch_lengths[row])
        torch.testing.assert_close(batch[row, : int(alone_length)], alone[0], atol=1e-5, rtol=1e-5)


def test_the_search_fits_the_decoder_positions_and_needs_padded_input(asr):
    assert asr.max_tokens == 64 - len(asr.prompt) - 1  # the tiny model's 64 learned positions
    mels, lengths = _mels((1.0, 1.0), pad=0)
    with pytest.raises(
        ValueError,
        match=r"padded to at least 10 s \(1000 mel frames\), got 100: set "
        "data.whisper_pad_seconds from 10 to 30",
    ):
        asr.states(mels, lengths)
    assert asr.states_frozen() and not any(p.requires_grad for p in asr.decoder.parameters())
    assert {k.split(".")[0] for k in asr.states_part()} == {"encoder", "decoder", "prompt"}


def test_the_prompt_comes_from_the_generation_config_for_the_source_language(hf):
    g = hf.generation_config
    saved = (getattr(g, "lang_to_id", None), getattr(g, "task_to_id", None), getattr(g, "no_timestamps_token_id", None))
    try:
        g.lang_to_id, g.task_to_id, g.no_timestamps_token_id = {"<|en|>": 7, "<|de|>": 8}, {"transcribe": 11}, 16
        assert whisper_asr_prompt(hf, "de") == (hf.config.decoder_start_token_id, 8, 11, 16)
        with pytest.raises(ValueError, match="asr_language 'xx'"):
            whisper_asr_prompt(hf, "xx")
    finally:
        g.lang_to_id, g.task_to_id, g.no_timestamps_token_id = saved


def test_a_translator_on_whisper_asr_trains_only_the_projection_before_its_lm(whisper_dir, tmp_path):
    lm = tiny_lm_dir(tmp_path / "lm", hidden=48)
    cfg = ModelConfig(
        encoder={"kind": "whisper_asr", "name_or_path": str(whisper_dir), "finetune": "frozen"},
        decoder={"kind": "lm", "name_or_path": str(lm), "finetune": "frozen"},
        n_heads=2,
    )
    model = build_model(cfg, transcription=SEARCH, resolved=LM_RESOLVED)
    hf = {k: model.resolved[k] for k in ("encoder.hf_config", "decoder.hf_config")}  # the complete HF configs
    assert model.resolved == {**LM_RESOLVED, "encoder.asr_prompt": list(model.speech_encoder.prompt), **hf}
    assert hf["encoder.hf_config"]["model_type"] == "whisper" and model.config.encoder.hf_config == {}
    assert model.config.d_model == 48
    trained = {n.split(".")[1] for n, p in model.named_parameters() if p.requires_grad}
    assert trained == {"proj"}
    assert model.config.encoder.cacheable_states
    with pytest.raises(ValueError, match="whisper_asr needs encoder.finetune frozen"):
        ModelConfig(encoder={"kind": "whisper_asr", "name_or_path": str(whisper_dir), "finetune": "lora"})
    with pytest.raises(ValueError, match="unknown encoder.asr_embed 'words'; expected states, lm or text"):
        ModelConfig(
            encoder={
                "kind": "whisper_asr",
                "name_or_path": str(whisper_dir),
                "finetune": "frozen",
                "asr_embed": "words",
            }
        )
    with pytest.raises(ValueError, match="asr_embed lm needs decoder 'lm'"):
        build_model(
            ModelConfig(
                encoder={
                    "kind": "whisper_asr",
                    "name_or_path": str(whisper_dir),
                    "finetune": "frozen",
                    "asr_embed": "lm",
                },
                tgt_vocab_size=10,
                n_heads=2,
            )
        )


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return tiny_lm_dir(tmp_path_factory.mktemp("tiny_lm_asr"), hidden=48)


@pytest.fixture(scope="module")
def soft(whisper_dir, lm_dir):
    """A Translator whose whisper_asr encoder hands the LM soft embeddings of Whisper's tokens (asr_embed lm)."""
    cfg = ModelConfig(
        encoder={"kind": "whisper_asr", "name_or_path": str(whisper_dir), "finetune": "frozen", "asr_embed": "lm"},
        decoder={"kind": "lm", "name_or_path": str(lm_dir), "finetune": "frozen"},
        n_heads=2,
    )
    return build_model(cfg, transcription=SEARCH, resolved=LM_RESOLVED).eval()


def test_each_whisper_piece_maps_to_the_lm_tokens_of_its_text(whisper_dir, lm_dir):
    from tokenizers import Tokenizer

    from speechmt.models.encoders.whisper_handover import MAX_PIECE_TOKENS, whisper_lm_pieces
    from speechmt.tokenizers.lm import LMTokenizer

    whisper = Tokenizer.from_file(str(whisper_dir / "tokenizer.json"))
    eos = whisper.token_to_id("<|endoftext|>")
    lm = LMTokenizer.from_pretrained(str(lm_dir), role="source")
    pieces = whisper_lm_pieces(lambda i: whisper.decode([i]), lm.text_ids, eos)
    assert pieces.shape == (eos + 1, MAX_PIECE_TOKENS) and (pieces[eos] == -1).all()
    for i in (0, 100, whisper.token_to_id("Ġthe"), eos - 1):
        want = lm.text_ids(whisper.decode([i]))[:MAX_PIECE_TOKENS]
        assert pieces[i, : len(want)].tolist() == want and (pieces[i, len(want) :] == -1).all()


@torch.no_grad()
def test_soft_tokens_are_whisper_own_distribution_over_each_token_times_the_lm_piece_embeddings(soft):
    from speechmt.models.encoders.whisper_handover import TOP_K

    asr = soft.speech_encoder
    mels, lengths = _mels()
    states, n = asr.states(mels, lengths)
    memory, memory_lengths = asr.encoder.states(mels, lengths)
    ids = _greedy(asr, memory, memory_lengths)[0]
    assert (n - 1).tolist() == [len(i) for i in ids]  # the prompt's last state comes first
    before = states[:, :-1]
    out = asr.project(states, n)
    assert out.lengths.tolist() == [len(i) for i in ids] and out.x.size(-1) == 48
    table = soft.decoder.embed.weight * soft.decoder.embed.embed_scale  # Gemma scales its input embeddings
    for row, tokens in enumerate(ids):
        for t, token in enumerate(tokens):
            logits = asr.decoder.output(before[row, t]).float()
            logits[asr.eos_id :] = float("-inf")
            if t == 0 and 220 < asr.eos_id:
                logits[220] = float("-inf")
            assert int(logits.argmax()) == token  # the state before a token is the one that chose it
            top, cand = logits.topk(TOP_K)
            pieces = [asr._pieces[0].pieces[c][asr._pieces[0].pieces[c] >= 0] for c in cand]
            vectors = torch.stack([table[p].mean(0) if len(p) else torch.zeros(48) for p in pieces])
            want = top.softmax(-1) @ vectors
            torch.testing.assert_close(out.x[row, t], want, atol=1e-4, rtol=1e-4)  # the projection starts at zero


def _score(hf, mels, prompt, tokens, eos, ended):
    """Whisper's (transformers') summed log-probability of `tokens` (and <|endoftext|> when `ended`) after `prompt`,
    over their count: the search's score of a hypothesis."""
    logits = hf(input_features=mels.transpose(1, 2), decoder_input_ids=torch.tensor([prompt + tokens])).logits[0]
    p, written = len(prompt), tokens + [eos] * ended
    logp = [_banned(logits[p - 1 + i], i, eos).log_softmax(-1)[t] for i, t in enumerate(written)]
    return float(sum(logp)) / len(written)


@torch.no_grad()
def test_a_beam_of_one_is_the_greedy_search_and_its_states_are_the_teacher_forced_ones(asr):
    mels, lengths = _mels()
    memory, memory_lengths = asr.encoder.states(mels, lengths)
    greedy = _greedy(asr, memory, memory_lengths)
    asr.beam = 1
    assert beam_tokens(asr, memory, memory_lengths) == greedy[0]
    ids, states, token_lengths, first = _beam(asr, memory, memory_lengths)
    assert ids == greedy[0] and token_lengths.tolist() == greedy[2].tolist()
    torch.testing.assert_close(states, greedy[1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(first, greedy[3], atol=1e-4, rtol=1e-4)


@torch.no_grad()
def test_a_wider_beam_finds_a_transcript_whisper_scores_at_least_as_high_and_batches_as_alone(hf, asr):
    mels, lengths = _mels()
    memory, memory_lengths = asr.encoder.states(mels, lengths)
    greedy = _greedy(asr, memory, memory_lengths)[0]
    try:
        asr.beam = 4
        beam = beam_tokens(asr, memory, memory_lengths)
        for row in range(3):
            assert beam_tokens(asr, memory[row : row + 1], memory_lengths[row : row + 1]) == [beam[row]]
        states, states_lengths = asr.states(mels, lengths)
        assert states_lengths.tolist() == [1 + len(b) for b in beam]  # the prompt's last state first
    finally:
        asr.beam = 1
    prompt, eos = list(asr.prompt), asr.eos_id
    for row in range(3):  # beam search may prune greedy's path, but on these clips it finds better
        score = [
            _score(hf, mels[row : row + 1], prompt, h, eos, len(h) < asr.max_tokens) for h in (beam[row], greedy[row])
        ]
        assert score[0] >= score[1] - 1e-4
    assert asr.states_part()["prompt"].tolist()[-1] != 4  # greedy keys are those of before the beam


def test_the_beam_is_a_checked_option():
    from speechmt.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="asr_beam.*expected an integer from 1 to 16"):
        load_config(None, ["model.encoder.asr_beam=0"])


def test_byte_level_pieces_give_back_the_bytes_of_the_text_they_encode(whisper_dir):
    from tokenizers import Tokenizer

    from speechmt.models.encoders.whisper_handover import piece_bytes

    whisper = Tokenizer.from_file(str(whisper_dir / "tokenizer.json"))
    eos = whisper.token_to_id("<|endoftext|>")
    table = piece_bytes([whisper.id_to_token(i) for i in range(eos)])
    for text in (" Größe über die Straße", " the cat sat on the mat", " ½ café ñ\t€"):
        ids = whisper.encode(text, add_special_tokens=False).ids
        assert b"".join(table[i] for i in ids) == text.encode("utf-8")
    whole = [i for i in range(eos) if "\ufffd" not in whisper.decode([i])]
    assert len(whole) > 150 and all(table[i].decode("utf-8") == whisper.decode([i]) for i in whole)


def _words(text):
    """A stand-in LM tokenizer: one token per space-led word (id = its length), with character offsets."""
    import re

    spans = [m.span() for m in re.finditer(r" ?[^ ]+| +$", text)]
    return [e - s for s, e in spans], spans


def test_each_lm_token_of_the_retokenised_transcript_reads_the_piece_that_completes_it():
    from speechmt.models.encoders.whisper_handover import TranscriptTokens

    pieces = [b" Gr\xc3", b"\xb6\xc3\x9fe", b" \xc3\xbc", b"ber", b"  ", b"x"]
    text = TranscriptTokens(pieces, _words, decoder=None, fallback=99)
    assert text([0, 1, 2, 3]) == ([6, 5], [1, 3])  # " Größe" ends in piece 1 (inside which "ö" completes), " über" in 3
    assert text([4, 0, 1]) == ([6], [2])  # leading spaces stripped: " Größe" as the LM reads source text
    assert text([2, 3, 4, 5]) == ([5, 2], [1, 3])  # " über" then " x" (the double space becomes the LM's single one)
    assert text([4]) == ([99], [0])  # whitespace alone: the fallback token
    assert text([0]) == ([4], [0])  # a transcript ending inside a character: "\ufffd" closes it in its last piece


@pytest.fixture(scope="module")
def retok(whisper_dir, lm_dir):
    """A Translator whose whisper_asr encoder hands the LM its transcript as the LM's own text (asr_embed text)."""
    cfg = ModelConfig(
        encoder={"kind": "whisper_asr", "name_or_path": str(whisper_dir), "finetune": "frozen", "asr_embed": "text"},
        decoder={"kind": "lm", "name_or_path": str(lm_dir), "finetune": "frozen"},
        n_heads=2,
        text_encoder={"embed_only": True, "embeddings": "lm"},
        src_vocab_size=10,
    )
    return build_model(cfg, transcription=SEARCH, resolved=LM_RESOLVED).eval()


@torch.no_grad()
def test_the_text_hand_over_starts_as_the_lm_reading_the_transcript_as_source_text(retok, whisper_dir, lm_dir):
    from tokenizers import Tokenizer

    from speechmt.tokenizers.lm import LMTokenizer

    asr = retok.speech_encoder
    assert asr.embed == "text" and asr.hidden_size == 32 + 2
    mels, lengths = _mels()
    states, n = asr.states(mels, lengths)
    memory, memory_lengths = asr.encoder.states(mels, lengths)
    ids, whisper_states, _, _ = _greedy(asr, memory, memory_lengths)
    whisper = Tokenizer.from_file(str(whisper_dir / "tokenizer.json"))
    lm = LMTokenizer.from_pretrained(str(lm_dir), role="source")
    out = asr.project(states.half().float(), n)  # as read back from the float16 encoder cache
    for row, tokens in enumerate(ids):
        source = lm.encode(whisper.decode(tokens))  # what the LM's MT reads for this transcript
        assert int(n[row]) == len(source) and states.size(-1) == 34
        torch.testing.assert_close(
            out.x[row, : len(source)], retok.encode_text(torch.tensor([source]), torch.tensor([len(source)])).x[0]
        )
        assert out.x[row, len(source) :].abs().sum() == 0
        _, pos = asr._text[0](tokens)  # each LM token's state: Whisper's, after the piece completing it
        torch.testing.assert_close(states[row, : len(pos), :-2], whisper_states[row, pos])
    alone = asr.states(mels[1:2], lengths[1:2])
    torch.testing.assert_close(alone[0][0, : int(alone[1])], states[1, : int(n[1])], atol=1e-4, rtol=1e-4)
    assert retok.config.encoder.cacheable_states
    assert asr.states_part()["prompt"].tolist()[-1] == 2  # its own cache key (states 0, lm 1)


def test_the_text_hand_over_needs_an_lm_decoder(whisper_dir):
    with pytest.raises(ValueError, match="asr_embed text needs decoder 'lm'"):
        build_model(
            ModelConfig(
                encoder={
                    "kind": "whisper_asr",
                    "name_or_path": str(whisper_dir),
                    "finetune": "frozen",
                    "asr_embed": "text",
                },
                tgt_vocab_size=10,
                n_heads=2,
            )
        )


@torch.no_grad()
def test_the_state_before_a_token_is_the_one_whose_output_layer_chose_it(hf):
    mels, lengths = _mels()
    encoders = {
        s: whisper_asr_encoder_from_hf(hf, 48, whisper_asr_prompt(hf, "en"), state=s, transcription=SEARCH).eval()
        for s in ("after", "before", "both")
    }
    states, state_lengths, ids = encoders["before"].search(mels, lengths)
    assert state_lengths.tolist() == [1 + len(i) for i in ids]  # the prompt's last state, then one per token
    asr = encoders["before"]
    for row, tokens in enumerate(ids):  # the greedy search's choice at each state before a token is that token
        logits = asr.decoder.output(states[row, : len(tokens)])
        assert [int(_banned(row, i, asr.eos_id).argmax()) for i, row in enumerate(logits)] == tokens
    norm = torch.nn.functional.layer_norm
    before, after = norm(states[:, :-1], (32,)), norm(states[:, 1:], (32,))
    assert encoders["both"].proj.in_features == 64 and encoders["after"].proj.in_features == 32
    for state, inputs in (("after", after), ("before", before), ("both", torch.cat([before, after], -1))):
        out = encoders[state].project(states, state_lengths)
        assert out.lengths.tolist() == [len(i) for i in ids]
        want = (
            encoders[state]
            .proj(inputs)
            .masked_fill(torch.arange(inputs.size(1))[None, :, None] >= out.lengths[:, None, None], 0.0)
        )
        torch.testing.assert_close(out.x, want)
    with pytest.raises(ValueError, match="unknown whisper_asr state 'middle'"):
        whisper_asr_encoder_from_hf(hf, 48, whisper_asr_prompt(hf, "en"), state="middle", transcription=SEARCH)


def test_the_state_choice_is_a_checked_option_of_the_states_hand_over(whisper_dir):
    frozen = {"kind": "whisper_asr", "name_or_path": str(whisper_dir), "finetune": "frozen"}
    with pytest.raises(ValueError, match="unknown encoder.asr_state 'middle'; expected after, before or both"):
        ModelConfig(encoder=frozen | {"asr_state": "middle"})
    with pytest.raises(ValueError, match="encoder.asr_state before needs encoder.asr_embed states"):
        ModelConfig(encoder=frozen | {"asr_embed": "lm", "asr_state": "before"})
    with pytest.raises(ValueError, match="encoder.asr_state: not an option of encoder 'whisper'"):
        ModelConfig(encoder={"kind": "whisper", "name_or_path": str(whisper_dir), "asr_state": "both"})
    assert ModelConfig(encoder=frozen | {"asr_state": "both"}).encoder.asr_state == "both"


def test_the_states_and_lm_hand_overs_share_one_cache_key(asr, soft, hf):
    """Both cache the prompt's last state, then one per token: one search serves either (and every asr_state)."""
    key = soft.speech_encoder.states_part()["prompt"]
    assert key.tolist()[-1] == 1  # the lm layout's code
    for state in ("after", "before", "both"):
        other = whisper_asr_encoder_from_hf(hf, 48, whisper_asr_prompt(hf, "en"), state=state, transcription=SEARCH)
        assert torch.equal(other.states_part()["prompt"], key) and other.layout == "lm"
    assert torch.equal(asr.states_part()["prompt"], key)


def test_an_encoder_built_without_its_search_reads_cached_states_and_says_so_in_one_line(hf, asr):
    bare = whisper_asr_encoder_from_hf(hf, 48, whisper_asr_prompt(hf, "en")).eval()
    bare.load_state_dict(asr.state_dict())
    mels, lengths = _mels((1.0,))
    states, n = asr.states(mels, lengths)
    assert torch.equal(bare.project(states, n).x, asr.project(states, n).x)
    with pytest.raises(ValueError, match="built without its search: build the model with transcription="):
        bare.states(mels, lengths)
