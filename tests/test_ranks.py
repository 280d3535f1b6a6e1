"""build_once under 2 gloo processes: rank 0 builds while rank 1 waits, both read what was built."""

from pathlib import Path

import pytest
import torch.distributed as tdist
import torch.multiprocessing as mp

from speechmt.ranks import build_once, rank, world_size


def _worker(r: int, folder: str) -> None:
    tdist.init_process_group("cpu:gloo", init_method=f"file://{folder}/store", rank=r, world_size=2)
    target, log = Path(folder) / "built.txt", Path(folder) / "builds.log"

    def build() -> str:
        with open(log, "a") as f:
            f.write(f"rank {rank()}\n")
        target.with_suffix(".tmp").write_text("content")
        target.with_suffix(".tmp").rename(target)  # whole when it appears
        return target.read_text()

    got = build_once(target.exists, build, target.read_text, "built.txt")
    (Path(folder) / f"read{r}.txt").write_text(f"{got} {world_size()}")
    tdist.destroy_process_group()


@pytest.mark.slow  # two spawned processes: ~8 s each
@pytest.mark.parametrize("ready_before", [False, True])
def test_rank_0_builds_once_and_every_rank_reads_it(tmp_path, ready_before):
    if ready_before:
        (tmp_path / "built.txt").write_text("content")
    mp.spawn(_worker, args=(str(tmp_path),), nprocs=2, join=True)
    builds = (tmp_path / "builds.log").read_text().splitlines() if (tmp_path / "builds.log").exists() else []
    assert builds == ([] if ready_before else ["rank 0"])
    assert [(tmp_path / f"read{r}.txt").read_text() for r in (0, 1)] == ["content 2", "content 2"]
