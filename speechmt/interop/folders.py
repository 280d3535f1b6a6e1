"""Writing a converted model folder so that it is complete or absent: written under a temporary sibling name,
given the modes a plain mkdir/open would have, then renamed over `out_dir`."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable


def default_permissions(folder: Path) -> None:
    """The modes a plain mkdir/open would give under the current umask (mkdtemp and some writers use 0700/0600)."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for f in folder.iterdir():
        f.chmod(0o666 & ~umask)


def write_folder(out_dir: Path, write: Callable[[Path], None]) -> Path:
    """Calls `write(tmp)` on a new temporary folder beside `out_dir`, then replaces `out_dir` with it; on any
    failure the temporary folder is removed and `out_dir` is left as it was. Returns out_dir."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        write(tmp)
        default_permissions(tmp)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
