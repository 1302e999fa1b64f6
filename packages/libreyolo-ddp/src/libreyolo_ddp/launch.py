"""Launching a training function on every device of a plan: spawn, torchrun, or in-process.

The parent side of :func:`spawn` lives here (the worker side is in ``worker.py``):
one fresh ``spawn``-started process per device, rendezvous on a free local port,
``CUDA_VISIBLE_DEVICES`` narrowed to the plan's GPUs, exactly one message back from
each worker, and a teardown that leaves no process behind whatever happens.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from libreyolo_ddp.backend import DEFAULT_TIMEOUT_S, Backend, choose_backend, init_distributed
from libreyolo_ddp.devices import (
    DEVICE_TYPE_VAR,
    DevicePlan,
    check_devices_available,
    translate_visible_devices,
    usable_cores,
)
from libreyolo_ddp.env import SPAWNED_BY_VAR, elastic_run, is_torchrun
from libreyolo_ddp.errors import DDPError, WorkerError
from libreyolo_ddp.guards import check_picklable, ensure_not_spawned_child
from libreyolo_ddp.worker import LoggingState, ProcessState, WorkerSetup, worker_main

log = logging.getLogger(__name__)

TERMINATE_GRACE_S = 5.0  # after SIGTERM, how long a worker may take before SIGKILL
ERROR_SETTLE_S = 0.5  # after the first failure, how long to wait for other ranks' reports
_COMM_ERROR_TYPES = {"DistBackendError", "DistNetworkError", "DistError", "DistStoreError"}
_COMM_ERROR_TEXT = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the OS picks it), for the rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextmanager
def _patched_environ(updates: Mapping[str, str]) -> Iterator[None]:
    """Set variables while the workers start (they copy the environment then), then restore."""
    saved = {key: os.environ.get(key) for key in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def _shared_env(devices: DevicePlan, env: Mapping[str, str] | None) -> dict[str, str]:
    shared = {
        SPAWNED_BY_VAR: str(os.getpid()),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(find_free_port()),
        "WORLD_SIZE": str(devices.world_size),
        "LOCAL_WORLD_SIZE": str(devices.world_size),
        DEVICE_TYPE_VAR: devices.type,
    }
    if devices.type == "cuda":
        shared["CUDA_VISIBLE_DEVICES"] = translate_visible_devices(
            devices.indices, os.environ.get("CUDA_VISIBLE_DEVICES")
        )
    if "OMP_NUM_THREADS" not in os.environ:
        # Each worker's share of the cores (torchrun sets 1): left alone, every worker's torch
        # takes all of them, and their spinning OpenMP pools slow one another several-fold (two
        # Gloo ranks on 2 cores: a 64-px YOLOv9-t step 10 s instead of 1.5 s).
        shared["OMP_NUM_THREADS"] = str(max(1, usable_cores() // devices.world_size))
    shared.update(env or {})
    return shared


def _is_comm_error(report: dict[str, Any]) -> bool:
    return report.get("type") in _COMM_ERROR_TYPES or any(t in report.get("message", "") for t in _COMM_ERROR_TEXT)


def _death_report(rank: int, proc: multiprocessing.process.BaseProcess) -> dict[str, Any]:
    proc.join(1.0)
    code = proc.exitcode
    how = f"was killed by signal {-code} ({signal.Signals(-code).name})" if code is not None and code < 0 else (
        f"exited with code {code}"
    )
    return {
        "rank": rank, "type": None, "exitcode": code, "traceback": "",
        "message": f"{how} before reporting a result; its stderr above may say why "
                   f"(a kill by SIGKILL is often the out-of-memory killer)",
    }


def _read(rank: int, conn: multiprocessing.connection.Connection,
          proc: multiprocessing.process.BaseProcess) -> tuple[str, Any]:
    try:
        raw = conn.recv_bytes()
    except (EOFError, OSError):
        return "error", _death_report(rank, proc)
    try:
        return pickle.loads(raw)
    except Exception as err:  # noqa: BLE001 - reported as that rank's failure
        return "error", {
            "rank": rank, "type": type(err).__name__, "exitcode": None, "traceback": "",
            "message": f"its report could not be unpickled in the parent ({err}); return plain data from fn",
        }


def _collect(procs: list[multiprocessing.process.BaseProcess],
             conns: list[multiprocessing.connection.Connection]) -> Any:
    """Wait for one message per worker; return rank 0's value or raise the root failure."""
    pending = dict(enumerate(conns))
    result: Any = None
    errors: list[dict[str, Any]] = []
    settle_deadline: float | None = None
    while pending:
        timeout = None if settle_deadline is None else max(0.0, settle_deadline - time.monotonic())
        waitables: list[Any] = [*pending.values(), *(procs[r].sentinel for r in pending)]
        ready = set(multiprocessing.connection.wait(waitables, timeout))
        if not ready:
            break  # settle window over: the others are stuck in a collective; stop waiting
        for rank, conn in list(pending.items()):
            if conn in ready or (procs[rank].sentinel in ready and conn.poll()):
                kind, payload = _read(rank, conn, procs[rank])
            elif procs[rank].sentinel in ready:
                kind, payload = "error", _death_report(rank, procs[rank])
            else:
                continue
            del pending[rank]
            if kind == "ok":
                result = payload if rank == 0 else result
            else:
                errors.append(payload)
                settle_deadline = settle_deadline or time.monotonic() + ERROR_SETTLE_S
    if errors:
        raise _worker_error(errors, len(procs))
    return result


def _worker_error(errors: list[dict[str, Any]], world_size: int) -> WorkerError:
    # A rank whose peer died reports a communication error too; the root cause is the
    # report that is neither that nor a silent death.
    ranked = sorted(errors, key=lambda r: (r["type"] is None, _is_comm_error(r)))
    root = ranked[0]
    what = f"{root['type']}: {root['message']}" if root["type"] else root["message"]
    message = f"worker rank {root['rank']} of {world_size} failed: {what}"
    others = [r for r in errors if r is not root]
    if others:
        message += "\n(also failed: " + ", ".join(
            f"rank {r['rank']} ({r['type'] or 'exited'})" for r in others
        ) + ")"
    if root["traceback"]:
        message += f"\n--- traceback from rank {root['rank']} ---\n{root['traceback'].rstrip()}"
    return WorkerError(message, rank=root["rank"], exitcode=root.get("exitcode"), traceback_text=root["traceback"])


def _teardown(procs: list[multiprocessing.process.BaseProcess]) -> None:
    """Stop every worker still running: SIGTERM, a grace period, then SIGKILL; reap them all."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + TERMINATE_GRACE_S
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.is_alive():
            log.warning("worker pid %d ignored SIGTERM for %.0f s; killing it", proc.pid, TERMINATE_GRACE_S)
            proc.kill()
            proc.join(TERMINATE_GRACE_S)


def _name_arguments(fn: Callable[..., Any], args: Sequence[Any], arg_names: Sequence[str] | None) -> dict[str, Any]:
    names = list(arg_names or [])
    if names and len(names) != len(args):
        raise DDPError(f"arg_names has {len(names)} names for {len(args)} arguments; give one name per argument")
    return {"fn": fn, **{(names[i] if names else f"args[{i}]"): a for i, a in enumerate(args)}}


def spawn(
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    *,
    devices: DevicePlan,
    backend: Backend | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    entry: str = "libreyolo_ddp.spawn()",
    arg_names: Sequence[str] | None = None,
    join_timeout_s: float = 60.0,
) -> Any:
    """Run ``fn(*args)`` once per device of ``devices``, each in its own process and rank.

    Each worker starts with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``
    (127.0.0.1) and a free ``MASTER_PORT``; for CUDA plans ``CUDA_VISIBLE_DEVICES``
    holds exactly the plan's GPUs (translated through any value the user already set),
    so rank r uses ``cuda:r`` (:func:`~libreyolo_ddp.local_device`); unless this process's
    environment sets ``OMP_NUM_THREADS``, each worker gets its share of the cores there
    (torchrun sets 1). The worker joins
    the process group (:func:`~libreyolo_ddp.init_distributed`) before calling ``fn``
    and leaves it afterwards.

    ``fn`` and ``args`` must be picklable, and ``fn`` importable by module and name:
    define it at module level and call ``spawn`` under ``if __name__ == "__main__":``.

    Args:
        fn: the per-rank function, e.g. a training loop.
        args: positional arguments for ``fn``; send CPU data or file paths, not CUDA tensors.
        devices: the plan; one worker per rank (:meth:`DevicePlan.cpu_workers` for Gloo
            on CPU).
        backend: "nccl" or "gloo"; default :func:`~libreyolo_ddp.choose_backend`.
        env: extra environment variables for every worker.
        timeout_s: process-group timeout for collectives.
        entry: name of the public entry point, used in the re-entry message.
        arg_names: names for ``args`` in pickling errors (default ``args[i]``).
        join_timeout_s: after every worker reported, how long to wait for them to exit
            before they are terminated.

    Returns:
        Rank 0's return value, unpickled in this process (must be picklable; return CPU
        tensors, not CUDA ones). Other ranks' return values are discarded.

    Raises:
        ReentryError: called inside a spawned worker (missing ``__main__`` guard).
        DDPError: called under torchrun (use :func:`launch`, or call ``fn`` directly).
        DeviceError: the plan names devices this machine lacks.
        PicklingGuardError: ``fn`` or an argument cannot be sent to the workers.
        WorkerError: a worker failed; names its rank and carries its traceback. All
            workers are stopped before this is raised.
    """
    ensure_not_spawned_child(entry)
    if is_torchrun():
        raise DDPError(
            f"{entry} was called under torchrun, which has already started one process per device; "
            f"spawning more would oversubscribe the GPUs. Call the training function directly in each "
            f"torchrun process (libreyolo_ddp.launch() does this for you)"
        )
    check_devices_available(devices)
    check_picklable(_name_arguments(fn, args, arg_names))
    backend = backend or choose_backend(devices.type)
    shared = _shared_env(devices, env)
    setup = WorkerSetup(
        world_size=devices.world_size, backend=backend, timeout_s=timeout_s,
        process_state=ProcessState.capture(), logging_state=LoggingState.capture(), env=shared,
    )
    log.info(
        "spawning %d worker(s) on %s: backend=%s, %s:%s%s", devices.world_size, devices, backend,
        shared["MASTER_ADDR"], shared["MASTER_PORT"],
        f", CUDA_VISIBLE_DEVICES={shared['CUDA_VISIBLE_DEVICES']}" if "CUDA_VISIBLE_DEVICES" in shared else "",
    )
    ctx = multiprocessing.get_context("spawn")  # fork after CUDA init is unsafe; spawn always works
    procs: list[multiprocessing.process.BaseProcess] = []
    conns: list[multiprocessing.connection.Connection] = []
    try:
        with _patched_environ(shared):
            for rank in range(devices.world_size):
                receiver, sender = ctx.Pipe(duplex=False)
                conns.append(receiver)
                proc = ctx.Process(
                    target=worker_main, args=(rank, fn, tuple(args), sender, setup), name=f"libreyolo-ddp-rank{rank}"
                )
                proc.start()
                procs.append(proc)
                sender.close()  # the worker holds the only write end: EOF on it means the worker is gone
        result = _collect(procs, conns)
        deadline = time.monotonic() + join_timeout_s
        for started in procs:
            started.join(max(0.0, deadline - time.monotonic()))
        stuck = [p.pid for p in procs if p.is_alive()]
        if stuck:
            log.warning("worker(s) %s reported but did not exit within %.0f s; terminating", stuck, join_timeout_s)
        return result
    finally:
        _teardown(procs)
        for conn in conns:
            conn.close()


def _restart_advice(err: RuntimeError) -> Exception:
    """A group that cannot form after torchrun restarted it: name the known cause and the fix."""
    job = elastic_run()
    shared = os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0") != "1"
    if job is None or not job.is_restart or not shared:
        return err
    return DDPError(
        f"the process group could not form after torchrun restarted it (restart {job.restart} of job "
        f"{job.run_id!r}): {err}. torch's shared rendezvous store keeps the first attempt's peer addresses; "
        "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 before torchrun so each attempt gets a fresh store")


def launch(
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    *,
    devices: DevicePlan,
    backend: Backend | None = None,
    **spawn_kwargs: Any,
) -> Any:
    """Run ``fn`` the right way for this environment: the one launcher verb.

    - Under torchrun (or another launcher that set the rank variables): the processes
      exist already; join the group (backend chosen for ``devices.type``) and call
      ``fn(*args)`` here. Every rank returns its own value; ``devices`` only gives the
      device type, each rank uses ``cuda:LOCAL_RANK``.
    - Otherwise, with a distributed plan (two or more devices): :func:`spawn`, and
      rank 0's value is returned.
    - Otherwise: call ``fn(*args)`` in this process.

    Raises:
        Whatever :func:`spawn` raises, and ``fn``'s own exceptions in-process.
    """
    ensure_not_spawned_child(spawn_kwargs.get("entry", "libreyolo_ddp.launch()"))
    if is_torchrun():
        # Record the plan's type as spawn does, so local_device() and the backend agree
        # with device= (a CPU run under torchrun on a GPU machine stays on Gloo/CPU).
        os.environ.setdefault(DEVICE_TYPE_VAR, devices.type)
        timeout_s = spawn_kwargs.get("timeout_s", DEFAULT_TIMEOUT_S)
        try:
            init_distributed(backend or choose_backend(devices.type), timeout_s=timeout_s)
        except RuntimeError as err:
            raise _restart_advice(err) from err
        return fn(*args)
    if devices.is_distributed:
        return spawn(fn, args, devices=devices, backend=backend, **spawn_kwargs)
    return fn(*args)
