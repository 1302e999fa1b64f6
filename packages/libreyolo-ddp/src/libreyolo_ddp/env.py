"""Where this process sits in a distributed run: rank, local rank, world size, launcher.

The trainer never reads ``RANK`` itself; it asks :func:`dist_env`. Values come from an
initialized process group when there is one (the group is the truth once it exists),
otherwise from environment variables, each looked up in a documented order where the
first variable present wins:

=============  =====================================================================
field          variables, in order
=============  =====================================================================
rank           ``RANK``, ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``
local_rank     ``LOCAL_RANK``, ``OMPI_COMM_WORLD_LOCAL_RANK``, ``MPI_LOCALRANKID``
world_size     ``WORLD_SIZE``, ``OMPI_COMM_WORLD_SIZE``, ``PMI_SIZE``
=============  =====================================================================

``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` are what torchrun and this package's own
:func:`~libreyolo_ddp.spawn` set; the MPI names let ``mpirun`` work with the same code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch.distributed as dist

from libreyolo_ddp.errors import DDPError

RANK_VARS: tuple[str, ...] = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
LOCAL_RANK_VARS: tuple[str, ...] = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
WORLD_SIZE_VARS: tuple[str, ...] = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")

# torchrun (torch.distributed.elastic) always sets this; plain env-protocol launchers do not.
TORCHELASTIC_VAR = "TORCHELASTIC_RUN_ID"
# How many times torchrun restarted the worker group (0 on the first attempt; --max-restarts).
RESTART_COUNT_VAR = "TORCHELASTIC_RESTART_COUNT"

# Set by spawn() in the environment its workers start with; the value is the pid of the
# spawning process. Its presence means "this process was made by libreyolo_ddp.spawn",
# which is never a torchrun environment and must never spawn again.
SPAWNED_BY_VAR = "LIBREYOLO_DDP_SPAWNED_BY"


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the run.

    Attributes:
        rank: global rank, 0 .. world_size - 1.
        local_rank: rank on this machine; picks the GPU (``cuda:local_rank``).
        world_size: number of processes in the run (1 when not distributed).
        is_torchrun: an external launcher (torchrun, ``torch.distributed.launch``,
            mpirun) made this process, so nothing may spawn; see :func:`is_torchrun`.
    """

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    is_torchrun: bool = False

    @property
    def is_distributed(self) -> bool:
        """True when more than one process takes part."""
        return self.world_size > 1

    @property
    def is_rank_zero(self) -> bool:
        """True on the process that owns side effects (files, loggers, progress bars)."""
        return self.rank == 0


def _first_int(names: tuple[str, ...], environ: Mapping[str, str]) -> int | None:
    for name in names:
        raw = environ.get(name)
        if raw is None or raw.strip() == "":
            continue
        try:
            return int(raw)
        except ValueError:
            raise DDPError(
                f"environment variable {name}={raw!r} is not an integer; the launcher that set it "
                f"(torchrun, mpirun, or your shell) must give a whole number, or unset it"
            ) from None
    return None


def is_spawned_child(environ: Mapping[str, str] | None = None) -> bool:
    """True when this process (or an ancestor) was started by :func:`libreyolo_ddp.spawn`."""
    environ = os.environ if environ is None else environ
    return bool(environ.get(SPAWNED_BY_VAR))


def is_torchrun(environ: Mapping[str, str] | None = None) -> bool:
    """True when an external launcher made this process; then nothing may spawn.

    That is torchrun (``TORCHELASTIC_RUN_ID`` set) or any launcher that sets a rank and
    a world size (see the table in this module's docstring). Workers made by this
    package's own ``spawn`` carry the same variables but are not an external launch:
    they answer False.

    Args:
        environ: the environment to inspect; ``os.environ`` when None (tests pass a dict).
    """
    environ = os.environ if environ is None else environ
    if is_spawned_child(environ):
        return False
    if environ.get(TORCHELASTIC_VAR):
        return True
    has_rank = any(environ.get(n) for n in RANK_VARS)
    has_world = any(environ.get(n) for n in WORLD_SIZE_VARS)
    return has_rank and has_world


def dist_env(environ: Mapping[str, str] | None = None) -> DistEnv:
    """Describe this process: rank, local rank, world size, and whether torchrun made it.

    With an initialized default process group (and ``environ`` not given), rank and
    world size come from the group. Otherwise they come from the environment variables
    in this module's table; a process with none of them is rank 0 of a world of 1.

    Args:
        environ: mapping to read instead of ``os.environ`` (for tests and dry runs).

    Raises:
        DDPError: a variable is not an integer, or the rank does not fit the world size.
    """
    use_group = environ is None and dist.is_available() and dist.is_initialized()
    environ = os.environ if environ is None else environ
    torchrun = is_torchrun(environ)
    env_local = _first_int(LOCAL_RANK_VARS, environ)
    if use_group:
        rank, world = dist.get_rank(), dist.get_world_size()
        return DistEnv(rank, rank if env_local is None else env_local, world, torchrun)
    env_rank = _first_int(RANK_VARS, environ)
    env_world = _first_int(WORLD_SIZE_VARS, environ)
    rank = 0 if env_rank is None else env_rank
    world = 1 if env_world is None else env_world
    if world < 1 or not 0 <= rank < world:
        raise DDPError(
            f"rank={rank} and world_size={world} from the environment are inconsistent "
            f"(need 0 <= rank < world_size, world_size >= 1); check the launcher's "
            f"{RANK_VARS[0]}/{WORLD_SIZE_VARS[0]} settings"
        )
    local = rank if env_local is None else env_local
    return DistEnv(rank=rank, local_rank=local, world_size=world, is_torchrun=torchrun)


@dataclass(frozen=True)
class ElasticRun:
    """A torchrun job as its workers see it across restarts.

    Attributes:
        run_id: the rendezvous id (``--rdzv_id``; a random id with ``--standalone``); the same
            for every attempt of the job, so it names the job's state on disk.
        restart: 0 on the first attempt; ``k`` after torchrun restarted the group ``k`` times
            (``--max-restarts``), e.g. because a rank died.
    """

    run_id: str
    restart: int

    @property
    def is_restart(self) -> bool:
        """True when this attempt follows a failed one (a resumable checkpoint may exist)."""
        return self.restart > 0


def elastic_run(environ: Mapping[str, str] | None = None) -> ElasticRun | None:
    """The torchrun job this process belongs to, or None outside torchrun.

    Raises:
        DDPError: the restart count is not an integer.
    """
    environ = os.environ if environ is None else environ
    run_id = environ.get(TORCHELASTIC_VAR, "").strip()
    if not run_id or is_spawned_child(environ):
        return None
    restart = _first_int((RESTART_COUNT_VAR,), environ)
    return ElasticRun(run_id, 0 if restart is None else restart)
