"""The server over real loopback HTTP (uvicorn in a thread) with a tiny trained model: results are what
`speechmt.translate` gives for the same files, alone or batched with others; each request gets its own chunks'
texts; the output formats; one JSON line per bad request."""

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

import speechmt
from speechmt.serve.config import ServeConfig
from tests.serve.conftest import live_server

CONFIG = ServeConfig(beam=2, max_batch=8, max_wait_ms=50, max_chunk_seconds=2.0, max_len_b=24)


def post(url: str, path, endpoint: str = "translations", **fields) -> httpx.Response:
    with open(path, "rb") as f:
        return httpx.post(
            f"{url}/v1/audio/{endpoint}", files={"file": (path.name, f)}, data={"model": "tiny", **fields}, timeout=60
        )


def expected(tiny_lm, path, **options):
    (r,) = speechmt.translate(tiny_lm, path, beam=2, max_chunk_seconds=2.0, max_len_b=24, **options)
    return r


def test_each_request_gets_what_translate_gives_alone_and_batched(served, tiny_lm, clips, talks):
    files = [*clips[:6], *talks]  # the talks are cut into 2-4 chunks each
    want = [expected(tiny_lm, f).text for f in files]
    with live_server(served, CONFIG) as live:
        alone = [post(live.url, f).json()["text"] for f in files]
        with ThreadPoolExecutor(len(files)) as pool:
            together = list(pool.map(lambda f: post(live.url, f), files))
        health = httpx.get(f"{live.url}/health").json()
    assert alone == want
    assert [r.status_code for r in together] == [200] * len(files)
    assert [r.json()["text"] for r in together] == want
    assert len({r.headers["x-request-id"] for r in together}) == len(files)
    assert health["largest_batch"] > 1 and health["pending"] == 0
    assert health["finished"] == 2 * len(files)


def test_the_output_formats_are_translates(served, tiny_lm, talks):
    from speechmt.api import subtitle_cues, subtitles

    talk = talks[1]
    plain, cut = expected(tiny_lm, talk), expected(tiny_lm, talk, cut_pauses=300)
    with live_server(served, CONFIG) as live:
        got = {fmt: post(live.url, talk, response_format=fmt) for fmt in ("json", "text", "srt", "vtt", "verbose_json")}
    assert got["json"].json() == {"text": plain.text}
    assert got["text"].text == plain.text + "\n" and got["text"].headers["content-type"].startswith("text/plain")
    assert got["srt"].text == subtitles(cut, "srt") and got["vtt"].text == subtitles(cut, "vtt")
    assert got["vtt"].text.startswith("WEBVTT")
    verbose = got["verbose_json"].json()
    assert verbose["task"] == "translate" and verbose["language"] == "german"
    assert verbose["text"] == plain.text and verbose["duration"] == pytest.approx(plain.audio_seconds, abs=1e-3)
    assert [(s["start"], s["end"], s["text"]) for s in verbose["segments"]] == [
        (round(c.start, 3), round(c.end, 3), c.text) for c in subtitle_cues(plain)
    ]


def fingerprints(state):
    """A decode function that writes each chunk's length and checksum instead of a translation."""

    def decode(kind, waves):
        time.sleep(0.01)
        return [[f"{len(w)}/{np.float64(w).sum():.4f}"] for w in waves]

    state.decode = decode


def test_no_request_gets_another_requests_texts(served, clips, talks):
    """24 concurrent requests over 14 files: each text is the fingerprints of its own file's chunks, in order."""
    from speechmt.serve.uploads import cut_upload, decode_upload

    files = [*clips, *talks]
    config = ServeConfig(max_batch=4, max_wait_ms=20, max_chunk_seconds=2.0)
    want = {}
    for f in files:
        upload = cut_upload(*decode_upload(f.read_bytes(), f.name), f.name, CONFIG_SEGMENT(config), 1)
        want[f] = " ".join(f"{len(c.wave)}/{np.float64(c.wave).sum():.4f}" for c in upload.chunks)
    order = [files[i % len(files)] for i in range(24)]
    with live_server(served, config, fingerprints) as live:
        with ThreadPoolExecutor(12) as pool:
            got = list(pool.map(lambda f: post(live.url, f).json()["text"], order))
    assert got == [want[f] for f in order]


def CONFIG_SEGMENT(config):
    from speechmt.decoding.segment import SegmentConfig

    return SegmentConfig(max_seconds=config.max_chunk_seconds)


BAD = [  # (form fields besides the file, the field named in the error)
    ({"response_format": "docx"}, "response_format"),
    ({"language": "xx"}, "language"),
    ({"language": "fr"}, "language"),
    ({"target_language": "es"}, "target_language"),
    ({"beam": "0"}, "beam"),
    ({"beam": "many"}, "beam"),
    ({"temperature": "0.7"}, "temperature"),
    ({"prompt": "Hello"}, "prompt"),
    ({"timestamp_granularities[]": "word"}, "timestamp_granularities[]"),
    ({"stream": "true"}, "stream"),
]


def assert_one_line(response: httpx.Response, status: int, param: str | None) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.text.count("\n") == 1 and response.text.endswith("\n")
    error = json.loads(response.text)["error"]
    assert error["param"] == param and error["code"] == status and "\n" not in error["message"]
    return error["message"]


def test_bad_requests_get_one_json_line_and_do_not_disturb_others(served, tiny_lm, clips, tmp_path):
    import soundfile as sf

    empty, text, short, nan = (tmp_path / n for n in ("empty.wav", "notes.wav", "short.wav", "nan.wav"))
    empty.write_bytes(b"")
    text.write_text("not audio at all")
    sf.write(short, np.zeros(100, np.float32), 16000)  # 6 ms: nothing to translate
    sf.write(nan, np.full(1600, np.nan, np.float32), 16000, subtype="FLOAT")
    good = clips[0]
    want = expected(tiny_lm, good).text
    with live_server(served, CONFIG) as live:
        with ThreadPoolExecutor(4) as pool:
            oks = [pool.submit(post, live.url, good) for _ in range(4)]
            for fields, param in BAD:
                assert_one_line(post(live.url, good, **fields), 400, param)
            for f, words in (
                (empty, "empty file"),
                (text, "not audio"),
                (short, "nothing to translate"),
                (nan, "non-finite"),
            ):
                assert words in assert_one_line(post(live.url, f), 400, "file")
            no_file = httpx.post(f"{live.url}/v1/audio/translations", data={"model": "tiny"})
            assert "missing" in assert_one_line(no_file, 400, "file")
            asr = post(live.url, good, "transcriptions")
            assert "does not transcribe" in assert_one_line(asr, 400, None)
            assert [f.result().json()["text"] for f in oks] == [want] * 4


def test_an_upload_over_the_limit_is_413_with_or_without_its_length(served, talks):
    config = ServeConfig(max_upload_mb=0.01, max_chunk_seconds=2.0)  # 10 KiB; a talk is 110-200 KiB
    data = talks[0].read_bytes()
    assert len(data) > 0.01 * 2**20 + 64 * 1024
    with live_server(served, config) as live:
        assert "larger than" in assert_one_line(post(live.url, talks[0]), 413, "file")
        boundary = "b0undary"
        body = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
                "Content-Type: audio/wav\r\n\r\n"
            ).encode()
            + data
            + f"\r\n--{boundary}--\r\n".encode()
        )
        chunked = httpx.post(
            f"{live.url}/v1/audio/translations",
            content=iter([body[i : i + 4096] for i in range(0, len(body), 4096)]),
            headers={"content-type": f"multipart/form-data; boundary={boundary}"},
        )
        assert "content-length" not in chunked.request.headers
        assert_one_line(chunked, 413, "file")


def test_models_and_health(served):
    with live_server(served, CONFIG) as live:
        models = httpx.get(f"{live.url}/v1/models").json()
        one = httpx.get(f"{live.url}/v1/models/tiny").json()
        missing = httpx.get(f"{live.url}/v1/models/gpt-4")
        health = httpx.get(f"{live.url}/health").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["tiny"] and one["id"] == "tiny"
    assert one["tasks"] == ["translate"] and one["target_language"] == "de"
    assert_one_line(missing, 404, "model")
    assert health["status"] == "ok" and health["pending"] == 0 and health["max_queue"] == CONFIG.max_queue
