"""Builds tst-REAL and tst-REAL2, real recorded English speech, as MuST-C-layout splits from Debian packages.

Reads segments.tsv (beside this file) and writes, for each SPLIT in SPLITS (a talk named `real_*` belongs to
tst-REAL, `real2_*` to tst-REAL2),

    OUT/en-de/data/SPLIT/wav/<talk>.wav        16 kHz mono 16-bit PCM
    OUT/en-de/data/SPLIT/txt/SPLIT.yaml        one `- {duration: ..., offset: ..., ...}` item per segment
    OUT/en-de/data/SPLIT/txt/SPLIT.en          line i belongs to yaml item i
    OUT/en-de/data/SPLIT/txt/SPLIT.de
    OUT/en-de/data/SPLIT/sources.tsv           talk, package, version, file, licence

build.sh installs the packages first (or unpacks them where it is not root) and passes the folders to search
with --search-root. Needs numpy, soundfile and soxr (the project's .venv has them).
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

SAMPLE_RATE = 16000
SPLITS = ("tst-REAL", "tst-REAL2")  # talk prefix real_ -> tst-REAL, real2_ -> tst-REAL2
COLUMNS = ("talk", "source", "offset", "duration", "speaker", "transcript", "en", "de")
TRANSCRIPT_KINDS = ("shipped", "shipped-name", "whisper", "whisper+published")
# Licence of each source package's audio, from /usr/share/doc/<package>/copyright (Debian 12).
LICENCES = {
    "pocketsphinx-testdata": "BSD-2-Clause (CMU); the LibriVox recordings are public domain",
    "sphinxtrain": "BSD-2-Clause (CMU)",
    "alsa-utils": "GPL-2",
    "codec2-examples": "LGPL-2.1 (David Rowe)",
    "asterisk-core-sounds-en-wav": "CC-BY-SA-3.0 (recorded by Allison Smith, financed by Digium)",
    "warzone2100-data": "GPL-2+ (Eidos Interactive 1999-2004, Warzone 2100 Project)",
    "linphone-common": "GPL-3+ (Belledonne Communications)",
    "speech-dispatcher": "GPL-2+ (Brailcom)",
}


class BuildError(Exception):
    """A bad row in segments.tsv or a source file that cannot be found or read; the message says which."""


@dataclass(frozen=True)
class Row:
    """One segment of segments.tsv; duration None means the whole source file."""

    line: int
    split: str
    talk: str
    package: str
    path: str
    member: str | None
    raw_rate: int | None
    offset: float
    duration: float | None
    speaker: str
    transcript: str
    en: str
    de: str


def split_of(talk: str, where: str) -> str:
    """The split a talk belongs to, by its name: real_* -> tst-REAL, realN_* -> tst-REALN."""
    m = re.fullmatch(r"real(\d*)_[A-Za-z0-9_.-]+", talk)
    split = f"tst-REAL{m.group(1)}" if m else None
    if split not in SPLITS:
        raise BuildError(f"{where}: talk {talk!r} must be named real_* (tst-REAL) or real2_* (tst-REAL2)")
    return split


def parse_source(text: str, where: str) -> tuple[str, str, str | None, int | None]:
    """'PACKAGE:PATH[!MEMBER][#rawRATE]' -> (package, path, zip member or None, raw sample rate or None)."""
    package, sep, path = text.partition(":")
    if not sep or not package or not path.startswith("/"):
        raise BuildError(f"{where}: source must be PACKAGE:/ABSOLUTE/PATH, got {text!r}")
    raw_rate = member = None
    if "#" in path:
        path, _, fmt = path.partition("#")
        if not fmt.startswith("raw") or not fmt[3:].isdigit():
            raise BuildError(f"{where}: unknown format {fmt!r} (expected rawRATE, e.g. raw16000)")
        raw_rate = int(fmt[3:])
    if "!" in path:
        path, _, member = path.partition("!")
        if not member or member.startswith("/"):
            raise BuildError(f"{where}: '!' must be followed by a path inside the zip archive, got {text!r}")
    return package, path, member, raw_rate


def read_rows(path: Path) -> list[Row]:
    """The segments of segments.tsv in file order; comment lines (#) and the header are skipped."""
    rows, header_seen = [], False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        where = f"{path}:{n}"
        if not header_seen:
            if tuple(fields) != COLUMNS:
                raise BuildError(f"{where}: header must be {' '.join(COLUMNS)}")
            header_seen = True
            continue
        if len(fields) != len(COLUMNS):
            raise BuildError(f"{where}: {len(fields)} fields, expected {len(COLUMNS)}")
        f = dict(zip(COLUMNS, fields))
        if f["transcript"] not in TRANSCRIPT_KINDS:
            raise BuildError(f"{where}: transcript must be one of {', '.join(TRANSCRIPT_KINDS)}")
        if not f["en"].strip() or not f["de"].strip():
            raise BuildError(f"{where}: empty English or German text")
        split = split_of(f["talk"], where)
        package, src, member, raw_rate = parse_source(f["source"], where)
        try:
            offset = float(f["offset"])
            duration = None if f["duration"] == "-" else float(f["duration"])
        except ValueError:
            raise BuildError(f"{where}: offset and duration must be seconds (duration '-' = whole file)") from None
        if offset < 0 or (duration is not None and duration <= 0) or (duration is None and offset != 0):
            raise BuildError(f"{where}: bad offset {offset} / duration {f['duration']}")
        rows.append(
            Row(
                n,
                split,
                f["talk"],
                package,
                src,
                member,
                raw_rate,
                offset,
                duration,
                f["speaker"],
                f["transcript"],
                f["en"].strip(),
                f["de"].strip(),
            )
        )
    if not rows:
        raise BuildError(f"{path}: no segments")
    return rows


def find_file(pattern: str, roots: list[str]) -> Path:
    """The first match of an absolute path pattern ('*' allowed) under any of the roots, in order."""
    for root in roots:
        hits = sorted(glob.glob(root.rstrip("/") + pattern))
        if hits:
            return Path(hits[0])
    raise BuildError(f"{pattern}: not found under {', '.join(roots)} (is its package installed?)")


def load_16k(path: Path, raw_rate: int | None, member: str | None = None) -> np.ndarray:
    """Any soundfile-readable file (or headerless s16le mono PCM at raw_rate), or that file as a member of the zip
    archive at path (e.g. Warzone 2100's base.wz) -> float32 (T,) at 16 kHz, mono."""
    where = f"{path}!{member}" if member else str(path)
    try:
        if member is not None:
            with zipfile.ZipFile(path) as archive:
                data = archive.read(member)
        if raw_rate is not None:
            raw = np.frombuffer(data, dtype="<i2") if member is not None else np.fromfile(path, dtype="<i2")
            wave, rate = raw.astype(np.float32) / 32768.0, raw_rate
        else:
            wave, rate = sf.read(io.BytesIO(data) if member is not None else path, dtype="float32", always_2d=True)
            wave = wave.mean(axis=1)  # (T, C) -> (T,)
    except (OSError, RuntimeError, ValueError, KeyError, zipfile.BadZipFile) as e:
        raise BuildError(f"{where}: cannot read audio ({e})") from None
    if rate != SAMPLE_RATE:
        wave = soxr.resample(wave, rate, SAMPLE_RATE, quality="VHQ").astype(np.float32)
    return np.clip(wave, -1.0, 32767 / 32768)


def package_version(package: str) -> str:
    """The installed (dpkg) version of a package, or 'unpacked' when it was only unpacked for this build."""
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}|${Version}", package], capture_output=True, text=True, check=False
        ).stdout
    except FileNotFoundError:
        out = ""
    status, _, version = out.partition("|")
    return version if status.endswith(" installed") and version else "unpacked"


def build(segments: Path, out: Path, roots: list[str]) -> dict[str, dict]:
    """Writes each split that segments.tsv has rows for under out/en-de/data/SPLIT; returns, per split, its counts
    and total duration."""
    rows = read_rows(segments)
    return {
        split: build_split(split, [r for r in rows if r.split == split], segments, out, roots)
        for split in SPLITS
        if any(r.split == split for r in rows)
    }


def build_split(split: str, rows: list[Row], segments: Path, out: Path, roots: list[str]) -> dict:
    """Writes one split (its rows in file order) under out/en-de/data/SPLIT; returns counts and total duration."""
    talks: dict[str, list[Row]] = {}
    for row in rows:
        talks.setdefault(row.talk, []).append(row)
    split_dir = out / "en-de" / "data" / split
    (split_dir / "wav").mkdir(parents=True, exist_ok=True)
    (split_dir / "txt").mkdir(parents=True, exist_ok=True)
    yaml_lines, en_lines, de_lines, source_lines = [], [], [], ["talk\tpackage\tversion\tfile\tlicence"]
    total = 0.0
    for talk, segs in talks.items():
        sources = {(r.package, r.path, r.member, r.raw_rate) for r in segs}
        if len(sources) != 1:
            raise BuildError(
                f"talk {talk}: segments name {len(sources)} different sources (lines "
                f"{', '.join(str(r.line) for r in segs)})"
            )
        package, pattern, member, raw_rate = sources.pop()
        path = find_file(pattern, roots)
        wave = load_16k(path, raw_rate, member)
        length = len(wave) / SAMPLE_RATE
        sf.write(split_dir / "wav" / f"{talk}.wav", wave, SAMPLE_RATE, subtype="PCM_16")
        file = f"{pattern}!{member}" if member else pattern
        source_lines.append(
            f"{talk}\t{package}\t{package_version(package)}\t{file}\t"
            f"{LICENCES.get(package, 'see /usr/share/doc/' + package + '/copyright')}"
        )
        for r in sorted(segs, key=lambda r: r.offset):
            duration = length - r.offset if r.duration is None else r.duration
            if r.offset + duration > length + 0.01:
                raise BuildError(
                    f"{segments}:{r.line}: segment {r.offset:.3f}+{duration:.3f}s runs past the end "
                    f"of {path}{'!' + member if member else ''} ({length:.3f}s)"
                )
            duration = min(duration, length - r.offset)
            total += duration
            yaml_lines.append(
                f"- {{duration: {duration:.6f}, offset: {r.offset:.6f}, rW: {len(r.en.split())}, "
                f"uW: 0, speaker_id: {r.speaker}, wav: {talk}.wav}}"
            )
            en_lines.append(r.en)
            de_lines.append(r.de)
    txt = split_dir / "txt"
    for name, lines in ((f"{split}.yaml", yaml_lines), (f"{split}.en", en_lines), (f"{split}.de", de_lines)):
        (txt / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (split_dir / "sources.tsv").write_text("\n".join(source_lines) + "\n", encoding="utf-8")
    return {
        "segments": len(yaml_lines),
        "talks": len(talks),
        "speakers": len({r.speaker for r in rows}),
        "seconds": round(total, 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--segments", default=str(Path(__file__).with_name("segments.tsv")))
    p.add_argument("--out", required=True, help="corpus root: OUT/en-de/data/tst-REAL and tst-REAL2 are written")
    p.add_argument(
        "--search-root",
        action="append",
        default=[],
        help="folder that the packages' absolute paths are looked up under (repeatable; default /)",
    )
    p.add_argument("--packages", action="store_true", help="print the packages segments.tsv names and exit")
    args = p.parse_args(argv)
    try:
        if args.packages:
            print(" ".join(sorted({r.package for r in read_rows(Path(args.segments))})))
            return 0
        stats = build(Path(args.segments), Path(args.out), args.search_root or ["/"])
    except BuildError as e:
        print(f"real_speech/build: error: {e}", file=sys.stderr)
        return 1
    for split, st in stats.items():
        print(
            f"real_speech/build: {split}: {st['segments']} segments in {st['talks']} talks, {st['speakers']} "
            f"speakers, {st['seconds']:.1f} s of speech -> {os.path.join(args.out, 'en-de', 'data', split)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
