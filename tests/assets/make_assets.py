"""Rebuilds the tiny committed replicas of the MuST-C and CoVoST 2 layouts used by the tests.

Sentences are the project's own; audio is voiced with espeak-ng (Debian). Run from the repository root:
    python tests/assets/make_assets.py
"""

from __future__ import annotations

import csv
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

from speechmt.audio import resample

HERE = Path(__file__).parent
PAIRS = [
    ("The weather is lovely today.", "Das Wetter ist heute schön."),
    ("We are building a speech translation toolkit.", "Wir bauen ein Werkzeug für Sprachübersetzung."),
    ("Please open the window.", "Bitte öffne das Fenster."),
    ("My brother plays the guitar every evening.", "Mein Bruder spielt jeden Abend Gitarre."),
    ("The train leaves at nine o'clock.", "Der Zug fährt um neun Uhr ab."),
    ("She reads a book in the garden.", "Sie liest ein Buch im Garten."),
    ("Where is the nearest station?", "Wo ist der nächste Bahnhof?"),
    ("Thank you for listening.", "Danke fürs Zuhören."),
    ("Coffee tastes better in the morning.", "Kaffee schmeckt morgens besser."),
    ("The children are playing outside.", "Die Kinder spielen draußen."),
]
PAUSE = 0.25


def voice(text: str, voice_name: str) -> np.ndarray:
    """espeak-ng speech at 16 kHz, float32."""
    with tempfile.NamedTemporaryFile(suffix=".wav") as tmp:
        subprocess.run(["espeak-ng", "-v", voice_name, "-s", "190", "-w", tmp.name, text], check=True)
        wave, sr = sf.read(tmp.name, dtype="float32")
    return resample(wave, sr, 16000)


def make_mustc(root: Path) -> None:
    """en-de with train (2 talks), dev and tst-COMMON (1 talk each); train yaml lists ted_1 out of offset order."""
    talks = {
        "train": [("ted_1", [0, 1, 2], "en-us"), ("ted_2", [3, 4, 5], "en-gb")],
        "dev": [("ted_3", [6, 7], "en-us")],
        "tst-COMMON": [("ted_4", [8, 9], "en-gb")],
    }
    for split, split_talks in talks.items():
        base = root / "en-de" / "data" / split
        (base / "wav").mkdir(parents=True, exist_ok=True)
        (base / "txt").mkdir(parents=True, exist_ok=True)
        rows = []
        for talk, ids, v in split_talks:
            pieces, t = [np.zeros(int(PAUSE * 16000), np.float32)], PAUSE
            for i in ids:
                w = voice(PAIRS[i][0], v)
                rows.append(
                    (
                        f"- {{duration: {len(w) / 16000:.6f}, offset: {t:.6f}, rW: {len(PAIRS[i][0].split())}, "
                        f"uW: 0, speaker_id: spk.{talk[4:]}, wav: {talk}.wav}}",
                        i,
                    )
                )
                pieces += [w, np.zeros(int(PAUSE * 16000), np.float32)]
                t += len(w) / 16000 + PAUSE
            sf.write(base / "wav" / f"{talk}.wav", np.concatenate(pieces), 16000, subtype="PCM_16")
        if split == "train":
            rows[0], rows[1] = rows[1], rows[0]
        (base / "txt" / f"{split}.yaml").write_text("".join(r + "\n" for r, _ in rows))
        (base / "txt" / f"{split}.en").write_text("".join(PAIRS[i][0] + "\n" for _, i in rows))
        (base / "txt" / f"{split}.de").write_text("".join(PAIRS[i][1] + "\n" for _, i in rows))


COVOST = [  # (clip id, pair index, split); the German side is the source
    ("10000001", 0, "train"),
    ("10000002", 1, "train"),
    ("10000003", 2, "train_covost"),
    ("10000004", 3, "dev"),
    ("10000005", 4, "test"),
    ("10000006", 5, "test"),
]
QUOTED = ('Er sagte "Hallo" zu mir.', 'He said "hello" to me.')


def make_covost(root: Path) -> None:
    """de->en: six mp3 clips at 48 kHz, validated.tsv (one extra clip), covost_v2.de_en.tsv."""
    base = root / "de"
    (base / "clips").mkdir(parents=True, exist_ok=True)
    rows = [(cid, PAIRS[i][1], PAIRS[i][0], split) for cid, i, split in COVOST]
    rows.append(("10000007", QUOTED[0], QUOTED[1], "train"))
    validated = [
        ("client_a" if n % 2 else "client_b", f"common_voice_de_{cid}.mp3", de)
        for n, (cid, de, _, _) in enumerate(rows)
    ]
    validated.append(("client_c", "common_voice_de_10000099.mp3", "Dieser Satz hat keine Übersetzung."))
    for cid, de, _, _ in rows:
        sf.write(
            base / "clips" / f"common_voice_de_{cid}.mp3", resample(voice(de, "de"), 16000, 48000), 48000, format="MP3"
        )
    with open(base / "validated.tsv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, quotechar=None, escapechar="\\", lineterminator="\n")
        w.writerow(["client_id", "path", "sentence", "up_votes", "down_votes", "age", "gender", "accent"])
        for client, path, sentence in validated:
            w.writerow([client, path, sentence, "2", "0", "", "", ""])
    with open(base / "covost_v2.de_en.tsv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, quotechar=None, escapechar="\\", lineterminator="\n")
        w.writerow(["path", "sentence", "translation", "client_id", "split"])
        for (cid, de, en, split), (client, _, _) in zip(rows, validated):
            w.writerow([f"common_voice_de_{cid}.mp3", de, en, client, split])


if __name__ == "__main__":
    make_mustc(HERE / "mustc")
    make_covost(HERE / "covost2")
