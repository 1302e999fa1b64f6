"""libreyolo-ddp: multi-GPU training for any training function, one argument away.

Knows nothing about YOLO: it parses ``device=`` values, launches one process per GPU
(or joins torchrun's), splits the global batch, resolves ``batch=-1``, synchronizes
BatchNorm, keeps side effects on rank 0 and builds the DataLoaders. See README.md.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from libreyolo_ddp.agreement import agree_all, agree_min
from libreyolo_ddp.autobatch import fit_batch_size, probe_batch_size, resolve_autobatch
from libreyolo_ddp.backend import DEFAULT_TIMEOUT_S, choose_backend, destroy_distributed, init_distributed
from libreyolo_ddp.batch import split_global_batch
from libreyolo_ddp.collectives import (
    all_reduce_max,
    all_reduce_mean,
    all_reduce_sum,
    barrier,
    broadcast_object,
    gather_to_rank_zero,
    is_dist_initialized,
)
from libreyolo_ddp.devices import (
    DevicePlan,
    check_devices_available,
    local_device,
    parse_devices,
    translate_visible_devices,
    usable_cores,
)
from libreyolo_ddp.env import DistEnv, ElasticRun, dist_env, elastic_run, is_spawned_child, is_torchrun
from libreyolo_ddp.errors import (
    AutobatchError,
    BatchSplitError,
    DDPError,
    DeviceError,
    PicklingGuardError,
    ReentryError,
    WorkerError,
)
from libreyolo_ddp.gradients import average_gradients, broadcast_parameters
from libreyolo_ddp.guards import check_picklable, ensure_not_spawned_child
from libreyolo_ddp.launch import find_free_port, launch, spawn
from libreyolo_ddp.loader import build_dataloader, set_loader_epoch, shard_range
from libreyolo_ddp.parent_watch import exit_with_parent
from libreyolo_ddp.rank_zero import configure_rank_logging, is_rank_zero, rank_zero_only, resolve_on_rank_zero
from libreyolo_ddp.seeds import seed_dataloader_worker, seed_everything, seed_for_rank
from libreyolo_ddp.syncbn import (
    PortableSyncBatchNorm,
    convert_sync_batchnorm,
    count_batchnorm,
    revert_sync_batchnorm,
)

try:
    __version__ = _version("libreyolo-ddp")
except PackageNotFoundError:  # run from a source checkout (PYTHONPATH), not installed
    __version__ = "0+source"

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "AutobatchError",
    "BatchSplitError",
    "DDPError",
    "DeviceError",
    "DevicePlan",
    "DistEnv",
    "ElasticRun",
    "PicklingGuardError",
    "PortableSyncBatchNorm",
    "ReentryError",
    "WorkerError",
    "agree_all",
    "agree_min",
    "all_reduce_max",
    "all_reduce_mean",
    "all_reduce_sum",
    "average_gradients",
    "barrier",
    "broadcast_object",
    "broadcast_parameters",
    "build_dataloader",
    "check_devices_available",
    "check_picklable",
    "choose_backend",
    "configure_rank_logging",
    "convert_sync_batchnorm",
    "count_batchnorm",
    "destroy_distributed",
    "dist_env",
    "elastic_run",
    "exit_with_parent",
    "ensure_not_spawned_child",
    "find_free_port",
    "fit_batch_size",
    "gather_to_rank_zero",
    "init_distributed",
    "is_dist_initialized",
    "is_rank_zero",
    "is_spawned_child",
    "is_torchrun",
    "launch",
    "local_device",
    "parse_devices",
    "probe_batch_size",
    "rank_zero_only",
    "resolve_autobatch",
    "resolve_on_rank_zero",
    "revert_sync_batchnorm",
    "seed_dataloader_worker",
    "seed_everything",
    "seed_for_rank",
    "set_loader_epoch",
    "shard_range",
    "spawn",
    "split_global_batch",
    "translate_visible_devices",
    "usable_cores",
]
