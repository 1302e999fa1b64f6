#!/usr/bin/env bash
# Runs a batch of GPU work on the lent machine, from source (no install): tests, the parity matrix,
# benchmarks. Each step is time-boxed; logs go to $OUT/<step>.log; a summary prints last.
#   tools/gpu_session.sh tests parity bench_infer bench_train bench_data
#   tools/gpu_session.sh e2e ddp shapes20 compile
#   tools/gpu_session.sh e2e_grid e2e_profile tta   (issue 21: one per 10-minute call)
#   tools/gpu_session.sh tta_profile e2e_spy   (an arm under py-spy: where its wall time goes; tools/flame_summary.py reads it)
#   tools/gpu_session.sh tests_cls parity_cls bench_infer_cls bench_train_cls   (classifiers, issue 16)
#   tools/gpu_session.sh env bench_export   (issue 18: export latency; needs onnx + onnxruntime importable)
#   tools/gpu_session.sh probe_step          (where an eager step's time goes: host issue vs GPU time, syncs)
#   tools/gpu_session.sh probe_predict       (where a one-image predict call's time goes, step by step)
#   tools/gpu_session.sh probe_variants      (an eager step's per-op host cost, and the step with cheaper forms of the Conv unit)
#   tools/gpu_session.sh probe_nms           (how NMS's operators load here, and ours vs torchvision.ops on CUDA)
#   tools/gpu_session.sh probe_checkpoint    (where an epoch's checkpoint time goes: copies, torch.save, fsync)
#   tools/gpu_session.sh probe_memory        (where predict's peak GPU memory comes from, step by step)
#   tools/gpu_session.sh probe_video         (a video's predict: the decoding side alone, then with the GPU)
#   tools/gpu_session.sh probe_net           (the fused fp16 network's kernels and graph replay against torch.compile's; PROBE_NET_ARGS)
#   tools/gpu_session.sh tests_half_weights probe_half_weights   (fp16 weight copies: bit-identity per family on CUDA; the step time they save)
#   tools/gpu_session.sh probe_eager_host    (eager batch-1 forward, ours vs Ultralytics' in one process, before and after our predicts)
#   tools/gpu_session.sh probe_interleave    (bench_predict's interleaved scenario: does sharing a process slow either side?)
#   tools/gpu_session.sh probe_render        (one training batch's rendering on the GPU, stage by stage, eager and graphed)
#   tools/gpu_session.sh probe_folder        (a folder's predict throughput against decoding threads and processes; PROBE_FOLDER_ARGS)
#   tools/gpu_session.sh sweeps              (learning-recipe sweeps, SegFormer and RT-DETR: SEG_*/DETR_* override)
# Peers (Ultralytics, PyAV) come from .whl/, which git ignores: pass carry=[".whl"] to the device
# call, or the peer arms report "not importable".
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export PYTHONPATH="$PWD/packages/libreyolo-cudagraph/src:$PWD/packages/libreyolo-ddp/src:$PWD/packages/libreyolo-models/src:$PWD/packages/libreyolo-cli/src:$PWD/packages/libreyolo/src:$PWD/tools"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export LIBREYOLO_CACHE_DIR=/tmp/libreyolo-cache LIBREYOLO_HUB_URL=http://127.0.0.1:9
# Benchmark peers (Ultralytics) travel as wheels in .whl/ (carry it); installed beside, never over,
# the machine's own packages: its torch, numpy and friends stay the ones in use.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/peer-site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/peer-site"
fi
SUMMARY="$OUT/summary.txt"; : > "$SUMMARY"
step() {  # step NAME SECONDS COMMAND...
  local name=$1 secs=$2; shift 2
  local t0=$(date +%s)
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$SUMMARY"
  tail -n "${TAIL:-25}" "$OUT/$name.log" | tee -a "$SUMMARY" > /dev/null
}
PY=python3
for what in "$@"; do
  case $what in
    env) step env 60 bash -c "nvidia-smi --query-gpu=name,memory.total --format=csv; $PY -c 'import torch,sys;print(sys.version, torch.__version__, torch.cuda.device_count())'; nproc; $PY tools/probe_modules.py" ;;
    tests) step tests ${TESTS_S:-330} $PY -m pytest -p no:cacheprovider --import-mode=importlib -m "cuda or multigpu" -q -rfE \
             -n ${TEST_PROCS:-4} --durations=15 -o addopts="" packages tests-integration ;;
    tests_graph) step tests_graph 300 $PY -m pytest -p no:cacheprovider --import-mode=importlib -m "cuda or multigpu" -q -rfE \
             -n 3 -o addopts="" packages/libreyolo-cudagraph/tests/test_cg_gpu_train.py tests-integration/test_gpu_zoo.py \
             packages/libreyolo-ddp/tests/test_ddp_batch_autobatch.py ;;
    parity) step parity ${PARITY_S:-200} $PY tools/parity_matrix.py ${ROWS:+--rows $ROWS} --out "$OUT/parity-matrix.md" --json "$OUT/parity.json" ;;
    tests_gpu) step tests_gpu ${TESTS_S:-420} $PY -m pytest -p no:cacheprovider --import-mode=importlib -m "(cuda or multigpu) and not learning" \
             -q -rfE -n ${TEST_PROCS:-3} --durations=20 -o addopts="" packages tests-integration ;;
    learn_gpu) step learn_gpu ${LEARN_S:-420} $PY -m pytest -p no:cacheprovider --import-mode=importlib -m "cuda and learning" \
             -q -rfE -s -n ${TEST_PROCS:-3} -o addopts="" packages tests-integration ;;
    learn_each) i=0  # LEARN_NODES: comma-separated pytest node ids, one process each, in parallel
             for node in ${LEARN_NODES//,/ }; do i=$((i+1))
               step "learn$i" ${LEARN_S:-520} $PY -m pytest -p no:cacheprovider --import-mode=importlib -q -rA -s \
                 -o addopts="" "$node" &
             done; wait ;;
    bench_infer) step bench_infer 240 $PY tools/bench_infer_graphs.py --no-compile --extra bench_models:yolo9t_infer --out "$OUT/bench-infer.md" ;;
    compile) step compile 540 bash -c "$PY tools/bench_infer_graphs.py --compile --models '' --batches 1 --dtypes fp32,fp16 --extra bench_models:yolo9t_infer --out $OUT/bench-compile-yolo.md && $PY tools/bench_infer_graphs.py --compile --dtypes fp16 --out $OUT/bench-compile-tv.md" ;;
    bench_train) step bench_train 240 $PY tools/bench_train_graphs.py --deterministic --extra bench_models:yolo9t_train --out "$OUT/bench-train.md" ;;
    bench_data) step bench_data 240 $PY tools/bench_data.py --workers 12 ;;
    bench_data_resident) step bench_data_resident 240 $PY tools/bench_data.py --workers 12 --images 1024 --arms gpu,resident ;;
    tests_gpucache) step tests_gpucache 180 $PY -m pytest -p no:cacheprovider --import-mode=importlib -m "cuda or multigpu" -q -rfE -o addopts="" \
             packages/libreyolo-models/tests/test_device_cache.py packages/libreyolo-models/tests/test_augment_equivalence.py \
             packages/libreyolo-models/tests/test_render_graph.py packages/libreyolo-models/tests/test_augment_ops.py ;;
    tests_quick) step tests_quick 40 $PY -m pytest -p no:cacheprovider --import-mode=importlib -m cuda -q -rfE -o addopts="" \
             packages/libreyolo-models/tests/test_augment_equivalence.py ;;
    e2e) step e2e ${E2E_S:-300} $PY tools/bench_train_e2e.py --images 2048 --epochs 3 --batch 32 --deterministic --arms eager,graph,eager-cl-fast,graph-cl-fast --out "$OUT/bench-e2e.md" ;;
    e2e_peer) step e2e_peer ${E2E_S:-300} $PY tools/bench_train_e2e.py --sizes ${SIZES:-t} --batches ${BATCHES:-32} \
             --images ${IMAGES:-1024} --epochs ${EPOCHS:-3} --no-deterministic --peer --arms ${E2E_ARMS:-eager-cl-fast,graph-cl-fast} \
             --out "$OUT/bench-e2e-peer.md" ;;
    e2e_grid) step e2e_grid ${E2E_S:-560} $PY tools/bench_train_e2e.py --sizes ${SIZES:-t,s} --batches ${BATCHES:-8,32,64} \
             --images ${IMAGES:-1024} --epochs 2 --deterministic --no-peer ${E2E_ARMS:+--arms $E2E_ARMS} --out "$OUT/bench-e2e-grid.md" ;;
    e2e_profile) step e2e_profile ${E2E_S:-560} $PY tools/bench_train_e2e.py --profile --sizes ${SIZES:-t} \
             --batches ${BATCHES:-8,32,64} --images ${IMAGES:-512} --epochs 2 --deterministic --no-peer ${E2E_ARMS:+--arms $E2E_ARMS} \
             --out "$OUT/bench-e2e-profile.md" ;;
    tests_speed) step tests_speed 240 $PY -m pytest -p no:cacheprovider --import-mode=importlib -m cuda -q -rA -o addopts="" \
             packages/libreyolo-models/tests/test_train_speed.py packages/libreyolo-models/tests/test_fused_optim.py ;;
    probe_step) step probe_step ${PROBE_S:-240} $PY tools/probe_train_step.py --batch ${BATCHES:-32} ${PROBE_ARGS:-} --out "$OUT/probe-train-step.md" ;;
    sweeps) [ -n "${SEG_BASE:-}" ] || SEG_BASE='{"epochs": 80, "batch": 16, "nbs": 16, "scale": 0.25, "device": 0, "workers": 2}'
             [ -n "${SEG_GRID:-}" ] || SEG_GRID='{"imgsz": [128, 256], "lr0": [0.001, 0.003]}'
             [ -n "${DETR_BASE:-}" ] || DETR_BASE='{"epochs": 10, "imgsz": 128, "batch": 8, "nbs": 8, "device": 0, "workers": 2}'
             [ -n "${DETR_GRID:-}" ] || DETR_GRID='{"lr0": [0.0005, 0.001, 0.002]}'
             $PY -c "from libreyolo_models.data.shapes import ensure_shapes; from libreyolo_models.tasks.semantic.shapes_seg import ensure_shapes_seg; ensure_shapes(); ensure_shapes_seg()"
             step sweep_seg ${SWEEP_S:-400} $PY tools/sweep_recipe.py --model LibreSegFormerb0.yaml --data shapes-seg \
               --metric metrics/mIoU --parallel 4 --timeout $(( ${SWEEP_S:-400} - 20 )) --base "$SEG_BASE" --grid "$SEG_GRID" \
               --out "$OUT/sweep-seg.md" &
             step sweep_rtdetr ${SWEEP_S:-400} $PY tools/sweep_recipe.py --model LibreRTDETRr18.yaml --data shapes \
               --metric metrics/mAP50 --parallel 3 --timeout $(( ${SWEEP_S:-400} - 20 )) --base "$DETR_BASE" --grid "$DETR_GRID" \
               --out "$OUT/sweep-rtdetr.md" &
             wait ;;
    tta) step tta ${TTA_S:-570} $PY tools/bench_time_to_accuracy.py --epochs ${TTA_EPOCHS:-30} ${ARMS:+--arms $ARMS} \
             --peer-timeout ${PEER_S:-300} --out "$OUT/bench-tta.md" ;;
    tta_profile) step tta_profile ${TTA_S:-300} /tmp/peer-site/bin/py-spy record --idle --rate ${SPY_RATE:-250} --format raw \
             -o "$OUT/tta-profile.txt" -- $PY tools/bench_time_to_accuracy.py --arms ${ARMS:-ours} --epochs ${TTA_EPOCHS:-15} \
             --out "$OUT/bench-tta.md" ;;   # py-spy's wheel in .whl/; read the profile with tools/flame_summary.py
    e2e_spy) step e2e_spy ${E2E_S:-300} /tmp/peer-site/bin/py-spy record --idle --rate ${SPY_RATE:-250} --format raw \
             -o "$OUT/e2e-profile.txt" -- $PY tools/bench_train_e2e.py --sizes t --batches ${BATCHES:-32} --images ${IMAGES:-1024} \
             --epochs ${EPOCHS:-3} --no-deterministic --no-peer --arms ${E2E_ARMS:-eager-cl-fast} --out "$OUT/bench-e2e-spy.md" ;;
    ddp) step ddp ${DDP_S:-420} $PY tools/bench_ddp.py --size s --per-gpu-batch 32 --images 1536 --epochs 3 --out "$OUT/bench-ddp.md" ;;
    shapes20) step shapes20 ${SHAPES_S:-150} $PY tools/shapes_graph_run.py --epochs 20 --imgsz 320 --batch 32 --out "$OUT/shapes20.md" ;;
    compile_yolo) step compile_yolo 85 $PY tools/bench_infer_graphs.py --compile --models '' --batches 1 --dtypes fp32 \
             --reps 30 --extra bench_models:yolo9t_infer --out "$OUT/bench-compile-yolo.md" ;;
    tests_new) step tests_new ${TESTS_NEW_S:-240} $PY -m pytest -p no:cacheprovider --import-mode=importlib -m cuda -v -rfE -o addopts="" \
             -n ${TEST_PROCS:-4} packages/libreyolo-models/tests/test_predict_streams.py packages/libreyolo-models/tests/test_predict_device.py \
             packages/libreyolo-models/tests/test_letterbox_device.py packages/libreyolo-models/tests/test_nms_batched.py \
             packages/libreyolo-models/tests/test_train_speed.py packages/libreyolo-models/tests/test_export.py \
             packages/libreyolo-models/tests/test_track.py packages/libreyolo-models/tests/test_predict_outputs.py \
             tests-integration/test_gpu_zoo.py tests-integration/test_gpu_semantic.py tests-integration/test_gpu_classify.py \
             tests-integration/test_export_gpu.py ;;
    predict_tests) step predict_tests 300 $PY -m pytest -p no:cacheprovider --import-mode=importlib -m cuda -q -rfE -o addopts="" \
             packages/libreyolo-models/tests/test_predict_streams.py packages/libreyolo-models/tests/test_predict_device.py \
             packages/libreyolo-models/tests/test_letterbox_device.py packages/libreyolo-models/tests/test_nms_batched.py \
             packages/libreyolo-models/tests/test_predict_staging.py packages/libreyolo-models/tests/test_predict.py \
             packages/libreyolo-models/tests/test_graph_dispatch.py packages/libreyolo-models/tests/test_export.py \
             packages/libreyolo-models/tests/test_predict_gpu_jpeg.py packages/libreyolo-models/tests/test_predict_padding.py ;;
    bench_export) step bench_export ${BENCH_EXPORT_S:-240} $PY tools/bench_export.py ${BENCH_EXPORT_ARGS:-} --out "$OUT/bench-export.md" ;;
    probe_variants) step probe_variants ${PROBE_S:-240} $PY tools/probe_step_variants.py --batch ${BATCHES:-32} ${PROBE_ARGS:-} --out "$OUT/probe-step-variants.md" ;;
    probe_nms) step probe_nms 90 $PY tools/probe_nms_load.py ;;
    probe_checkpoint) step probe_checkpoint 120 $PY tools/probe_checkpoint.py --out "$OUT/probe-checkpoint.md" ;;
    probe_decode) step probe_decode 120 $PY tools/probe_decode.py --out "$OUT/probe-decode.md" ;;
    probe_predict) step probe_predict ${PROBE_S:-200} $PY tools/probe_predict.py --wide --out "$OUT/probe-predict.md" ;;
    probe_interleave) step probe_interleave ${PROBE_S:-150} $PY tools/probe_interleave.py --out "$OUT/probe-interleave.md" ;;
    probe_memory) step probe_memory ${PROBE_S:-200} $PY tools/probe_predict_memory.py --out "$OUT/probe-predict-memory.md" ;;
    probe_video) step probe_video ${PROBE_S:-200} $PY tools/probe_video.py --out "$OUT/probe-video.md" ;;
    probe_net) step probe_net ${PROBE_S:-420} $PY tools/probe_net_kernels.py ${PROBE_NET_ARGS:---batches 1,32} ;;
    probe_half_weights) step probe_half_weights ${PROBE_S:-240} $PY tools/probe_half_weights.py ${PROBE_HW_ARGS:-} --out "$OUT/probe-half-weights.md" ;;
    tests_half_weights) step tests_half_weights 180 $PY -m pytest -p no:cacheprovider --import-mode=importlib -m cuda -q -rfE \
             -o addopts="" packages/libreyolo-models/tests/test_half_weights.py ;;
    probe_eager_host) step probe_eager_host ${PROBE_S:-240} $PY tools/probe_eager_host.py --out "$OUT/probe-eager-host.md" ;;
    probe_render) step probe_render ${PROBE_S:-120} $PY tools/probe_render.py ${PROBE_RENDER_ARGS:-} --out "$OUT/probe-render.md" ;;
    probe_folder) step probe_folder ${PROBE_S:-200} $PY tools/probe_folder.py ${PROBE_FOLDER_ARGS:-} --out "$OUT/probe-folder.md" ;;
    bench_predict) step bench_predict ${BENCH_PREDICT_S:-540} $PY tools/bench_predict.py ${BENCH_PREDICT_ARGS:-} --out "$OUT/bench-predict.md" ;;
    tests_cls) step tests_cls ${TESTS_CLS_S:-420} $PY -m pytest -p no:cacheprovider --import-mode=importlib -m "cuda or multigpu" -q -rfE \
             -o addopts="" tests-integration/test_gpu_classify.py tests-integration/test_multigpu_train.py -k "classif or resnet or cuda" ;;
    parity_cls) step parity_cls ${PARITY_CLS_S:-600} $PY tools/parity_matrix.py --families resnet,efficientnetv2,convnext,mobilenetv4 \
             --out "$OUT/parity-matrix-cls.md" --json "$OUT/parity-cls.json" ;;
    bench_infer_cls) step bench_infer_cls 300 $PY tools/bench_infer_graphs.py --no-compile --models '' \
             --extra bench_models:resnet50_infer --extra bench_models:efficientnetv2b0_infer \
             --extra bench_models:convnexttiny_infer --extra bench_models:mobilenetv4small_infer --out "$OUT/bench-infer-cls.md" ;;
    bench_train_cls) step bench_train_cls 300 $PY tools/bench_train_graphs.py --deterministic --no-resnet18 \
             --extra bench_models:resnet50_train --extra bench_models:efficientnetv2b0_train \
             --extra bench_models:convnexttiny_train --extra bench_models:mobilenetv4small_train --out "$OUT/bench-train-cls.md" ;;
    *) echo "unknown step $what" ;;
  esac
done
echo; cat "$SUMMARY"
