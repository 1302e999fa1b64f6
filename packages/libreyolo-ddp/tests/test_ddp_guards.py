"""Pre-launch guards: re-entry from a spawned child, unpicklable arguments, torchrun."""

from __future__ import annotations

import os
import threading

import pytest

import libreyolo_ddp as ddp
from libreyolo_ddp import DDPError, DevicePlan, PicklingGuardError, ReentryError

REENTRY_TEXT = (
    "spawn_ddp_train() was called from inside a spawned subprocess. This usually means your script calls "
    "model.train(device=...) at the top level without a 'if __name__ == \"__main__\":' guard."
)


class ModuleLevelCallback:
    """Stands in for a user's callback class defined at module level."""

    def __init__(self) -> None:
        self.calls = 0

    def on_epoch_end(self, epoch: int) -> None:
        self.calls += 1


def module_level_train(path: str) -> str:
    return path


def _pretend_spawned_child(monkeypatch) -> None:
    monkeypatch.setenv("LIBREYOLO_DDP_SPAWNED_BY", str(os.getppid()))


def test_reentry_message_is_exact_and_shows_the_guard(monkeypatch):
    _pretend_spawned_child(monkeypatch)
    with pytest.raises(ReentryError) as info:
        ddp.ensure_not_spawned_child()
    message = str(info.value)
    assert message.startswith(REENTRY_TEXT)
    fix = message[len(REENTRY_TEXT):]
    assert 'if __name__ == "__main__":' in fix
    assert 'model.train(data="data.yaml", device="0,1")' in fix


def test_reentry_message_names_the_entry_point_it_guards(monkeypatch):
    _pretend_spawned_child(monkeypatch)
    with pytest.raises(ReentryError, match=r"^libreyolo_ddp\.spawn\(\) was called from inside"):
        ddp.spawn(module_level_train, ("x",), devices=DevicePlan.cpu_workers(2))


def test_reentry_guard_runs_before_any_expensive_check(monkeypatch):
    _pretend_spawned_child(monkeypatch)
    with pytest.raises(ReentryError):  # not a PicklingGuardError: the guard comes first
        ddp.spawn(lambda: None, devices=DevicePlan.cpu_workers(2))


def test_grandchildren_and_unrelated_processes_are_not_mistaken_for_workers(monkeypatch):
    monkeypatch.setenv("LIBREYOLO_DDP_SPAWNED_BY", str(os.getpid()))  # we are the spawner, not its child
    ddp.ensure_not_spawned_child()
    monkeypatch.setenv("LIBREYOLO_DDP_SPAWNED_BY", "999999999")  # inherited from a grandparent
    ddp.ensure_not_spawned_child()
    monkeypatch.delenv("LIBREYOLO_DDP_SPAWNED_BY")
    ddp.ensure_not_spawned_child()


def test_reentry_error_is_a_runtime_error():
    assert issubclass(ReentryError, RuntimeError) and issubclass(ReentryError, DDPError)


def test_lambda_argument_is_named_with_what_works_instead():
    with pytest.raises(PicklingGuardError) as info:
        ddp.check_picklable({"model_path": "w.pt", "callbacks": [lambda epoch: None]})
    message = str(info.value)
    assert message.startswith("argument 'callbacks' cannot be sent to the worker processes")
    assert "Module-level classes and functions work" in message
    assert "closures, lambdas" in message
    assert "built-in loggers (results.csv, the CSV logger)" in message


def test_closure_argument_fails_and_names_itself():
    counter = {"n": 0}

    def on_epoch_end(epoch: int) -> None:  # a closure over `counter`
        counter["n"] += epoch

    with pytest.raises(PicklingGuardError, match=r"^argument 'on_epoch_end' "):
        ddp.check_picklable({"on_epoch_end": on_epoch_end})


def test_object_holding_a_lock_fails():
    with pytest.raises(PicklingGuardError, match="argument 'state'"):
        ddp.check_picklable({"state": {"lock": threading.Lock()}})


def test_module_level_class_and_function_pass():
    ddp.check_picklable({"callbacks": [ModuleLevelCallback()], "fn": module_level_train, "n": 3, "cfg": {"a": [1]}})


def test_spawn_checks_pickling_before_starting_workers_and_names_positional_args():
    with pytest.raises(PicklingGuardError, match=r"^argument 'args\[1\]' "):
        ddp.spawn(module_level_train, ("ok", lambda: None), devices=DevicePlan.cpu_workers(2))
    with pytest.raises(PicklingGuardError, match=r"^argument 'callbacks' "):
        ddp.spawn(module_level_train, ("ok", lambda: None), devices=DevicePlan.cpu_workers(2),
                  arg_names=("weights", "callbacks"))


def test_spawn_refuses_under_torchrun(monkeypatch):
    monkeypatch.delenv("LIBREYOLO_DDP_SPAWNED_BY", raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    with pytest.raises(DDPError, match="under torchrun"):
        ddp.spawn(module_level_train, ("x",), devices=DevicePlan.cpu_workers(2))


def test_launch_without_a_distributed_plan_runs_in_process(monkeypatch):
    for name in ("TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE", "LIBREYOLO_DDP_SPAWNED_BY"):
        monkeypatch.delenv(name, raising=False)
    assert ddp.launch(module_level_train, ("here",), devices=ddp.parse_devices("cpu")) == "here"


def test_free_port_is_bindable():
    import socket

    port = ddp.find_free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_worker_error_survives_pickling_with_its_fields():
    import pickle

    err = ddp.WorkerError("worker rank 1 of 2 failed: boom", rank=1, exitcode=None, traceback_text="tb")
    back = pickle.loads(pickle.dumps(err))
    assert (str(back), back.rank, back.exitcode, back.traceback_text) == (str(err), 1, None, "tb")
