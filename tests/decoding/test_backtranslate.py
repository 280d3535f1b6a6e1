"""Back-translation and distillation: the few-shot LM's greedy loop equals transformers' generate, a killed run
keeps its finished lines and a rerun does only the rest, the round-trip score's threshold is counted, the folder
reads as MT data; the command with the tiny random LM and with a tiny speechmt MT checkpoint (all offline)."""

import json

import pytest
import torch

from speechmt.cli import main
from speechmt.data.manifest import read_manifest
from speechmt.decoding.backtranslate import BacktranslateConfig, BacktranslateError, generate_pairs, read_done
from speechmt.decoding.text_generators import FewShotLM, GeneratorError, few_shot_prompt
from tests.lm_helpers import tiny_lm_dir

GERMAN = [
    "Das ist ein Haus.",
    "",
    "Wir gehen heute nach Hause.",
    "das ist ein haus.",
    "Ich lese ein Buch.",
    "Der Zug kommt um acht Uhr.",
    "Sie trinkt gern Kaffee.",
]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return tiny_lm_dir(tmp_path_factory.mktemp("lm") / "tiny-lm")


def text_file(tmp_path, lines=GERMAN):
    path = tmp_path / "mono.de"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_prompt_and_greedy_loop_match_transformers_generate(lm):
    assert few_shot_prompt(" Hallo Welt ", "de", "en").endswith("\n\nGerman: Hallo Welt\nEnglish:")
    gen = FewShotLM(str(lm), "de", "en", max_new_tokens=6)
    texts = ["Das ist ein Haus.", "", "Der Zug kommt um acht Uhr und fährt gleich weiter."]
    ours = gen(texts)
    assert ours[1] == "" and len(ours) == 3
    x, mask = gen._batch([few_shot_prompt(t, "de", "en") for t in (texts[0], texts[2])])
    with torch.inference_mode():
        ref = gen.model.generate(
            input_ids=x,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=6,
            num_beams=1,
            pad_token_id=gen.pad_id,
            eos_token_id=gen.stop.tolist(),
        )
    expected = [
        gen.tok.decode(row[x.shape[1] :].tolist(), skip_special_tokens=True).split("\n", 1)[0].strip() for row in ref
    ]
    assert [ours[0], ours[2]] == expected
    with pytest.raises(GeneratorError, match="not a causal LM folder"):
        FewShotLM(str(lm.parent), "de", "en")


class Flaky:
    """Upper-cases its texts; raises on call number `fail_at` (a kill in the middle of a run)."""

    def __init__(self, fail_at=None):
        self.calls, self.seen, self.fail_at = 0, [], fail_at

    def __call__(self, texts):
        self.calls += 1
        if self.calls == self.fail_at:
            raise KeyboardInterrupt
        self.seen += list(texts)
        return [t.upper() for t in texts]


def test_a_killed_run_keeps_its_lines_and_resumes(tmp_path):
    cfg = BacktranslateConfig(str(text_file(tmp_path)), str(tmp_path / "bt"), "en", "de", batch_size=2)
    with pytest.raises(KeyboardInterrupt):
        generate_pairs(cfg, Flaky(fail_at=2))
    store = tmp_path / "bt" / "generated.jsonl"
    assert len(store.read_text().splitlines()) == 2  # the first batch, flushed
    with open(store, "a", encoding="utf-8") as f:
        f.write('{"id": "line_5", "inp')  # a line cut short by the kill
    assert list(read_done(store)) == ["line_1", "line_3"] and store.read_text().endswith("}\n")
    again = Flaky()
    summary = generate_pairs(cfg, again)
    assert again.seen == ["Ich lese ein Buch.", "Der Zug kommt um acht Uhr.", "Sie trinkt gern Kaffee."]
    assert summary["input_skipped"] == {"empty": 1, "repeated": 1} and summary["pairs"] == summary["generated"] == 5
    assert summary["throughput"]["resumed_from"] == 2 and summary["throughput"]["generated_now"] == 3
    records = read_manifest(tmp_path / "bt" / "train.jsonl")
    assert [(r.src_text, r.tgt_text) for r in records][0] == ("DAS IST EIN HAUS.", "Das ist ein Haus.")
    assert {(r.src_lang, r.tgt_lang) for r in records} == {("en", "de")} and records[0].id == "back_line_1"
    assert generate_pairs(cfg, Flaky(fail_at=1))["pairs"] == 5  # all done: nothing generated again


def test_round_trip_score_and_threshold_counted(tmp_path):
    cfg = BacktranslateConfig(
        str(text_file(tmp_path)), str(tmp_path / "d"), "de", "en", mode="distill", batch_size=3, min_score=50
    )
    faithful = {"Das ist ein Haus.", "Ich lese ein Buch."}
    summary = generate_pairs(
        cfg, lambda ts: [f"EN {t}" for t in ts], lambda ts: [t[3:] if t[3:] in faithful else "xyz" for t in ts]
    )
    assert summary["generated"] == 5 and summary["pairs"] == 2
    assert summary["dropped"] == {"round-trip chrF below 50": 3}
    assert summary["round_trip_chrf"]["kept_at_threshold"]["50"] == 2
    assert summary["round_trip_chrf"]["kept_at_threshold"]["10"] == 2
    rows = [json.loads(line) for line in (tmp_path / "d" / "generated.jsonl").read_text().splitlines()]
    assert {r["score"] for r in rows if r["input"] in faithful} == {100.0}
    records = read_manifest(tmp_path / "d" / "train.jsonl")
    assert [(r.src_text, r.tgt_text) for r in records] == [
        ("Das ist ein Haus.", "EN Das ist ein Haus."),
        ("Ich lese ein Buch.", "EN Ich lese ein Buch."),
    ]
    with pytest.raises(BacktranslateError, match="no such input file"):
        generate_pairs(BacktranslateConfig(str(tmp_path / "none"), str(tmp_path / "x"), "de", "en"), str.upper)


def test_backtranslate_command_with_the_tiny_lm(lm, tmp_path, capsys):
    args = [
        "data",
        "backtranslate",
        "--input",
        str(text_file(tmp_path)),
        "--out",
        str(tmp_path / "bt"),
        "--src-lang",
        "en",
        "--tgt-lang",
        "de",
        "--lm",
        str(lm),
        "--round-trip",
        "--max-new-tokens",
        "5",
        "--batch-size",
        "4",
    ]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["generated"] == 5 and summary["generator"].startswith("causal LM")
    assert summary["round_trip_generator"].startswith("causal LM") and summary["throughput"]["lines_per_second"] > 0
    assert summary["pairs"] + sum(summary["dropped"].values()) == 5
    assert (
        main(
            [
                "data",
                "distill",
                "--input",
                "x",
                "--out",
                str(tmp_path / "d"),
                "--src-lang",
                "en",
                "--tgt-lang",
                "de",
                "--model",
                str(tmp_path / "none.safetensors"),
            ]
        )
        == 2
    )
    assert "no such checkpoint" in capsys.readouterr().err
    assert (
        main(["data", "distill", "--input", "x", "--out", "y", "--src-lang", "en", "--tgt-lang", "xx", "--lm", str(lm)])
        == 2
    )
    assert "no few-shot prompt for language 'xx'" in capsys.readouterr().err


def test_distill_with_a_speechmt_mt_checkpoint(tiny_data, tmp_path, capsys):
    from speechmt.config import save_config
    from tests.helpers import tiny_config

    cfg = tiny_config(tiny_data, tmp_path / "mt", task="mt", max_updates=2, valid_decode=False)
    cfg.model.text_encoder.layers, cfg.model.text_encoder.shared = cfg.model.encoder.layers, True
    save_config(cfg, tmp_path / "mt.yaml")
    assert main(["train", "--config", str(tmp_path / "mt.yaml")]) == 0
    ckpt = tmp_path / "mt" / "checkpoint_last.safetensors"
    capsys.readouterr()
    src = tiny_data / "train.jsonl"
    assert (
        main(
            [
                "data",
                "distill",
                "--input",
                str(src),
                "--out",
                str(tmp_path / "kd"),
                "--src-lang",
                "en",
                "--tgt-lang",
                "de",
                "--model",
                str(ckpt),
                "--max-new-tokens",
                "4",
                "--round-trip",
                str(ckpt),
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    n = len(read_manifest(src))
    assert summary["generated"] == n and summary["config"]["field"] == "src_text"
    assert summary["round_trip_generator"].startswith("checkpoint")
    assert (
        main(
            [
                "data",
                "backtranslate",
                "--input",
                str(src),
                "--out",
                str(tmp_path / "bt"),
                "--src-lang",
                "en",
                "--tgt-lang",
                "de",
                "--model",
                str(ckpt),
                "--round-trip",
            ]
        )
        == 2
    )
    assert "--round-trip without a value reuses --lm" in capsys.readouterr().err
