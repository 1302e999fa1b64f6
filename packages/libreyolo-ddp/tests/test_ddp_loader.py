"""build_dataloader, set_loader_epoch and shard_range in one process (multi-rank cases: torchrun tests)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import Dataset, DistributedSampler, TensorDataset

import libreyolo_ddp as ddp

_WORKER_MARK = -1


def _mark_worker(worker_id: int) -> None:
    global _WORKER_MARK
    _WORKER_MARK = 100 + worker_id


class NumpyDrawDataset(Dataset):
    """Returns a numpy random draw: shows whether workers are seeded apart and reproducibly."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> tuple[int, int, int]:
        import numpy as np

        info = torch.utils.data.get_worker_info()
        return int(np.random.randint(0, 2**31 - 1)), info.id if info else -1, _WORKER_MARK


@pytest.mark.parametrize(("n", "world"), [(23, 2), (10, 3), (2, 4), (0, 2), (7, 1)])
def test_shard_range_covers_every_item_exactly_once_with_balanced_shards(n, world):
    shards = [ddp.shard_range(n, r, world) for r in range(world)]
    items = [i for s in shards for i in s]
    assert items == list(range(n))
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize(("args", "fragment"), [((5, 2, 2), "rank=2"), ((5, 0, 0), "world_size=0"),
                                                 ((-1, 0, 1), "n=-1")])
def test_shard_range_rejects_out_of_range_arguments(args, fragment):
    with pytest.raises(ValueError, match=fragment):
        ddp.shard_range(*args)


def _items(loader) -> list[int]:
    return [int(i) for batch in loader for i in batch[0]]


def test_single_process_loader_defaults():
    data = TensorDataset(torch.arange(10))
    loader = ddp.build_dataloader(data, batch_size=3, shuffle=False, workers=0, seed=0)
    assert loader.pin_memory == torch.cuda.is_available()
    assert not loader.persistent_workers
    assert not isinstance(loader.sampler, DistributedSampler)
    assert _items(loader) == list(range(9))  # drop_last by default: the partial batch goes
    keep = ddp.build_dataloader(data, batch_size=3, shuffle=False, workers=0, seed=0, drop_last=False)
    assert _items(keep) == list(range(10))
    with_workers = ddp.build_dataloader(data, batch_size=3, shuffle=False, workers=1, seed=0, prefetch_factor=3)
    assert with_workers.persistent_workers and with_workers.prefetch_factor == 3


def test_shuffle_is_reproducible_from_the_seed_and_changes_with_it():
    data = TensorDataset(torch.arange(32))

    def order(seed: int) -> list[int]:
        return _items(ddp.build_dataloader(data, batch_size=4, shuffle=True, workers=0, seed=seed))
    assert order(3) == order(3)
    assert order(3) != order(4)
    assert sorted(order(3)) == list(range(32))


def test_range_shard_in_one_process_is_the_whole_dataset():
    data = TensorDataset(torch.arange(5))
    loader = ddp.build_dataloader(data, batch_size=2, shuffle=False, workers=0, seed=0, shard="range",
                                  drop_last=False)
    assert _items(loader) == [0, 1, 2, 3, 4]


def test_bad_loader_options_are_rejected_with_the_fix():
    data = TensorDataset(torch.arange(5))
    with pytest.raises(ValueError, match="batch_size=0"):
        ddp.build_dataloader(data, batch_size=0, shuffle=False, workers=0, seed=0)
    with pytest.raises(ValueError, match="persistent_workers=True needs workers > 0"):
        ddp.build_dataloader(data, batch_size=1, shuffle=False, workers=0, seed=0, persistent_workers=True)
    with pytest.raises(ValueError, match="shard='sampler' and an explicit sampler"):
        ddp.build_dataloader(data, batch_size=1, shuffle=False, workers=0, seed=0, shard="sampler",
                             sampler=torch.utils.data.SequentialSampler(data))
    with pytest.raises(ValueError, match="shard='rows'"):
        ddp.build_dataloader(data, batch_size=1, shuffle=False, workers=0, seed=0, shard="rows")  # type: ignore[arg-type]


def test_set_loader_epoch_reaches_a_distributed_sampler_and_reports_when_none():
    data = TensorDataset(torch.arange(8))
    plain = ddp.build_dataloader(data, batch_size=2, shuffle=True, workers=0, seed=0)
    assert ddp.set_loader_epoch(plain, 1) is False
    sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True, seed=0)
    loader = ddp.build_dataloader(data, batch_size=2, shuffle=False, workers=0, seed=0, sampler=sampler,
                                  shard="none")
    first = _items(loader)
    assert ddp.set_loader_epoch(loader, 1) is True and sampler.epoch == 1
    assert _items(loader) != first


def test_workers_draw_different_reproducible_numpy_streams():
    pytest.importorskip("numpy")

    def run() -> list[tuple[int, int, int]]:
        loader = ddp.build_dataloader(NumpyDrawDataset(), batch_size=1, shuffle=False, workers=2, seed=5,
                                      persistent_workers=False, worker_init_fn=_mark_worker)
        return [(int(a), int(b), int(c)) for a, b, c in loader]

    first, again = run(), run()
    assert first == again  # same seed, same draws
    by_worker = {w: [d for d, wid, _ in first if wid == w] for w in (0, 1)}
    assert by_worker[0] != by_worker[1]  # workers are seeded apart
    assert len({d for d, _, _ in first}) == len(first)
    assert {(wid, mark) for _, wid, mark in first} == {(0, 100), (1, 101)}  # the user's init ran too


def test_dataloader_workers_exit_when_their_parent_is_killed(tmp_path) -> None:  # noqa: ANN001
    """A worker busy inside an item (torch's own watchdog looks only between items) still goes
    when the training process is SIGKILLed: no orphans holding memory."""
    import os
    import subprocess
    import sys
    import textwrap
    import time

    pids_file = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import os, signal, time
        from torch.utils.data import Dataset
        import libreyolo_ddp

        class Stuck(Dataset):
            def __len__(self):
                return 100

            def __getitem__(self, index):
                with open({str(pids_file)!r}, "a") as f:
                    f.write(f"{{os.getpid()}}\\n")
                time.sleep(3600)

        batches = iter(libreyolo_ddp.build_dataloader(Stuck(), batch_size=1, shuffle=False, workers=2, seed=0))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.exists({str(pids_file)!r}) and len(set(open({str(pids_file)!r}).read().split())) >= 2:
                break
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    log = tmp_path / "log"
    with log.open("w") as out:  # a file, not a pipe: an orphan holding a pipe would block the wait itself
        done = subprocess.run([sys.executable, "-c", script], stdout=out, stderr=out, timeout=120,
                              env=os.environ.copy())
    assert done.returncode == -9, log.read_text()[-2000:]
    pids = {int(p) for p in pids_file.read_text().split()}
    assert len(pids) >= 2

    def running(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a zombie has ended
        except OSError:
            return False

    deadline = time.monotonic() + 30
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(running(p) for p in pids), f"orphaned workers still running: {pids}"
