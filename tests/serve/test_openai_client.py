"""OpenAI's official Python client against the server: translations in each format, the model list, and a bad
request raised as the client's BadRequestError with the server's one line. The slow test does it with the bundled
English -> German model and the example clips."""

from pathlib import Path

import pytest

import speechmt
from speechmt.serve.config import ServeConfig
from tests.serve.conftest import live_server
from tests.serve.test_app import CONFIG, expected

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.filterwarnings("ignore:deprecated")  # the client marks audio.translations.create so
EXAMPLES = Path(__file__).parents[2] / "examples"


def client(url: str):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="not-needed", max_retries=0, timeout=120)


def test_the_openai_client_translates_a_file(served, tiny_lm, talks):
    talk = talks[0]
    want = expected(tiny_lm, talk)
    with live_server(served, CONFIG) as live:
        api = client(live.url)
        with open(talk, "rb") as f:
            result = api.audio.translations.create(model="tiny", file=f)
        with open(talk, "rb") as f:
            text = api.audio.translations.create(model="tiny", file=f, response_format="text")
        with open(talk, "rb") as f:
            verbose = api.audio.translations.create(model="tiny", file=f, response_format="verbose_json")
        with open(talk, "rb") as f:
            srt = api.audio.translations.create(model="tiny", file=f, response_format="srt")
        models = [m.id for m in api.models.list()]
        with open(talk, "rb") as f, pytest.raises(openai.BadRequestError) as bad:
            api.audio.translations.create(model="tiny", file=f, temperature=0.5)
    assert result.text == want.text and text.strip() == want.text
    assert verbose.text == want.text and verbose.duration == pytest.approx(want.audio_seconds, abs=1e-3)
    assert srt == speechmt.subtitles(expected(tiny_lm, talk, cut_pauses=300), "srt")
    assert models == ["tiny"]
    assert bad.value.status_code == 400 and "temperature" in bad.value.message


@pytest.mark.slow
def test_the_bundled_model_translates_and_transcribes_the_examples_through_the_client():
    from speechmt.serve.models import load_served_model

    config = ServeConfig(max_wait_ms=50)
    served = load_served_model(config)
    assert set(served.tasks) == {"st", "asr"} and (served.source_language, served.target_language) == ("en", "de")
    with live_server(served, config) as live:
        api = client(live.url)
        with open(EXAMPLES / "01_weather.flac", "rb") as f:
            german = api.audio.translations.create(model=served.name, file=f)
        with open(EXAMPLES / "03_station.flac", "rb") as f:
            english = api.audio.transcriptions.create(model=served.name, file=f, language="en")
    assert german.text == "Das Wetter ist heute sehr schön."
    assert english.text.strip() == "Where is the train station?"
