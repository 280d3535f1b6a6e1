"""A multilingual model served: `language` and `target_language` pick the direction per request, each direction is
its own kind of batch with its own forced prefix, an unknown one is a 400 listing the directions, /v1/models and
the stream know them. The model: the tiny en-de one told that it also writes English (its vocabulary's <en>)."""

import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

import speechmt
from speechmt.audio import read_audio
from speechmt.decoding.translate import in_direction
from speechmt.serve.config import ServeConfig
from speechmt.serve.models import DirectionError, ServedModel, served_model
from tests.serve.conftest import live_server
from tests.serve.test_app import CONFIG, assert_one_line, expected, post

DIRECTIONS = {"en-de": "<de>", "en-en": "<en>"}


@pytest.fixture(scope="module")
def multi_lm(tiny_lm):
    assert tiny_lm.tag == "<de>" and tiny_lm.tokenizer.prefix_ids("<en>") != tiny_lm.tokenizer.prefix_ids("<de>")
    return dataclasses.replace(tiny_lm, directions=dict(DIRECTIONS))


@pytest.fixture(scope="module")
def multi(multi_lm):
    return served_model(multi_lm, ServeConfig(model_name="tiny"))


def recording(kinds: list):
    """A patch that records the kind of each batch the real decode function decodes."""

    def patch(state):
        decode = state.decode

        def record(kind, waves):
            kinds.append(kind)
            return decode(kind, waves)

        state.decode = record

    return patch


def test_the_target_language_picks_the_direction_and_its_forced_prefix(multi, multi_lm, clips, talks):
    files = [clips[0], talks[0], clips[1]]
    want = {tgt: [expected(in_direction(multi_lm, tgt_lang=tgt), f).text for f in files] for tgt in ("de", "en")}
    kinds: list = []
    with live_server(multi, CONFIG, recording(kinds)) as live:
        default = [post(live.url, f).json()["text"] for f in files]
        asked = [(tgt, f) for f in files for tgt in ("de", "en")]
        with ThreadPoolExecutor(len(asked)) as pool:
            together = list(pool.map(lambda a: post(live.url, a[1], target_language=a[0]), asked))
        verbose = {
            tgt: post(live.url, clips[0], target_language=tgt, response_format="verbose_json").json()
            for tgt in ("de", "EN")
        }
        options = dict(live.state._options)
    assert default == want["de"]  # no target_language: the default direction, as before
    assert [r.status_code for r in together] == [200] * len(asked)
    assert [r.json()["text"] for r in together] == [want[tgt][files.index(f)] for tgt, f in asked]
    assert set(kinds) == {("st", 2, "en-de"), ("st", 2, "en-en")}
    tok = multi_lm.tokenizer
    assert options[("st", 2, "en-de")].prefix == tok.prefix_ids("<de>")
    assert options[("st", 2, "en-en")].prefix == tok.prefix_ids("<en>")
    assert verbose["de"]["language"] == "german" and verbose["EN"]["language"] == "english"


def test_a_direction_the_model_does_not_know_is_a_400_listing_those_it_knows(multi, clips):
    with live_server(multi, CONFIG) as live:
        fr = assert_one_line(post(live.url, clips[0], target_language="fr"), 400, "target_language")
        source = assert_one_line(post(live.url, clips[0], language="de"), 400, "language")
        unknown = assert_one_line(post(live.url, clips[0], language="xx", target_language="en"), 400, "language")
        ok = post(live.url, clips[0], language="en", target_language="en")
    for message in (fr, source, unknown):
        assert "en-de, en-en" in message
    assert fr.startswith("target_language: invalid value 'fr'") and source.startswith("language: invalid value 'de'")
    assert ok.status_code == 200


def test_models_lists_the_directions(multi, served):
    with live_server(multi, CONFIG) as live:
        one = httpx.get(f"{live.url}/v1/models/tiny").json()
        listed = httpx.get(f"{live.url}/v1/models").json()["data"]
    assert one["directions"] == ["en-de", "en-en"] and listed == [one]
    assert (one["source_language"], one["target_language"], one["tasks"]) == ("en", "de", ["translate"])
    assert served.directions == ["en-de"]  # a model of one direction lists it, and is served as before


def test_the_servers_languages_pick_the_default_direction(multi_lm):
    from speechmt.checkpoint import CheckpointError

    english = served_model(multi_lm, ServeConfig(model_name="tiny", target_language="en"))
    assert english.default_direction == "en-en" and english.target_language == "en"
    assert english.direction("st") == "en-en" and english.model("st", "en-en").tag == "<en>"
    with pytest.raises(CheckpointError, match="target_language.*en-de, en-en"):
        served_model(multi_lm, ServeConfig(model_name="tiny", target_language="fr"))


def test_languages_that_fit_several_directions(multi_lm):
    lm = dataclasses.replace(multi_lm, directions={"en-de": "<de>", "fr-de": "<de>", "fr-en": "<en>"})
    served = ServedModel("m", {"st": lm}, "en", "de", "en-de")
    assert served.direction("st", target="de") == "en-de"  # the default fits
    assert served.direction("st", source="fr", target="de") == "fr-de"
    assert served.direction("st", target="en") == "fr-en"
    # the direction's tag and its source (what a whisper_asr model of several sources transcribes in), one
    # copy per direction over the same weights
    fr_de, fr_en = served.model("st", "fr-de"), served.model("st", "fr-en")
    assert (fr_de.tag, fr_de.src_lang, fr_en.tag, fr_en.src_lang) == ("<de>", "fr", "<en>", "fr")
    assert fr_de.model is lm.model and served.model("st", "fr-de") is fr_de and served.model("st") is lm
    with pytest.raises(DirectionError, match="several directions fit") as several:
        served.direction("st", source="fr")  # fr-de or fr-en: different tags
    assert several.value.param == "target_language"
    with pytest.raises(DirectionError, match="not trained in direction en-en") as combination:
        served.direction("st", source="en", target="en")
    assert combination.value.param == "target_language"


testclient = pytest.importorskip("starlette.testclient")


def test_a_stream_writes_the_direction_asked(multi, multi_lm, talks):
    from speechmt.serve.app import create_app

    data = (np.clip(read_audio(talks[0]), -1, 1) * 32767).astype("<i2").tobytes()
    heard = np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
    want = speechmt.simultaneous(in_direction(multi_lm, tgt_lang="en"), heard, k=2, max_len_b=24)
    config = ServeConfig(max_len_b=24, max_streams=1)
    with testclient.TestClient(create_app(multi, config)) as client:
        with client.websocket_connect("/v1/audio/stream") as ws:
            ws.send_text(json.dumps({"target_language": "fr"}))
            error = json.loads(ws.receive_text())
            with pytest.raises(testclient.WebSocketDisconnect) as closed:
                ws.receive_text()
        assert error["type"] == "error" and closed.value.code == 1008
        assert error["message"].startswith("target_language:") and "en-de, en-en" in error["message"]
        with client.websocket_connect("/v1/audio/stream") as ws:
            ws.send_text(json.dumps({"k": 2, "language": "en", "target_language": "en"}))
            ws.send_bytes(data)
            ws.send_text(json.dumps({"type": "end"}))
            messages = [json.loads(ws.receive_text())]
            while messages[-1]["type"] == "partial":
                messages.append(json.loads(ws.receive_text()))
    assert messages[-1]["type"] == "final" and messages[-1]["text"] == want.text
