"""Simultaneous translation: wait-k's commit schedule and delays, windows that bound the encoder's input,
equivalence with offline greedy search when the policy waits to the end, AlignAtt's need for cross-attention,
and the command line (a file, standard input, evaluate --simultaneous with a quality-latency table)."""

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import speechmt.decoding.simultaneous as simultaneous
import speechmt.evaluation.simultaneous_eval as simultaneous_eval
from speechmt.audio import read_audio
from speechmt.cli import main
from speechmt.decoding.alignatt import CrossAttention, SourceAttention, alignment_heads, attends_to_last
from speechmt.decoding.search import LOGIT_FILTERS, search, start_tokens
from speechmt.decoding.simultaneous import (
    EncoderMemo,
    SimultaneousConfig,
    SimultaneousError,
    _blocks_of,
    default_k,
    simultaneous_translate,
    translate_stream,
)
from speechmt.decoding.translate import encode_audio, load_model
from speechmt.evaluation.metrics import Score
from speechmt.evaluation.report import EvalReport
from speechmt.evaluation.simultaneous_eval import (
    evaluate_simultaneous,
    evaluate_simultaneous_settings,
    latency_row,
    policy_label,
    quality_latency_table,
)
from speechmt.models.hf_whisper import WhisperDecoderConfig
from speechmt.models.lm_decoder import lm_decoder, load_causal_lm
from tests.conftest import ASSETS
from tests.helpers import two_update_st
from tests.lm_helpers import tiny_lm_dir, train_whisper_lm
from tests.whisper_helpers import tiny_whisper_dir

WAV = ASSETS / "mustc/en-de/data/dev/wav/ted_3.wav"


@pytest.fixture(scope="module")
def checkpoint(tiny_data, tmp_path_factory) -> str:
    """A tiny ST model after 2 updates (it has a cross-attention decoder)."""
    return two_update_st(tiny_data, tmp_path_factory.mktemp("simul_exp"))


@pytest.fixture(scope="module")
def lm(checkpoint):
    return load_model(checkpoint)


def _exactly(lm, n: int):
    """Greedy options that write exactly n tokens (no EOS before, EOS forced at n)."""
    return lm.decode_options(1, min_len=n, max_len_b=n)


def test_blocks_are_reblocked_into_steps_and_the_last_is_flagged():
    out = list(_blocks_of([np.ones(5), np.ones(7), np.ones(1)], 4))
    assert [(len(b), last) for b, last in out] == [(4, False), (4, False), (4, False), (1, True)]
    assert [(len(b), last) for b, last in _blocks_of([np.ones(8)], 4)] == [(4, False), (4, True)]


def test_wait_k_writes_one_token_per_step_after_k_steps(lm):
    wave = np.random.default_rng(0).normal(0, 0.1, 16000).astype(np.float32)  # 1 s: 10 steps of 100 ms
    cfg = SimultaneousConfig("wait-k", k=2, step_ms=100)
    commits = list(simultaneous_translate(lm, [wave], cfg, _exactly(lm, 6)))
    assert [len(c.tokens) for c in commits] == [1] * 6
    assert [c.delay_ms for c in commits] == [200.0, 300.0, 400.0, 500.0, 600.0, 700.0]
    assert all(c.elapsed_ms > c.delay_ms for c in commits)
    late = list(simultaneous_translate(lm, [wave], SimultaneousConfig("wait-k", k=8, step_ms=100), _exactly(lm, 6)))
    assert [(len(c.tokens), c.delay_ms) for c in late] == [(1, 800.0), (1, 900.0), (4, 1000.0)]  # the rest at the end


def test_windows_bound_the_encoder_input(lm, monkeypatch):
    seen = []
    encode = simultaneous.encode_audio
    monkeypatch.setattr(simultaneous, "encode_audio", lambda m, waves: seen.append(len(waves[0])) or encode(m, waves))
    wave = np.random.default_rng(1).normal(0, 0.1, 19200).astype(np.float32)  # 1.2 s
    cfg = SimultaneousConfig("wait-k", k=1, step_ms=100, max_seconds=0.5)
    commits = list(simultaneous_translate(lm, [wave], cfg, _exactly(lm, 3)))
    assert max(seen) <= 8000 and seen.count(1600) == 3  # never more than the 0.5 s window; three windows
    assert sum(len(c.tokens) for c in commits) == 9  # three windows of 3 tokens: [0, 0.5), [0.5, 1.0), [1.0, 1.2)
    firsts = [c for c in commits if c.text.startswith(" ")]
    assert [c.delay_ms for c in commits][:3] == [100.0, 200.0, 300.0] and [c.delay_ms for c in firsts][-2:] == [
        600.0,
        1100.0,
    ]


def test_a_long_enough_window_ends_at_a_pause(lm):
    noise = np.random.default_rng(2).normal(0, 0.1, 33600).astype(np.float32)
    wave = np.concatenate([noise[:16000], np.zeros(8000, np.float32), noise[16000:]])  # 1 s, 0.5 s quiet, 1.1 s
    cfg = SimultaneousConfig("wait-k", k=1, step_ms=100, pause_after_seconds=0.8, min_pause_ms=300)
    commits = list(simultaneous_translate(lm, [wave], cfg, _exactly(lm, 3)))
    # 0.3 s after the last voiced frame (it ends at 1.015 s) comes with the step ending at 1.4 s: the first
    # window ends there and the second starts with the next step; it runs to the end (1.2 s, but no pause)
    assert [(len(c.tokens), c.delay_ms) for c in commits] == [
        (1, 100.0),
        (1, 200.0),
        (1, 300.0),
        (1, 1500.0),
        (1, 1600.0),
        (1, 1700.0),
    ]
    assert commits[3].text.startswith(" ") and not any(c.text.startswith(" ") for c in commits[4:])
    alone = SimultaneousConfig("wait-k", k=1, step_ms=100, pause_after_seconds=0)  # windows end when full only
    assert [c.delay_ms for c in simultaneous_translate(lm, [wave], alone, _exactly(lm, 3))] == [100.0, 200.0, 300.0]


@pytest.mark.parametrize(
    "cfg", [SimultaneousConfig("wait-k", k=100, step_ms=200), SimultaneousConfig("alignatt", k=10000, step_ms=200)]
)
def test_a_policy_that_waits_to_the_end_equals_offline_greedy_search(lm, cfg):
    wave = read_audio(WAV)
    options = lm.decode_options(1, max_len_b=12)
    with torch.no_grad():
        offline = lm.tokenizer.decode(search(lm.model, encode_audio(lm, [wave]), options)[0][0])
    result = translate_stream(lm, wave, cfg, options)
    assert result.text == offline.strip() and result.source_ms == pytest.approx(len(wave) / 16)
    assert all(c.delay_ms == pytest.approx(len(wave) / 16) for c in result.commits)


class _NoRepeat:
    """A toy filter: never the token just generated (it reads the tokens so far)."""

    def apply(self, lprobs, tokens, max_lens):
        if tokens.size(1):
            lprobs.scatter_(1, tokens[:, -1:], float("-inf"))
        return lprobs


def test_a_named_filter_reads_the_tokens_written_so_far_and_equals_offline(lm, monkeypatch):
    monkeypatch.setitem(LOGIT_FILTERS, "no_repeat", lambda options: _NoRepeat())
    wave = read_audio(WAV)
    options = replace(lm.decode_options(1, max_len_b=12), filters=("no_repeat",))
    with torch.no_grad():
        offline = search(lm.model, encode_audio(lm, [wave]), options)[0][0]
    result = translate_stream(lm, wave, SimultaneousConfig("wait-k", k=100, step_ms=200), options)
    assert result.text == lm.tokenizer.decode(offline).strip() and len(offline) > 1
    assert all(a != b for a, b in zip(offline, offline[1:]))


def test_a_tail_beam_over_the_whole_input_equals_offline_beam_search(lm):
    wave = read_audio(WAV)
    with torch.no_grad():
        offline = lm.tokenizer.decode(
            search(lm.model, encode_audio(lm, [wave]), lm.decode_options(4, max_len_b=12))[0][0]
        )
    cfg = SimultaneousConfig("wait-k", k=100, step_ms=200, tail_beam=4)
    result = translate_stream(lm, wave, cfg, lm.decode_options(1, max_len_b=12))
    assert result.text == offline.strip() and all(c.delay_ms == pytest.approx(len(wave) / 16) for c in result.commits)


def test_alignatt_writes_before_the_end_and_restores_the_decoder(lm):
    wave = read_audio(WAV)
    result = translate_stream(lm, wave, SimultaneousConfig("alignatt", k=1, step_ms=200), _exactly(lm, 8))
    assert sum(len(c.tokens) for c in result.commits) == 8
    assert all("attend" not in vars(layer.cross_attn) for layer in lm.model.decoder.layers)


def _heads(peaks: list[int], frames: int = 10) -> torch.Tensor:
    """Attention of one head per entry, (N, frames): 0.5 on its peak frame, the rest spread evenly."""
    w = torch.full((len(peaks), frames), 0.5 / (frames - 1))
    w[torch.arange(len(peaks)), torch.tensor(peaks)] = 0.5
    return w


def test_alignatt_waits_when_half_the_heads_look_at_the_last_f_frames():
    # 10 frames, f = 3: frames 7, 8, 9 are the last. Two of four heads there: wait; one of four: write.
    assert attends_to_last(_heads([0, 2, 8, 9]), 10, 3)
    assert not attends_to_last(_heads([0, 2, 5, 9]), 10, 3)
    assert not attends_to_last(_heads([6, 6, 6, 6]), 10, 3) and attends_to_last(_heads([6, 6, 6, 6]), 10, 4)
    # one sink head with all its weight on frame 0 outvotes nothing: the mean of the weights would peak at
    # frame 0 (1.0 + 3 * 0.056 against 3 * 0.5 spread over frames 7, 8, 9) and write; the vote waits
    sink = torch.zeros(1, 10)
    sink[0, 0] = 1.0
    tracking = torch.cat([sink, _heads([7, 8, 9])])
    assert int(tracking.mean(0).argmax()) == 0 and attends_to_last(tracking, 10, 3)
    # padded frames past the real ones are not voted for: 8 real frames of 10, f = 2 -> frames 6, 7
    assert attends_to_last(_heads([9, 9, 7]), 8, 2) is False and attends_to_last(_heads([6, 7, 0]), 8, 2)


def test_alignatt_records_the_chosen_heads(lm):
    decoder = lm.model.decoder
    n_layers, n_heads = len(decoder.layers), decoder.layers[0].cross_attn.n_heads
    every = CrossAttention(decoder)  # no heads named: every head of the top half of the layers
    assert sum(len(h) for h in every.heads.values()) == (n_layers - n_layers // 2) * n_heads
    chosen = CrossAttention(decoder, [(0, 1), (n_layers - 1, 0)])
    enc = encode_audio(lm, [read_audio(WAV)])
    with torch.no_grad(), chosen.recording():
        lm.model.decode(torch.tensor([[lm.tokenizer.bos_id]]), enc, lm.model.new_cache())
    weights = chosen.take()
    assert weights.shape == (2, int(enc.lengths[0])) and torch.allclose(weights.sum(-1), torch.ones(2))
    assert chosen.weights == [] and all("attend" not in vars(layer.cross_attn) for layer in decoder.layers)
    with pytest.raises(SimultaneousError, match=r"no head \(0, 99\)"):
        CrossAttention(decoder, [(0, 99)])


def test_an_lm_decoders_source_attention_is_transformers_own(tmp_path):
    lm = load_causal_lm(str(tiny_lm_dir(tmp_path / "lm", layers=4)), {}).eval()
    decoder = lm_decoder(lm, list(range(4, 40)), [2, 5, 6])  # a prompt of 3 tokens, then the source
    memory = torch.randn(1, 7, lm.config.hidden_size)
    tokens = torch.tensor([[3, 9, 11]])
    recorder = SourceAttention(decoder)
    previous = lm.config._attn_implementation
    with torch.no_grad(), recorder.recording():
        decoder(tokens, memory, torch.tensor([7]), decoder.new_cache())
    weights = recorder.take()  # (2 top layers x 2 heads, 7 source + 3 target positions)
    assert weights.shape == (4, 10) and recorder.weights == [] and lm.config._attn_implementation == previous
    # the reference: transformers' own eager attention weights of the same sequence, last position, top layers
    lm.set_attn_implementation("eager")
    with torch.no_grad():
        x, mask, positions = decoder._first_inputs(decoder.embed(decoder.vocab[tokens]), memory, torch.tensor([7]), 1)
        out = lm.model(inputs_embeds=x, attention_mask=mask, position_ids=positions, output_attentions=True)
    lm.set_attn_implementation(previous)
    expected = torch.cat([a[0, :, -1, 3:] for a in out.attentions[2:]])
    assert torch.allclose(weights, expected, atol=1e-6)
    assert torch.all(weights.sum(-1) < 1)  # the prompt's share is left out


@pytest.fixture(scope="module")
def wasr_lm(tiny_data, tmp_path_factory):
    """A whisper_asr encoder (tiny random Whisper) into a tiny random LM decoder, one update: no cross-attention."""
    folder = tmp_path_factory.mktemp("simul_wasr")
    lm_dir = tiny_lm_dir(folder / "lm", hidden=48)
    whisper_dir = tiny_whisper_dir(folder / "whisper", d_model=32, seed=5)
    return load_model(str(train_whisper_lm(tiny_data, lm_dir, whisper_dir, "whisper_asr", folder / "exp")))


@pytest.mark.parametrize("model", ["lm", "wasr_lm"])
def test_a_tail_beam_continues_the_committed_tokens_with_the_best_tail(request, model, monkeypatch):
    lm = request.getfixturevalue(model)
    searched = []
    beam_search = simultaneous.beam_search
    monkeypatch.setattr(simultaneous, "beam_search", lambda m, enc, o: searched.append(o) or beam_search(m, enc, o))
    wave = np.random.default_rng(0).normal(0, 0.1, 16000).astype(np.float32)  # 10 steps of 100 ms
    options = _exactly(lm, 4)
    greedy = list(simultaneous_translate(lm, [wave], SimultaneousConfig("wait-k", k=7, step_ms=100), options))
    vocab = lm.model.decode(start_tokens(options, 1, torch.device("cpu")), encode_audio(lm, [wave])).size(-1)
    cfg = SimultaneousConfig("wait-k", k=7, step_ms=100, tail_beam=vocab)  # every one-token tail searched
    beam = list(simultaneous_translate(lm, [wave], cfg, options))
    assert [(c.tokens, c.delay_ms) for c in beam[:3]] == [(c.tokens, c.delay_ms) for c in greedy[:3]]
    assert [(len(c.tokens), c.delay_ms) for c in beam] == [(1, 700.0), (1, 800.0), (1, 900.0), (1, 1000.0)]
    # by hand: the tail token a maximising log p(a | committed) + log p(EOS | committed, a), over allowed tokens
    committed = [c.tokens[0] for c in beam[:3]]
    prefix = torch.cat([start_tokens(options, 1, torch.device("cpu")), torch.tensor([committed])], dim=1)
    tails = torch.arange(vocab)
    with torch.no_grad():
        enc = encode_audio(lm, [wave])
        first = lm.model.decode(prefix, enc)[0, -1].float().log_softmax(-1)  # (V,)
        rows = torch.cat([prefix.expand(vocab, -1), tails[:, None]], dim=1)
        wide = type(enc)(enc.x.expand(vocab, -1, -1), enc.lengths.expand(vocab))
        eos = lm.model.decode(rows, wide)[:, -1].float().log_softmax(-1)[:, options.eos_id]  # (V,)
    score = first + eos
    score[[options.pad_id, options.bos_id, options.eos_id, *options.suppress]] = float("-inf")
    assert beam[3].tokens == [int(score.argmax())]
    assert [(o.prefix, o.min_len, o.max_len_b) for o in searched] == [((*options.prefix, *committed), 1, 1)]
    assert policy_label(cfg) == f"wait-k, tail beam {vocab}" and policy_label(SimultaneousConfig()) == "wait-k"


def test_alignatt_on_an_lm_decoder_reads_its_source_attention(wasr_lm):
    wave = read_audio(WAV)
    assert default_k("alignatt", wasr_lm) == 2 and default_k("wait-k", wasr_lm) == 3
    options = wasr_lm.decode_options(1, max_len_b=8)
    with torch.no_grad():
        offline = wasr_lm.tokenizer.decode(search(wasr_lm.model, encode_audio(wasr_lm, [wave]), options)[0][0])
    waits = translate_stream(wasr_lm, wave, SimultaneousConfig("alignatt", k=10000, step_ms=400), options)
    assert waits.text == offline.strip() and all(c.delay_ms == pytest.approx(len(wave) / 16) for c in waits.commits)
    before = wasr_lm.model.decoder.lm.config._attn_implementation
    result = translate_stream(
        wasr_lm,
        wave,
        SimultaneousConfig("alignatt", k=1, step_ms=400),
        wasr_lm.decode_options(1, min_len=6, max_len_b=6),
    )
    assert sum(len(c.tokens) for c in result.commits) == 6
    assert wasr_lm.model.decoder.lm.config._attn_implementation == before


def test_whisper_alignment_heads_come_from_the_base_generation_config(tmp_path, lm):
    base = tmp_path / "whisper-x"
    base.mkdir()
    (base / "generation_config.json").write_text(json.dumps({"alignment_heads": [[3, 1], [5, 2]]}))
    config = lm.model.config
    whisper = SimpleNamespace(decoder=WhisperDecoderConfig(), whisper_decoder_source=str(base))
    assert alignment_heads(whisper) == [(3, 1), (5, 2)]
    assert alignment_heads(config) is None  # not a Whisper decoder: the top half's heads
    (base / "generation_config.json").write_text("{}")
    assert alignment_heads(whisper) is None


def test_alignatt_needs_cross_attention_or_an_lm_decoder_and_settings_are_checked(lm):
    assert default_k("alignatt", lm) == 30 and default_k("wait-k", lm) == 3
    with pytest.raises(
        SimultaneousError, match="alignatt needs a decoder with cross-attention.*use --simultaneous wait-k"
    ):
        CrossAttention(torch.nn.Linear(2, 2))
    with pytest.raises(SimultaneousError, match="unknown policy 'wait-x'"):
        SimultaneousConfig("wait-x")
    with pytest.raises(SimultaneousError, match="step_ms must be at least 25 ms"):
        SimultaneousConfig(step_ms=10)
    with pytest.raises(SimultaneousError, match="tail_beam must be >= 1; got 0"):
        SimultaneousConfig(tail_beam=0)


def test_cli_streams_a_file_and_standard_input(checkpoint, capsys, monkeypatch):
    fast = ["--model", checkpoint, "--max-len-b", "6", "--simultaneous", "wait-k", "--k", "2", "--step-ms", "200"]
    assert main(["translate", str(WAV), *fast, "--format", "json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    final = lines[-1]
    assert "".join(x["text"] for x in lines[:-1]).strip() == final["text"]
    assert lines[0]["delay_ms"] == 400.0 and len(final["word_delays_ms"]) == len(final["text"].split())
    assert set(final["latency_ms"]) == {"AL", "LAAL", "AL_CA", "LAAL_CA"}
    pcm = (read_audio(WAV) * 32767).astype("<i2").tobytes()

    class Stdin:
        buffer = __import__("io").BytesIO(pcm)

    monkeypatch.setattr("sys.stdin", Stdin)
    assert main(["translate", "-", *fast]) == 0
    assert capsys.readouterr().out.strip() == final["text"]


def test_cli_checks_simultaneous_options(checkpoint, capsys):
    assert main(["translate", "-", "--model", checkpoint]) == 2
    assert (
        capsys.readouterr().err.strip() == "speechmt translate: error: audio '-' (standard input) needs --simultaneous"
    )
    assert main(["translate", str(WAV), "--k", "3"]) == 2
    assert capsys.readouterr().err.strip() == "speechmt translate: error: argument --k: only with --simultaneous"
    assert main(["translate", str(WAV), "--tail-beam", "5"]) == 2
    assert (
        capsys.readouterr().err.strip() == "speechmt translate: error: argument --tail-beam: only with --simultaneous"
    )
    assert main(["translate", str(WAV), "--simultaneous", "wait-k", "--format", "srt"]) == 2
    assert capsys.readouterr().err.strip() == "speechmt translate: error: --simultaneous writes text or json, not srt"


def test_evaluate_simultaneous_reports_latency_and_a_quality_latency_table(checkpoint, lm, tiny_data, tmp_path, capsys):
    assert (
        main(
            [
                "evaluate",
                "--model",
                checkpoint,
                "--data",
                str(tiny_data),
                "--split",
                "dev",
                "--max-len-b",
                "6",
                "--simultaneous",
                "wait-k",
                "--k",
                "1",
                "4",
                "--step-ms",
                "200",
                "--limit",
                "2",
                "--out",
                str(tmp_path / "wait-k"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("wait-k k=1 step 200 ms: BLEU = ") and "chrF++ = " in out[0] and "LAAL = " in out[0]
    assert out[2].startswith("offline (beam 5): BLEU = ")
    table = (tmp_path / "wait-k" / "quality_latency.md").read_text().splitlines()
    assert table[0] == "# Quality and latency: checkpoint_last.safetensors on dev (2 utterances), wait-k"
    assert table[2].startswith("| policy | k | step ms | BLEU |") and "| AL s | LAAL s |" in table[2]
    assert table[4].startswith("| wait-k | 1 | 200 | ") and table[5].startswith("| wait-k | 4 | 200 | ")
    assert table[6].startswith("| offline (beam 5) | - | - | ")
    k4 = json.loads((tmp_path / "wait-k" / "wait-k-k4" / "report.json").read_text())
    assert k4["extra"]["decode"]["max_len_b"] == 6
    assert json.loads((tmp_path / "wait-k" / "offline" / "report.json").read_text())["n"] == 2
    assert (tmp_path / "wait-k" / "quality_latency.png").read_bytes()[:4] == b"\x89PNG"
    # a second policy's run joins the first's rows: one table, one plot
    assert (
        main(
            [
                "evaluate",
                "--model",
                checkpoint,
                "--data",
                str(tiny_data),
                "--split",
                "dev",
                "--max-len-b",
                "6",
                "--simultaneous",
                "alignatt",
                "--k",
                "5",
                "--step-ms",
                "200",
                "--limit",
                "2",
                "--compare",
                str(tmp_path / "wait-k"),
                "--out",
                str(tmp_path / "both"),
            ]
        )
        == 0
    )
    rows = json.loads((tmp_path / "both" / "quality_latency.json").read_text())["rows"]
    assert [(r["policy"], r["k"]) for r in rows] == [("wait-k", 1), ("wait-k", 4), ("alignatt", 5)]
    assert "wait-k and alignatt" in (tmp_path / "both" / "quality_latency.md").read_text().splitlines()[0]
    capsys.readouterr()
    assert (
        main(
            ["evaluate", "--model", checkpoint, "--data", str(tiny_data), "--split", "dev", "--compare", str(tmp_path)]
        )
        == 2
    )
    assert capsys.readouterr().err.strip() == "speechmt evaluate: error: argument --compare: only with --simultaneous"
    reports = [
        evaluate_simultaneous(
            lm, tiny_data, "dev", SimultaneousConfig("wait-k", k, 200), limit=2, options=_exactly(lm, 5)
        )
        for k in (1, 4)
    ]
    laal = [r.extra["latency"]["LAAL"] for r in reports]
    assert 0 < laal[0] < laal[1]  # waiting longer lags more
    assert all(r.extra["latency"]["LAAL_CA"] > r.extra["latency"]["LAAL"] for r in reports)
    assert reports[0].n == 2 and set(reports[0].metrics) == {"BLEU", "chrF", "chrF++"}


def _counting_encoder(lm, monkeypatch) -> list[int]:
    """Counts the encoder runs of simultaneous decoding (the window's length in samples, each call)."""
    calls, encode = [], simultaneous.encode_audio

    def counted(model, waves):
        calls.append(len(waves[0]))
        return encode(model, waves)

    monkeypatch.setattr(simultaneous, "encode_audio", counted)
    return calls


def test_a_shared_encoder_memo_changes_no_output_and_encodes_each_window_once(lm, monkeypatch):
    wave = np.random.default_rng(1).normal(0, 0.1, 16000).astype(np.float32)  # 10 steps of 100 ms
    cfgs = [SimultaneousConfig("wait-k", k, step_ms=100) for k in (1, 3, 9)]
    calls = _counting_encoder(lm, monkeypatch)
    alone, windows = [], []  # each run alone, and the windows (samples) it encoded
    for cfg in cfgs:
        alone.append(translate_stream(lm, wave, cfg, _exactly(lm, 8)))
        windows.append(list(calls))
        calls.clear()
    memo = EncoderMemo()
    shared = [translate_stream(lm, wave, cfg, _exactly(lm, 8), memo=memo) for cfg in cfgs]
    assert [r.text for r in shared] == [r.text for r in alone]
    assert [[(c.tokens, c.delay_ms) for c in r.commits] for r in shared] == [
        [(c.tokens, c.delay_ms) for c in r.commits] for r in alone
    ]
    # alone, k = 1 encodes the windows of steps 1-9 (1600, 3200, ... samples; its 8 tokens end it), k = 3 those of
    # steps 3-10, k = 9 steps 9-10; shared, each of the 10 windows is encoded once
    assert windows == [[1600 * i for i in range(1, 10)], [1600 * i for i in range(3, 11)], [14400, 16000]]
    assert calls == [1600 * i for i in range(1, 11)]
    # a run served by the memo is charged the encoder seconds it reused (one window: read = its samples)
    # (k = 3 computed the last window itself, the first to need it)
    reused = [sum(memo.entries[(n, n)][1] for n in w) for w in windows]
    assert memo.saved == pytest.approx(reused[1] - memo.entries[(16000, 16000)][1] + reused[2])
    assert shared[1].compute_ms > 1000 * reused[1] and shared[2].compute_ms > 1000 * reused[2]
    assert all(c.elapsed_ms > c.delay_ms for r in shared for c in r.commits)


def test_evaluating_several_settings_at_once_equals_each_alone(lm, tiny_data, monkeypatch):
    cfgs = [SimultaneousConfig("wait-k", k, 200) for k in (1, 4)]
    calls = _counting_encoder(lm, monkeypatch)
    alone, n_alone = [], []
    for cfg in cfgs:
        alone.append(evaluate_simultaneous(lm, tiny_data, "dev", cfg, limit=2, options=_exactly(lm, 5)))
        n_alone.append(len(calls))
        calls.clear()
    together = evaluate_simultaneous_settings(
        lm, tiny_data, "dev", cfgs, [None, None], limit=2, options=_exactly(lm, 5)
    )
    for a, t in zip(alone, together):
        assert {k: s.score for k, s in t.metrics.items()} == {k: s.score for k, s in a.metrics.items()}
        assert t.extra["latency"]["LAAL"] == a.extra["latency"]["LAAL"]
        assert t.extra["latency"]["AL"] == a.extra["latency"]["AL"]
        assert t.extra["simultaneous"]["k"] == a.extra["simultaneous"]["k"] and t.n == a.n == 2
    assert n_alone[0] <= len(calls) < sum(n_alone)  # k = 4 reuses the windows k = 1 encoded


def test_a_killed_evaluation_resumes_from_its_journal(lm, tiny_data, tmp_path, monkeypatch):
    cfgs = [SimultaneousConfig("wait-k", k, 200) for k in (1, 4)]
    journal = tmp_path / "streams.jsonl"

    def run():
        return evaluate_simultaneous_settings(
            lm, tiny_data, "dev", cfgs, [None, None], options=_exactly(lm, 5), journal=journal
        )

    whole = run()
    lines = journal.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["run"]["settings"][1]["k"] == 4  # the run, 2 utterances
    journal.write_text("\n".join(lines[:2]) + "\n" + lines[2][:25])  # killed while writing the second
    streamed = []
    translate = simultaneous_eval.translate_stream
    monkeypatch.setattr(
        simultaneous_eval,
        "translate_stream",
        lambda lm, wave, *a, **k: streamed.append(len(wave)) or translate(lm, wave, *a, **k),
    )
    resumed = run()
    assert len(streamed) == 2  # the second utterance only, through both settings
    assert len(journal.read_text().splitlines()) == 3
    for a, b in zip(whole, resumed):
        assert {k: s.score for k, s in a.metrics.items()} == {k: s.score for k, s in b.metrics.items()}
        assert {k: a.extra["latency"][k] for k in ("AL", "LAAL")} == {k: b.extra["latency"][k] for k in ("AL", "LAAL")}
    streamed.clear()
    assert [r.metrics["BLEU"].score for r in run()] == [r.metrics["BLEU"].score for r in whole] and not streamed
    with pytest.raises(SimultaneousError, match="streams.jsonl: the journal of another run"):
        evaluate_simultaneous_settings(lm, tiny_data, "dev", cfgs[:1], [None], options=_exactly(lm, 5), journal=journal)


def test_quality_latency_table_gives_each_row_as_a_share_of_offline(lm, tiny_data):
    report = evaluate_simultaneous(
        lm, tiny_data, "dev", SimultaneousConfig("wait-k", 2, 200), limit=1, options=_exactly(lm, 3)
    )
    row = latency_row(SimultaneousConfig("wait-k", 2, 200), report) | {"BLEU": 6.0, "chrF++": 30.0}
    offline = EvalReport(
        "m",
        "d",
        "dev",
        1,
        {"BLEU": Score("BLEU", 8.0, ""), "chrF++": Score("chrF++", 40.0, "")},
        {"decode": {"beam_size": 5}, "rtf": 0.05},
    )
    lines = quality_latency_table([row], offline).splitlines()
    assert lines[0].startswith("| policy | k | step ms | BLEU | % of offline | chrF++ |")
    assert lines[2].startswith("| wait-k | 2 | 200 | 6.00 | 75 | 30.00 | ")
    assert lines[3] == "| offline (beam 5) | - | - | 8.00 | 100 | 40.00 | - | - | - | - | 0.05 |"
