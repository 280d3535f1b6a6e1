"""English-German and English-Spanish pairs from the gettext catalogs (`.mo` files) of installed Debian
packages: every message's English `msgid` with its translation, read at run time from
/usr/share/locale/<lang>/LC_MESSAGES/*.mo. Each catalog is under its package's own licence (named in
/usr/share/doc/<package>/copyright), so the summary lists the packages the pairs came from.

Software text: menu items, messages, option help. Plural entries give their singular form; a message's
context (msgctxt) is left out; keyboard accelerators (`_Open`, `&Open`) lose their marker. The format codes
and markup that many messages hold are left in here, for the shared filters (speechmt_corpora.mt_filters)
to count and drop.
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from pathlib import Path
from typing import Iterator

LOCALE_DIR = Path("/usr/share/locale")
DPKG_INFO = Path("/var/lib/dpkg/info")
DOC_DIR = Path("/usr/share/doc")
MO_MAGIC = (0x950412DE, 0xDE120495)
_ACCELERATOR = re.compile(r"(?<![\w_&])[_&](?=\w)")
_CHARSET = re.compile(r"charset=([\w.-]+)", re.IGNORECASE)
_LICENSE = re.compile(r"^License:\s*(\S.*)$", re.MULTILINE)


class CatalogError(ValueError):
    """A .mo file that cannot be read (truncated, not a catalog); the message names the file."""


def read_mo(path: Path) -> Iterator[tuple[str, str]]:
    """(msgid, msgstr) of every translated message of a .mo file, decoded with the catalog's charset; the
    header, untranslated messages and undecodable ones are skipped. CatalogError for a malformed file."""
    data = Path(path).read_bytes()
    if len(data) < 28:
        raise CatalogError(f"{path}: too short for a gettext catalog")
    magic = struct.unpack("<I", data[:4])[0]
    order = "<" if magic == MO_MAGIC[0] else ">" if magic == MO_MAGIC[1] else None
    if order is None:
        raise CatalogError(f"{path}: not a gettext catalog (bad magic number)")
    _, n, originals, translations = struct.unpack(order + "4I", data[4:20])
    if originals + 8 * n > len(data) or translations + 8 * n > len(data):
        raise CatalogError(f"{path}: truncated gettext catalog")

    def entry(table: int, i: int) -> bytes:
        length, offset = struct.unpack(order + "2I", data[table + 8 * i : table + 8 * i + 8])
        if offset + length > len(data):
            raise CatalogError(f"{path}: truncated gettext catalog")
        return data[offset : offset + length]

    charset = "utf-8"
    for i in range(n):
        msgid, msgstr = entry(originals, i), entry(translations, i)
        if not msgid:  # the header: "Content-Type: text/plain; charset=UTF-8"
            found = _CHARSET.search(msgstr.decode("ascii", "replace"))
            charset = found.group(1) if found and found.group(1).upper() != "CHARSET" else "utf-8"
            continue
        try:
            source, target = msgid.decode(charset), msgstr.decode(charset)
        except (UnicodeDecodeError, LookupError):
            continue
        source = source.split("\x04", 1)[-1].split("\x00", 1)[0]  # context dropped; a plural's singular
        target = target.split("\x00", 1)[0]
        if source and target:
            yield source, target


def strip_accelerator(text: str) -> str:
    """`_Open File` -> `Open File`, `&Save` -> `Save` (one marker before a letter, as GTK and Qt write them)."""
    return _ACCELERATOR.sub("", text)


def catalog_pairs(lang: str, locale_dir: Path = LOCALE_DIR) -> Iterator[tuple[str, str, str]]:
    """(English, translation, catalog path) of every message of every .mo file for `lang`, file by file in
    name order. A catalog that cannot be read is yielded as ("", "", path) so that it is counted, not lost."""
    for path in sorted((Path(locale_dir) / lang / "LC_MESSAGES").glob("*.mo")):
        try:
            messages = list(read_mo(path))
        except (CatalogError, OSError):
            yield "", "", str(path)
            continue
        for source, target in messages:
            yield strip_accelerator(source), strip_accelerator(target), str(path)


def package_owners(paths: list[str], info_dir: Path = DPKG_INFO) -> dict[str, str]:
    """{file path: Debian package that installed it} for the given paths, from dpkg's file lists."""
    wanted, owners = set(paths), {}
    for listing in sorted(Path(info_dir).glob("*.list")):
        package = listing.stem.split(":", 1)[0]
        try:
            lines = listing.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        owners.update((line, package) for line in lines if line in wanted)
    return owners


def package_licence(package: str, doc_dir: Path = DOC_DIR) -> str:
    """The licence a Debian package's machine-readable copyright file gives first (its `Files: *` stanza,
    usually), or a pointer to the file when it names none."""
    path = Path(doc_dir) / package / "copyright"
    try:
        found = _LICENSE.search(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return "unknown (no copyright file)"
    return found.group(1).strip() if found else f"see {path}"


def licences(catalog_counts: Counter) -> dict[str, dict]:
    """{package: {"messages": n, "licence": ...}} for messages counted by catalog path (a catalog no package owns
    is listed under its own file name)."""
    owners = package_owners(list(catalog_counts))
    out: dict[str, dict] = {}
    for path, n in sorted(catalog_counts.items()):
        package = owners.get(path)
        name = package or Path(path).name
        entry = out.setdefault(
            name,
            {"messages": 0, "licence": package_licence(package) if package else "unknown (no Debian package owns it)"},
        )
        entry["messages"] += n
    return out
