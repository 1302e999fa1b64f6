"""GraphRunner policy on CPU: modes, signature keys, LRU, latches, invalidation, errors.

Captures are emulated (see conftest.py); everything else is the runner's real code.
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from libreyolo_cudagraph import (
    AutocastCacheError,
    CaptureError,
    GraphConfigError,
    GraphInputError,
    GraphRunner,
    NestedCaptureError,
    SplitGraphRunner,
    capture_lock,
)
from libreyolo_cudagraph.signature import call_signature, describe_signature


def frozen_net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()).eval()
    return net.requires_grad_(False)


def img(n: int = 1, size: int = 8, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.rand(n, 3, size, size, dtype=dtype)


def test_cpu_inputs_run_eager_and_count_the_reason():
    net = frozen_net()
    runner = GraphRunner(net)
    x = img()
    for _ in range(2):
        assert torch.equal(runner(x), net(x))
    info = runner.info()
    assert info.graphs == ()
    assert info.fallbacks == {"input 0 is on cpu: CUDA graphs need CUDA tensors": 2}
    assert info.eager_calls == 2


def test_mode_on_captures_on_first_sight_and_replays_after(emulated_runner):
    net = frozen_net()
    runner = emulated_runner(net, mode="on")
    x = img()
    assert torch.equal(runner(x), net(x))
    assert runner.captures == 1
    y = img()
    assert torch.equal(runner(y), net(y))
    assert runner.captures == 1
    assert runner.info().replays == 2
    assert runner.info().eager_calls == 0


def test_mode_auto_captures_only_when_a_signature_repeats(emulated_runner):
    net = frozen_net()
    runner = emulated_runner(net, mode="auto")
    runner(img(size=8))
    assert runner.captures == 0 and runner.info().eager_calls == 1
    runner(img(size=8))
    assert runner.captures == 1
    runner(img(size=8))
    runner(img(size=12))  # seen once: never pays for a capture
    assert runner.captures == 1
    assert runner.info().replays == 2


def test_mode_off_never_captures_and_mode_is_settable(emulated_runner):
    net = frozen_net()
    runner = emulated_runner(net, mode="off")
    for _ in range(3):
        runner(img())
    assert runner.captures == 0 and runner.info().eager_calls == 3
    runner.mode = "auto"
    runner(img())
    runner(img())
    assert runner.captures == 1
    with pytest.raises(GraphConfigError, match="'sometimes'"):
        runner.mode = "sometimes"  # type: ignore[assignment]


def test_each_signature_component_keys_its_own_graph(emulated_runner, cuda_autocast_tls):
    net = frozen_net()
    runner = emulated_runner(net, max_graphs=32)
    x = img()
    before = runner.captures
    with torch.no_grad():
        runner(x)
        runner(img(n=2))  # shape
        runner(x.contiguous(memory_format=torch.channels_last))  # stride
        net.train()
        runner(x)  # training flag
        net.eval()
        cuda_autocast_tls(True, torch.float16)
        runner(x)  # autocast on, fp16
        cuda_autocast_tls(True, torch.bfloat16)
        runner(x)  # autocast dtype
        cuda_autocast_tls(False)
        flag = torch.backends.cudnn.deterministic
        torch.backends.cudnn.deterministic = not flag
        try:
            runner(x)  # backend flags
        finally:
            torch.backends.cudnn.deterministic = flag
    with torch.inference_mode():
        runner(x)  # inference mode
    runner(x)  # grad mode on (parameters frozen, so allowed)
    assert runner.captures - before == 9
    signatures = [g.signature for g in runner.info().graphs]
    assert len(set(signatures)) == len(signatures)
    assert any("channels_last" in s for s in signatures)
    assert any("autocast f16" in s for s in signatures) and any("autocast bf16" in s for s in signatures)
    # the same call again replays instead of capturing
    with torch.no_grad():
        runner(x)
    assert runner.captures - before == 9


def test_dtype_keys_its_own_graph(emulated_runner):
    runner = emulated_runner(lambda x: x * 2)
    x = torch.rand(2, 3)
    for variant in (x, x.double(), x):
        runner(variant)
    assert runner.captures == 2
    assert any("f64[2x3]" in g.signature for g in runner.info().graphs)


def test_device_is_part_of_the_signature():
    # Computing on a meta tensor costs seconds (lazy meta kernels), so the key is checked directly.
    x = torch.rand(2, 3)
    keys = {call_signature([x], None), call_signature([x.to("meta")], None)}
    assert len(keys) == 2
    assert "meta" in describe_signature(call_signature([x.to("meta")], None))


def test_lru_evicts_least_recently_used_graph(emulated_runner):
    runner = emulated_runner(frozen_net(), max_graphs=2)
    with torch.no_grad():
        runner(img(size=8))  # A
        runner(img(size=10))  # B
        runner(img(size=8))  # touch A
        runner(img(size=12))  # C: evicts B
    info = runner.info()
    assert info.evictions == 1
    assert "[1x3x10x10]" in info.evicted[0]
    assert ["[1x3x8x8]" in info.graphs[0].signature, "[1x3x12x12]" in info.graphs[1].signature] == [
        True,
        True,
    ]
    with torch.no_grad():
        runner(img(size=10))  # B again: recaptured, evicting A (now least recent)
    assert runner.captures == 4
    assert "[1x3x8x8]" in runner.info().evicted[-1]


def test_full_cache_without_eviction_runs_new_signatures_eager(emulated_runner):
    net = frozen_net()
    runner = emulated_runner(net, max_graphs=1, evict=False)
    with torch.no_grad():
        runner(img(size=8))
        y = img(size=10)
        assert torch.equal(runner(y), net(y))
    info = runner.info()
    assert runner.captures == 1 and len(info.graphs) == 1
    assert info.fallbacks == {"graph cache full (max_graphs=1, evict=False)": 1}


def test_capture_failure_latches_signature_with_one_log_line(emulated_runner, caplog):
    net = frozen_net()
    runner = emulated_runner(net, fail_with=RuntimeError("boom: invalid capture"))
    x = img()
    with caplog.at_level(logging.INFO, logger="libreyolo_cudagraph"), torch.no_grad():
        for _ in range(3):
            assert torch.equal(runner(x), net(x))
    assert runner.captures == 1
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "boom" in warnings[0].getMessage()
    (reason, count), *_ = runner.info().fallbacks.items()
    assert "capture failed" in reason and "boom" in reason and count == 3
    with torch.no_grad():
        runner(img(size=10))  # another signature still gets its own try
    assert runner.captures == 2


def test_explicit_capture_raises_then_retries_a_latched_signature(emulated_runner):
    runner = emulated_runner(frozen_net(), fail_with=RuntimeError("boom"))
    x = img()
    with torch.no_grad():
        with pytest.raises(CaptureError, match="boom") as err:
            runner.capture(x)
        assert isinstance(err.value.__cause__, RuntimeError)
        runner.fail_with = None
        info = runner.capture(x)
    assert "[1x3x8x8]" in info.signature
    assert runner.captures == 2


def test_moved_storage_drops_graphs_before_any_replay(emulated_runner, caplog):
    torch.manual_seed(0)
    net = nn.Linear(4, 3).requires_grad_(False)
    runner = emulated_runner(net)
    x = torch.rand(2, 4)
    with torch.no_grad():
        runner(x)
        net.to(torch.float64).to(torch.float32)  # same dtype again, but new storage
        with caplog.at_level(logging.INFO, logger="libreyolo_cudagraph"):
            out = runner(x)
    assert torch.equal(out, net(x))
    info = runner.info()
    assert runner.captures == 2 and info.invalidations == 1
    assert "storage changed" in info.last_invalidation and "'weight'" in info.last_invalidation
    assert sum("dropped 1 graph" in r.getMessage() for r in caplog.records) == 1


def test_half_and_load_state_dict_assign_invalidate(emulated_runner):
    torch.manual_seed(0)
    net = nn.Linear(4, 3).requires_grad_(False)
    runner = emulated_runner(net)
    x = torch.rand(2, 4)
    with torch.no_grad():
        runner(x)
        fresh = {k: torch.randn_like(v) for k, v in net.state_dict().items()}
        net.load_state_dict(fresh, assign=True)
        assert torch.equal(runner(x), x @ fresh["weight"].T + fresh["bias"])
        assert runner.info().invalidations == 1
        net.double()
        assert torch.equal(runner(x.double()), net(x.double()))
    assert runner.info().invalidations == 2 and runner.captures == 3


def test_in_place_value_updates_keep_graphs_and_are_seen(emulated_runner):
    torch.manual_seed(0)
    net = nn.Linear(4, 3).requires_grad_(False)
    runner = emulated_runner(net)
    x = torch.rand(2, 4)
    with torch.no_grad():
        runner(x)
        net.weight.add_(1.0)
        assert torch.equal(runner(x), net(x))
    assert runner.captures == 1 and runner.info().invalidations == 0


def test_copy_outputs_false_hands_back_views_the_next_replay_overwrites(emulated_runner):
    net = frozen_net()
    views = emulated_runner(net, copy_outputs=False)
    owned = emulated_runner(net, copy_outputs=True)
    a, b = img(), img()
    with torch.no_grad():
        va, vb = views(a), views(b)
        oa, ob = owned(a), owned(b)
    assert va.data_ptr() == vb.data_ptr() and torch.equal(va, net(b))
    assert oa.data_ptr() != ob.data_ptr() and torch.equal(oa, net(a))


def test_nested_outputs_keep_their_structure(emulated_runner):
    def fn(x, y):
        return {"sum": x + y, "pair": (x * 2, None, [y - 1]), "n": 3}

    runner = emulated_runner(fn)
    x, y = torch.rand(3), torch.rand(3)
    out = runner(x, y)
    ref = fn(x, y)
    assert out["n"] == 3 and out["pair"][1] is None
    assert torch.equal(out["sum"], ref["sum"]) and torch.equal(out["pair"][2][0], ref["pair"][2][0])


def test_call_inside_another_capture_runs_eager_and_explicit_capture_refuses(emulated_runner):
    net = frozen_net()
    runner = emulated_runner(net)
    x = img()
    with capture_lock, torch.no_grad():
        assert torch.equal(runner(x), net(x))
        with pytest.raises(NestedCaptureError):
            runner.capture(x)
    assert runner.captures == 0
    assert any("inside another graph capture" in r for r in runner.info().fallbacks)


def test_autocast_cache_enabled_falls_back_and_capture_raises(emulated_runner, cuda_autocast_tls):
    runner = emulated_runner(frozen_net())
    cuda_autocast_tls(True, torch.float16, cache=True)
    with torch.no_grad():
        runner(img())
        with pytest.raises(AutocastCacheError, match="cache_enabled=False"):
            runner.capture(img())
    assert runner.captures == 0
    assert any("cache_enabled=False" in r for r in runner.info().fallbacks)


def test_grad_mode_with_trainable_parameters_runs_eager(emulated_runner):
    net = frozen_net().requires_grad_(True)
    runner = emulated_runner(net)
    x = img()
    out = runner(x)
    assert out.requires_grad and runner.captures == 0
    assert any("grad mode is on" in r for r in runner.info().fallbacks)
    with torch.no_grad():
        runner(x)
    assert runner.captures == 1


def test_expanded_input_runs_eager(emulated_runner):
    runner = emulated_runner(lambda x: x * 2)
    x = torch.rand(1, 4).expand(3, 4)
    assert torch.equal(runner(x), x * 2)
    assert runner.captures == 0
    assert any("expanded" in r for r in runner.info().fallbacks)


def test_non_tensor_argument_is_rejected_naming_its_position():
    runner = GraphRunner(lambda x, k: x * k)
    with pytest.raises(GraphInputError, match="argument 1 is a int") as err:
        runner(torch.rand(2), 3)
    assert isinstance(err.value, TypeError)


def test_invalidate_drops_graphs_and_rearms_latches(emulated_runner):
    runner = emulated_runner(frozen_net(), fail_with=RuntimeError("boom"))
    x = img()
    with torch.no_grad():
        runner(x)
        runner.fail_with = None
        runner(x)  # still latched
        assert runner.captures == 1
        runner.invalidate("head replaced")
        runner(x)
    info = runner.info()
    assert runner.captures == 2 and len(info.graphs) == 1
    assert info.last_invalidation == "head replaced"


def test_release_frees_graphs_and_next_call_recaptures(emulated_runner):
    runner = emulated_runner(frozen_net())
    with torch.no_grad():
        runner(img())
        runner.release()
        assert runner.info().graphs == ()
        runner(img())
    assert runner.captures == 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_graphs": 0}, "max_graphs=0"),
        ({"warmup_iters": 0}, "warmup_iters=0"),
        ({"mode": "always"}, "'always'"),
    ],
)
def test_bad_constructor_arguments_name_the_value(kwargs, match):
    with pytest.raises(GraphConfigError, match=match):
        GraphRunner(frozen_net(), **kwargs)


def test_split_runner_graphs_only_the_head_and_equals_eager(emulated_runner):
    net = frozen_net()
    tail_calls = []

    def tail(features):
        tail_calls.append(1)
        return features[features > 0.5].sum()  # data-dependent: never inside a graph

    split = SplitGraphRunner(net, tail)
    split.head = emulated_runner(net)
    with torch.no_grad():
        for _ in range(3):
            x = img()
            assert torch.equal(split(x), tail(net(x)))
    assert split.head.captures == 1 and split.info().replays == 3
    assert len(tail_calls) == 6
