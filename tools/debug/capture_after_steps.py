"""Debug: capture a training step after N eager optimizer steps, print the full traceback."""
import sys, traceback, copy
import torch
from torch import nn
sys.path.insert(0, "packages/libreyolo-cudagraph/tests")
from libreyolo_cudagraph.train_graph import capture_train_step
from libreyolo_cudagraph import GraphedTraining

torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False

class ConvBN(nn.Sequential):
    def __init__(self, cin, cout, k=3, s=1):
        super().__init__(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU())

def variant(name, steps, use_scaler, use_opt, warmup_iters=3, autocast=True):
    torch.manual_seed(0)
    m = nn.Sequential(ConvBN(3, 16, s=2), ConvBN(16, 32, s=2), nn.Conv2d(32, 4, 1)).cuda().train()
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=use_scaler)
    x = torch.rand(8, 3, 64, 64, device="cuda")
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=autocast, cache_enabled=False):
            loss = m(x).float().mean()
        scaler.scale(loss).backward()
        if use_opt:
            scaler.step(opt)
            scaler.update()
    opt.zero_grad(set_to_none=True)
    pool = torch.cuda.graph_pool_handle(); stream = torch.cuda.Stream()
    try:
        with torch.autocast("cuda", dtype=torch.float16, enabled=autocast, cache_enabled=False):
            capture_train_step(m, [x], pool=pool, stream=stream, warmup_iters=warmup_iters)
        print(f"{name}: OK", flush=True)
    except Exception:
        print(f"{name}: FAILED", flush=True)
        traceback.print_exc()

which = sys.argv[1:] or ["all"]
cases = {
    "fresh": (0, True, True), "eager_bwd_only": (2, False, False), "scaler_no_opt": (2, True, False),
    "opt_no_scaler": (2, False, True), "scaler_and_opt": (2, True, True),
}
for name, (steps, sc, op) in cases.items():
    variant(name, steps, sc, op)
variant("scaler_and_opt_no_autocast", 2, True, True, autocast=False)
