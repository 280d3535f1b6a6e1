"""Real recorded speech beyond English, built at run time from Debian packages, with references written for speechmt.

1. X->English (`build_real_x_en`): the telephone prompts Asterisk ships recorded by human speakers in French
   (asterisk-core-sounds-fr-wav: June Wallack, Canadian French), Spanish (-es-wav: Allison Smith, Mexican Spanish)
   and Italian (-it-wav: Carlo, Italian), CC-BY-SA-3.0. The source-side transcripts are read from the packages'
   own lists (asterisk-core-sounds-<lang>: /usr/share/doc/.../core-sounds-<lang>.txt.gz); the English references
   (PROMPTS) were written for speechmt, one per prompt, shared by the three languages. Written in the CoVoST 2
   layout, every clip in the split `test`:

       OUT/<lang>/clips/asterisk_<lang>_<prompt>.wav   16 kHz mono 16-bit, as recorded (8 kHz telephone audio)
       OUT/<lang>/validated.tsv                        client_id, path, sentence (the package's transcript), ...
       OUT/<lang>/covost_v2.<lang>_en.tsv              path, sentence, translation (PROMPTS), client_id, split
       OUT/<lang>/sources.tsv                          prompt, package, version, file, licence

   so that `speechmt data prepare covost2 --root OUT --src-langs "fr es it" --tgt-lang en` reads it.
2. tst-REAL in more target languages (`build_tst_real_targets`): tst-REAL's English segments (benchmarks/real_speech,
   built by its build.sh into ROOT/en-de/data/tst-REAL) with French, Spanish and Italian references written for
   speechmt (tst_real_references.tsv beside this file, keyed by the English text), as ROOT/en-<lang>/data/tst-REAL,
   the same wav files (hard links where the file system allows) and yaml.

Nothing of the packages' text or audio is in this repository. A prompt whose audio or transcript is missing is left
out and counted with its reason in the summary.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import soundfile as sf

from speechmt.audio import resample
from speechmt_corpora.common import SynthError, write_lines, write_tsv

SAMPLE_RATE = 16000
SOUNDS_DIR = Path("/usr/share/asterisk/sounds")
DOC_DIR = Path("/usr/share/doc")
LICENCE = "CC-BY-SA-3.0 (Asterisk core sounds, Digium)"
# language -> (folder under SOUNDS_DIR, speaker, audio package, transcript package)
VOICES = {
    "fr": ("fr_CA_f_June", "june_wallack", "asterisk-core-sounds-fr-wav", "asterisk-core-sounds-fr"),
    "es": ("es_MX_f_Allison", "allison_smith", "asterisk-core-sounds-es-wav", "asterisk-core-sounds-es"),
    "it": ("it_IT_m_Carlo", "carlo", "asterisk-core-sounds-it-wav", "asterisk-core-sounds-it"),
}
REAL_TARGETS = ("fr", "es", "it")  # the languages of tst_real_references.tsv
REFERENCES = Path(__file__).with_name("tst_real_references.tsv")

# English references written for speechmt: what each prompt says, in plain English.
PROMPTS = {
    "agent-pass": "Please enter your password followed by the pound key.",
    "auth-incorrect": "Login incorrect. Please enter your password followed by the pound key.",
    "conf-extended": "The conference has been extended.",
    "conf-getconfno": "Please enter your conference number followed by the pound key.",
    "conf-getpin": "Please enter the conference PIN.",
    "conf-invalid": "That is not a valid conference number. Please try again.",
    "conf-kicked": "You have been kicked out of this conference.",
    "conf-leaderhasleft": "The leader has left the conference.",
    "conf-lockednow": "The conference is now locked.",
    "conf-noempty": "There are no empty conferences at the moment.",
    "conf-now-recording": "The conference is now being recorded.",
    "conf-onlyperson": "You are currently the only person in this conference.",
    "conf-placeintoconf": "You will now join the conference.",
    "conf-waitforleader": "The conference will begin when the leader arrives.",
    "confbridge-conf-end": "The conference has ended.",
    "confbridge-invalid": "You have entered an invalid option.",
    "confbridge-removed": "You have been removed from the conference.",
    "demo-echodone": "The echo test is complete.",
    "demo-thanks": "Goodbye. Thank you for trying the Asterisk open source PBX.",
    "demo-nomatch": "Sorry, there are no entries for those keywords.",
    "dir-instr": "If this is the person you are looking for, press 1. Otherwise, press star.",
    "dir-nomatch": "No directory entry matches your search.",
    "followme/options": "Press 1 to accept this call, or 2 to reject it.",
    "followme/sorry": "Sorry, I could not find the person you are calling.",
    "followme/status": "The person you are calling is not at their desk. I will try to find them for you.",
    "invalid": "Sorry, that is not a valid extension. Please try again.",
    "priv-recordintro": "At the tone, please say your name.",
    "privacy-prompt": "Please enter your phone number, starting with the area code.",
    "ss-noservice": "The number you have dialed is not in service. Please check the number and try again.",
    "tt-monkeysintro": "They have been carried away by monkeys.",
    "tt-somethingwrong": "Something is terribly wrong.",
    "tt-weasels": "Weasels have eaten our phone system.",
    "vm-delete": "Press 7 to delete this message.",
    "vm-intro": "Please leave your message after the tone. When you are done, hang up or press the pound key.",
    "vm-invalidpassword": "That is not a valid password. Please try again.",
    "vm-mailboxfull": "Sorry, but this mailbox cannot accept any more messages.",
    "vm-msgsaved": "Your message has been saved.",
    "vm-passchanged": "Your password has been changed.",
    "vm-nobodyavail": "Nobody is available to take your call right now.",
    "vm-savefolder": "In which folder should this message be saved?",
    "vm-sorry": "Sorry, I did not understand your answer.",
    "vm-tooshort": "Your message is too short.",
    "vm-next": "Press 6 to hear the next message.",
    "vm-prev": "Press 4 for the previous message.",
    "vm-repeat": "Press 5 to hear this message again.",
    "vm-undelete": "Press 7 to recover this message.",
}
_BRACKETS = re.compile(r"[\[\]]")


def read_transcripts(lang: str, doc_dir: Path = DOC_DIR) -> dict[str, str]:
    """{prompt: transcript} from a core sounds package's list (`name: text` lines, `;` comments)."""
    package = VOICES[lang][3]
    path = doc_dir / package / f"core-sounds-{lang}.txt.gz"
    if not path.is_file():
        raise SynthError(f"{path} not found: install the Debian package {package}")
    found = {}
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            name, sep, text = line.partition(":")
            if sep and not line.startswith(";") and text.strip():
                found[name.strip()] = " ".join(_BRACKETS.sub("", text).split())
    return found


def package_version(package: str) -> str:
    """The installed version of a Debian package, or "unknown"."""
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, check=False
        ).stdout
    except OSError:
        out = ""
    return out.strip() or "unknown"


def load_16k(path: Path) -> np.ndarray:
    """A recording as float32 mono at 16 kHz, (T,)."""
    wave, rate = sf.read(path, dtype="float32", always_2d=True)
    wave = wave.mean(axis=1)
    return resample(wave, rate, SAMPLE_RATE) if rate != SAMPLE_RATE else wave


def build_real_x_en(
    out: Path, langs: tuple[str, ...] = REAL_TARGETS, sounds_dir: Path = SOUNDS_DIR, doc_dir: Path = DOC_DIR
) -> dict:
    """Writes the Asterisk prompts of `langs` with English references in the CoVoST 2 layout under `out` (module
    docstring); returns the summary (also out/real_x_en_summary.json): clips and seconds per direction, and every
    prompt left out with its reason."""
    unknown = [lang for lang in langs if lang not in VOICES]
    if unknown:
        raise SynthError(f"no recorded prompts for {' '.join(unknown)}: expected some of {' '.join(VOICES)}")
    summary: dict = {"corpus": "real-x-en", "licence": LICENCE, "directions": {}}
    for lang in langs:
        folder, speaker, audio_package, text_package = VOICES[lang]
        voice_dir = sounds_dir / folder
        if not voice_dir.is_dir():
            raise SynthError(f"{voice_dir} not found: install the Debian package {audio_package}")
        transcripts = read_transcripts(lang, doc_dir)
        base = out / lang
        if base.exists():
            shutil.rmtree(base)
        (base / "clips").mkdir(parents=True)
        rows, sources, skipped, seconds = [], [], [], 0.0
        for prompt, english in PROMPTS.items():
            wav = voice_dir / f"{prompt}.wav"
            if prompt not in transcripts:
                skipped.append({"prompt": prompt, "reason": "no transcript"})
                continue
            if not wav.is_file():
                skipped.append({"prompt": prompt, "reason": "no recording"})
                continue
            wave = load_16k(wav)
            clip = f"asterisk_{lang}_{prompt.replace('/', '_')}.wav"
            sf.write(base / "clips" / clip, wave, SAMPLE_RATE, subtype="PCM_16")
            seconds += len(wave) / SAMPLE_RATE
            rows.append((clip, transcripts[prompt], english))
            sources.append((prompt, audio_package, package_version(audio_package), str(wav), LICENCE))
        client = f"asterisk_{speaker}"
        write_tsv(
            base / "validated.tsv",
            ("client_id", "path", "sentence", "up_votes", "down_votes", "age", "gender", "accent"),
            ((client, clip, text, 2, 0, "", "", "") for clip, text, _ in rows),
        )
        write_tsv(
            base / f"covost_v2.{lang}_en.tsv",
            ("path", "sentence", "translation", "client_id", "split"),
            ((clip, text, english, client, "test") for clip, text, english in rows),
        )
        write_tsv(base / "sources.tsv", ("prompt", "package", "version", "file", "licence"), sources)
        summary["directions"][f"{lang}-en"] = {
            "clips": len(rows),
            "seconds": round(seconds, 2),
            "speaker": client,
            "skipped": skipped,
        }
    (out / "real_x_en_summary.json").write_text(
        json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return summary


def read_references(path: Path = REFERENCES) -> dict[str, dict[str, str]]:
    """{English segment: {lang: reference}} from tst_real_references.tsv (header en, then the languages)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    table = {}
    for n, line in enumerate(lines[1:], 2):
        fields = line.split("\t")
        if len(fields) != len(header) or not all(f.strip() for f in fields):
            raise SynthError(f"{path}:{n}: {len(fields)} fields (or an empty one), expected {len(header)}")
        table[fields[0]] = dict(zip(header[1:], fields[1:]))
    return table


def build_tst_real_targets(root: Path, langs: tuple[str, ...] = REAL_TARGETS, split: str = "tst-REAL") -> dict:
    """Writes root/en-<lang>/data/<split> for each of `langs` from root/en-de/data/<split> (benchmarks/real_speech's
    build): the same audio and segments, references from tst_real_references.tsv. Returns {lang: segments}.
    SynthError when the English split is missing or a segment has no reference."""
    source = root / "en-de" / "data" / split
    en_path = source / "txt" / f"{split}.en"
    if not en_path.is_file():
        raise SynthError(f"{en_path} not found: build it first with `bash benchmarks/real_speech/build.sh {root}`")
    english = en_path.read_text(encoding="utf-8").splitlines()
    table = read_references()
    missing = [e for e in english if e not in table]
    if missing:
        raise SynthError(
            f"{len(missing)} segment(s) of {en_path} have no reference in {REFERENCES}, e.g. {missing[0]!r}"
        )
    counts = {}
    for lang in langs:
        target = root / f"en-{lang}" / "data" / split
        if target.exists():
            shutil.rmtree(target)
        (target / "txt").mkdir(parents=True)
        shutil.copytree(source / "wav", target / "wav", copy_function=_link_or_copy)
        shutil.copy(source / "txt" / f"{split}.yaml", target / "txt" / f"{split}.yaml")
        shutil.copy(en_path, target / "txt" / f"{split}.en")
        write_lines(target / "txt" / f"{split}.{lang}", (table[e][lang] for e in english))
        if (source / "sources.tsv").is_file():
            shutil.copy(source / "sources.tsv", target / "sources.tsv")
        counts[lang] = len(english)
    return counts


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst
