"""The web page in a real headless browser (Debian's Chromium driven by Selenium's WebDriver): it uploads a clip,
shows the translation and the subtitle cues, and downloads the SRT file. Skipped where Chromium, its driver or
Selenium is not installed."""

import shutil
import time
from pathlib import Path

import pytest

import speechmt
from tests.serve.conftest import live_server
from tests.serve.test_app import CONFIG, expected

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser(tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver")
    if not (CHROMIUM and DRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_experimental_option("prefs", {"download.default_directory": str(tmp_path)})
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(check, seconds: float = 60.0):
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return value


def test_the_page_translates_an_uploaded_clip(browser, served, tiny_lm, talks, tmp_path):
    from selenium.webdriver.common.by import By

    talk = talks[1]
    want = expected(tiny_lm, talk)
    with live_server(served, CONFIG) as live:
        browser.get(f"{live.url}/")
        wait_for(lambda: "tiny" in browser.find_element(By.ID, "model").text)
        browser.find_element(By.ID, "file").send_keys(str(talk))
        browser.find_element(By.ID, "translate").click()
        text = wait_for(lambda: browser.find_element(By.ID, "translation").text)
        rows = browser.find_elements(By.CSS_SELECTOR, "#segments tbody tr")
        status = browser.find_element(By.ID, "status").text
        browser.find_element(By.ID, "download-srt").click()
        srt = wait_for(lambda: next(Path(tmp_path).glob("*.srt"), None))
    assert text == " ".join(want.text.split()) and status.startswith("Done")
    assert len(rows) == len(speechmt.api.subtitle_cues(want))
    assert srt.name == f"{talk.stem}.srt"
    assert srt.read_text() == speechmt.subtitles(expected(tiny_lm, talk, cut_pauses=300), "srt")
