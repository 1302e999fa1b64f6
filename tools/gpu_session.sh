#!/usr/bin/env bash
# GPU session driver: runs steps (tests, the parity matrix, benchmarks, probes) on the lent GPU
# machine from this checkout's sources (no install), each under a time limit, then prints a summary.
#
#   bash tools/gpu_session.sh STEP [STEP ...]      # from the repository root, on the GPU machine
#   E2E_ARMS=eager-cl-fast,graph-cl-fast bash tools/gpu_session.sh tests_gpu train_vs_peer
#
# Steps and what each measures: tools/README.md (and the case list below). A step's sizes and time
# limit come from environment variables named in its line (E2E_S, IMAGES, E2E_ARMS, TTA_S,
# BENCH_PREDICT_ARGS, ...). Names from earlier notes (e2e_peer, bench_predict, tta, ...) still work:
# OLD_NAMES maps them to today's.
# Logs: $OUT/<step>.log (OUT defaults to /tmp/gpu-out), each step's markdown report beside it, and
# $OUT/summary.txt: every step's exit status, seconds and last ${TAIL:-25} log lines, printed last.
# Wheels: the benchmark peers and tools the machine lacks (Ultralytics, PyAV, TorchCodec, py-spy)
# travel in .whl/ (git-ignored: carry it with the call, e.g. carry=[".whl"]) and are installed into
# /tmp/peer-site beside, never over, the machine's own torch and numpy. Without them the peer arms
# say "not importable" and the py-spy steps fail.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export PYTHONPATH="$PWD/packages/libreyolo-cudagraph/src:$PWD/packages/libreyolo-ddp/src:$PWD/packages/libreyolo-models/src:$PWD/packages/libreyolo-cli/src:$PWD/packages/libreyolo/src:$PWD/tools"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export LIBREYOLO_CACHE_DIR=/tmp/libreyolo-cache LIBREYOLO_HUB_URL=http://127.0.0.1:9
# The carried wheels (see above), installed beside the machine's own packages.
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
# Step names used in earlier sessions' notes still run their steps, under today's names.
declare -A OLD_NAMES=([bench_infer]=infer_graph_vs_eager [compile]=infer_vs_compile
  [compile_yolo]=infer_vs_compile_yolo9t [bench_train]=train_step_graph_vs_eager
  [bench_data]=data_pipeline [e2e]=train_graph_vs_eager [e2e_peer]=train_vs_peer
  [e2e_grid]=train_memory_grid [e2e_profile]=train_step_phases [e2e_spy]=train_pyspy
  [tta]=time_to_accuracy [tta_profile]=time_to_accuracy_pyspy [ddp]=ddp_scaling
  [shapes20]=cli_train_shapes [bench_predict]=predict_vs_peer [bench_export]=export_latency
  [sweeps]=recipe_sweeps [probe_step]=probe_train_step [probe_variants]=probe_step_variants
  [probe_nms]=probe_nms_load [probe_memory]=probe_predict_memory [probe_net]=probe_net_kernels
  [tests_new]=tests_jobs [predict_tests]=tests_predict [tests_gpucache]=tests_data_gpu
  [tests_quick]=tests_augment_equivalence [tests_speed]=tests_train_speed)
for what in "$@"; do
  what=${OLD_NAMES[$what]:-$what}
  case $what in
    # The machine
    env) step env 60 bash -c "nvidia-smi --query-gpu=name,memory.total --format=csv; $PY -c 'import torch,sys;print(sys.version, torch.__version__, torch.cuda.device_count())'; nproc; $PY tools/probe_modules.py" ;;
    # Tests (pytest markers cuda / multigpu / learning)
    tests) step tests ${TESTS_S:-330} $PY -m pytest -p no:cacheprovider --import-mode=importlib -m "cuda or multigpu" -q -rfE \
             -n ${TEST_PROCS:-4} --durations=15 -o addopts="" packages tests-integration ;;
    tests_gpu) step tests_gpu ${TESTS_S:-420} $PY -m pytest -p no:cacheprovider --import-mode=importlib -m "(cuda or multigpu) and not learning" \
             -q -rfE -n ${TEST_PROCS:-3} --durations=20 -o addopts="" packages tests-integration ;;
    tests_graph) step tests_graph 300 $PY -m pytest -p no:cacheprovider --import-mode=importlib -m "cuda or multigpu" -q -rfE \
             -n 3 -o addopts="" packages/libreyolo-cudagraph/tests/test_cg_gpu_train.py tests-integration/test_gpu_zoo.py \
             packages/libreyolo-ddp/tests/test_ddp_batch_autobatch.py ;;
    tests_jobs) step tests_jobs ${TESTS_NEW_S:-240} $PY -m pytest -p no:cacheprovider --import-mode=importlib -m cuda -v -rfE -o addopts="" \
             -n ${TEST_PROCS:-4} packages/libreyolo-models/tests/test_predict_streams.py packages/libreyolo-models/tests/test_predict_device.py \
             packages/libreyolo-models/tests/test_letterbox_device.py packages/libreyolo-models/tests/test_nms_batched.py \
             packages/libreyolo-models/tests/test_train_speed.py packages/libreyolo-models/tests/test_export.py \
             packages/libreyolo-models/tests/test_track.py packages/libreyolo-models/tests/test_predict_outputs.py \
             tests-integration/test_gpu_zoo.py tests-integration/test_gpu_semantic.py tests-integration/test_gpu_classify.py \
             tests-integration/test_export_gpu.py ;;
    # Named test files only (TEST_FILES="a.py b.py"), verbose: the rows a crowded full run did not reach.
    tests_files) step tests_files ${TESTS_S:-420} $PY -m pytest -p no:cacheprovider --import-mode=importlib -m "cuda or multigpu" \
             -v -rfE -n ${TEST_PROCS:-2} -o addopts="" ${TEST_FILES:?TEST_FILES=path.py ...} ;;
    tests_predict) step tests_predict 300 $PY -m pytest -p no:cacheprovider --import-mode=importlib -m cuda -q -rfE -o addopts="" \
             packages/libreyolo-models/tests/test_predict_streams.py packages/libreyolo-models/tests/test_predict_device.py \
             packages/libreyolo-models/tests/test_letterbox_device.py packages/libreyolo-models/tests/test_nms_batched.py \
             packages/libreyolo-models/tests/test_predict_staging.py packages/libreyolo-models/tests/test_predict.py \
             packages/libreyolo-models/tests/test_graph_dispatch.py packages/libreyolo-models/tests/test_export.py \
             packages/libreyolo-models/tests/test_predict_gpu_jpeg.py packages/libreyolo-models/tests/test_predict_padding.py ;;
    tests_data_gpu) step tests_data_gpu 180 $PY -m pytest -p no:cacheprovider --import-mode=importlib -m "cuda or multigpu" -q -rfE -o addopts="" \
             packages/libreyolo-models/tests/test_device_cache.py packages/libreyolo-models/tests/test_augment_equivalence.py \
             packages/libreyolo-models/tests/test_render_graph.py packages/libreyolo-models/tests/test_augment_ops.py ;;
    tests_augment_equivalence) step tests_augment_equivalence 40 $PY -m pytest -p no:cacheprovider --import-mode=importlib -m cuda -q -rfE -o addopts="" \
             packages/libreyolo-models/tests/test_augment_equivalence.py ;;
    tests_train_speed) step tests_train_speed 240 $PY -m pytest -p no:cacheprovider --import-mode=importlib -m cuda -q -rA -o addopts="" \
             packages/libreyolo-models/tests/test_train_speed.py packages/libreyolo-models/tests/test_fused_optim.py ;;
    tests_half_weights) step tests_half_weights 180 $PY -m pytest -p no:cacheprovider --import-mode=importlib -m cuda -q -rfE \
             -o addopts="" packages/libreyolo-models/tests/test_half_weights.py ;;
    tests_classify) step tests_classify ${TESTS_CLS_S:-420} $PY -m pytest -p no:cacheprovider --import-mode=importlib -m "cuda or multigpu" -q -rfE \
             -o addopts="" tests-integration/test_gpu_classify.py tests-integration/test_multigpu_train.py -k "classif or resnet or cuda" ;;
    tests_learning) step tests_learning ${LEARN_S:-420} $PY -m pytest -p no:cacheprovider --import-mode=importlib -m "cuda and learning" \
             -q -rfE -s -n ${TEST_PROCS:-3} -o addopts="" packages tests-integration ;;
    learn_each) i=0  # LEARN_NODES: comma-separated pytest node ids, one process each, in parallel
             for node in ${LEARN_NODES//,/ }; do i=$((i+1))
               step "learn$i" ${LEARN_S:-520} $PY -m pytest -p no:cacheprovider --import-mode=importlib -q -rA -s \
                 -o addopts="" "$node" &
             done; wait ;;
    learn_families) $PY -c "from libreyolo_models.data.shapes import ensure_shapes; ensure_shapes()"  # once, not raced
             step learn_families ${LEARN_S:-540} $PY tools/learn_families.py --runs ${RUNS:?RUNS=family:size,...} \
               --epochs ${EPOCHS:-40} --timeout-s $(( ${LEARN_S:-540} - 25 )) --project /tmp/learn-families \
               --out "$OUT/learn-families.md" ${LEARN_ARGS:-} ;;
    # Graph parity (writes parity-matrix.md into $OUT)
    parity) step parity ${PARITY_S:-200} $PY tools/parity_matrix.py ${ROWS:+--rows $ROWS} ${PARITY_JOBS:+--jobs $PARITY_JOBS} --out "$OUT/parity-matrix.md" --json "$OUT/parity.json" ;;
    # Training numerics classes (two eager runs and one graphed, NUMERICS_STEPS steps): the block of
    # parity-matrix.md and the package's certificate table, both updated in $OUT (copy them back).
    numerics) cp docs/parity-matrix.md packages/libreyolo-models/src/libreyolo_models/assets/certificates.json "$OUT"/ && \
             step numerics ${NUMERICS_S:-590} $PY tools/numerics_classes.py ${ROWS:+--rows $ROWS} ${FAMILIES:+--families $FAMILIES} \
             ${SMALLEST:+--smallest} ${PRECISIONS:+--precisions $PRECISIONS} ${NUMERICS_JOBS:+--jobs $NUMERICS_JOBS} --steps ${NUMERICS_STEPS:-20} --out "$OUT/parity-matrix.md" \
             --certificates "$OUT/certificates.json" --json "$OUT/numerics.json" ;;
    parity_classifiers) step parity_classifiers ${PARITY_CLS_S:-600} $PY tools/parity_matrix.py --families resnet,efficientnetv2,convnext,mobilenetv4 \
             --out "$OUT/parity-matrix-cls.md" --json "$OUT/parity-cls.json" ;;
    # Inference: eager vs graph (vs torch.compile)
    infer_graph_vs_eager) step infer_graph_vs_eager 240 $PY tools/bench_infer_graphs.py --no-compile --extra bench_models:yolo9t_infer --out "$OUT/bench-infer.md" ;;
    infer_vs_compile) step infer_vs_compile 540 bash -c "$PY tools/bench_infer_graphs.py --compile --models '' --batches 1 --dtypes fp32,fp16 --extra bench_models:yolo9t_infer --out $OUT/bench-compile-yolo.md && $PY tools/bench_infer_graphs.py --compile --dtypes fp16 --out $OUT/bench-compile-tv.md" ;;
    infer_vs_compile_yolo9t) step infer_vs_compile_yolo9t 85 $PY tools/bench_infer_graphs.py --compile --models '' --batches 1 --dtypes fp32 \
             --reps 30 --extra bench_models:yolo9t_infer --out "$OUT/bench-compile-yolo.md" ;;
    infer_graph_vs_eager_classifiers) step infer_graph_vs_eager_classifiers 300 $PY tools/bench_infer_graphs.py --no-compile --models '' \
             --extra bench_models:resnet50_infer --extra bench_models:efficientnetv2b0_infer \
             --extra bench_models:convnexttiny_infer --extra bench_models:mobilenetv4small_infer --out "$OUT/bench-infer-cls.md" ;;
    # The family-specific graph paths (BiRefNet split, PP-OCR per-shape, SAM encoder) against eager
    special_graphs) step special_graphs ${SPECIAL_S:-300} $PY tools/bench_special_graphs.py --out "$OUT/bench-special.md" ;;
    export_latency) step export_latency ${BENCH_EXPORT_S:-240} $PY tools/bench_export.py ${BENCH_EXPORT_ARGS:-} --out "$OUT/bench-export.md" ;;
    # Predict end to end
    predict_vs_peer) step predict_vs_peer ${BENCH_PREDICT_S:-540} $PY tools/bench_predict.py ${BENCH_PREDICT_ARGS:-} --out "$OUT/bench-predict.md" ;;
    # Training
    train_step_graph_vs_eager) step train_step_graph_vs_eager 240 $PY tools/bench_train_graphs.py --deterministic --extra bench_models:yolo9t_train --out "$OUT/bench-train.md" ;;
    train_step_graph_vs_eager_classifiers) step train_step_graph_vs_eager_classifiers 300 $PY tools/bench_train_graphs.py --deterministic --no-resnet18 \
             --extra bench_models:resnet50_train --extra bench_models:efficientnetv2b0_train \
             --extra bench_models:convnexttiny_train --extra bench_models:mobilenetv4small_train --out "$OUT/bench-train-cls.md" ;;
    train_graph_vs_eager) step train_graph_vs_eager ${E2E_S:-300} $PY tools/bench_train_e2e.py --images 2048 --epochs 3 --batch 32 --deterministic --arms eager,graph,eager-cl-fast,graph-cl-fast --out "$OUT/bench-e2e.md" ;;
    train_vs_peer) step train_vs_peer ${E2E_S:-300} $PY tools/bench_train_e2e.py --sizes ${SIZES:-t} --batches ${BATCHES:-32} \
             --images ${IMAGES:-1024} --epochs ${EPOCHS:-3} --no-deterministic --peer --arms ${E2E_ARMS:-eager-cl-fast,graph-cl-fast} \
             --out "$OUT/bench-e2e-peer.md" ;;
    train_memory_grid) step train_memory_grid ${E2E_S:-560} $PY tools/bench_train_e2e.py --sizes ${SIZES:-t,s} --batches ${BATCHES:-8,32,64} \
             --images ${IMAGES:-1024} --epochs 2 --deterministic --no-peer ${E2E_ARMS:+--arms $E2E_ARMS} --out "$OUT/bench-e2e-grid.md" ;;
    train_step_phases) step train_step_phases ${E2E_S:-560} $PY tools/bench_train_e2e.py --profile --sizes ${SIZES:-t} \
             --batches ${BATCHES:-8,32,64} --images ${IMAGES:-512} --epochs 2 --deterministic --no-peer ${E2E_ARMS:+--arms $E2E_ARMS} \
             --out "$OUT/bench-e2e-profile.md" ;;
    time_to_accuracy) step time_to_accuracy ${TTA_S:-570} $PY tools/bench_time_to_accuracy.py --epochs ${TTA_EPOCHS:-30} ${ARMS:+--arms $ARMS} \
             --peer-timeout ${PEER_S:-300} --out "$OUT/bench-tta.md" ;;
    cli_train_shapes) step cli_train_shapes ${SHAPES_S:-150} $PY tools/shapes_graph_run.py --epochs 20 --imgsz 320 --batch 32 --out "$OUT/shapes20.md" ;;
    ddp_scaling) step ddp_scaling ${DDP_S:-420} $PY tools/bench_ddp.py --size s --per-gpu-batch 32 --images 1536 --epochs 3 --out "$OUT/bench-ddp.md" ;;
    data_pipeline) step data_pipeline 240 $PY tools/bench_data.py --workers 12 ;;
    data_pipeline_resident) step data_pipeline_resident 240 $PY tools/bench_data.py --workers 12 --images 1024 --arms gpu,resident ;;
    recipe_sweeps) [ -n "${SEG_BASE:-}" ] || SEG_BASE='{"epochs": 80, "batch": 16, "nbs": 16, "scale": 0.25, "device": 0, "workers": 2}'
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
    # Profiles under py-spy (its wheel in .whl/; read them with tools/flame_summary.py)
    train_pyspy) step train_pyspy ${E2E_S:-300} /tmp/peer-site/bin/py-spy record --idle --rate ${SPY_RATE:-250} --format raw \
             -o "$OUT/e2e-profile.txt" -- $PY tools/bench_train_e2e.py --sizes t --batches ${BATCHES:-32} --images ${IMAGES:-1024} \
             --epochs ${EPOCHS:-3} --no-deterministic --no-peer --arms ${E2E_ARMS:-eager-cl-fast} --out "$OUT/bench-e2e-spy.md" ;;
    time_to_accuracy_pyspy) step time_to_accuracy_pyspy ${TTA_S:-300} /tmp/peer-site/bin/py-spy record --idle --rate ${SPY_RATE:-250} --format raw \
             -o "$OUT/tta-profile.txt" -- $PY tools/bench_time_to_accuracy.py --arms ${ARMS:-ours} --epochs ${TTA_EPOCHS:-15} \
             --out "$OUT/bench-tta.md" ;;   # py-spy's wheel in .whl/; read the profile with tools/flame_summary.py
    # Probes: where the time or memory of one thing goes
    probe_train_step) step probe_train_step ${PROBE_S:-240} $PY tools/probe_train_step.py --batch ${BATCHES:-32} ${PROBE_ARGS:-} --out "$OUT/probe-train-step.md" ;;
    probe_step_variants) step probe_step_variants ${PROBE_S:-240} $PY tools/probe_step_variants.py --batch ${BATCHES:-32} ${PROBE_ARGS:-} --out "$OUT/probe-step-variants.md" ;;
    probe_half_weights) step probe_half_weights ${PROBE_S:-240} $PY tools/probe_half_weights.py ${PROBE_HW_ARGS:-} --out "$OUT/probe-half-weights.md" ;;
    probe_render) step probe_render ${PROBE_S:-120} $PY tools/probe_render.py ${PROBE_RENDER_ARGS:-} --out "$OUT/probe-render.md" ;;
    probe_checkpoint) step probe_checkpoint 120 $PY tools/probe_checkpoint.py --out "$OUT/probe-checkpoint.md" ;;
    probe_nms_load) step probe_nms_load 90 $PY tools/probe_nms_load.py ;;
    probe_predict) step probe_predict ${PROBE_S:-200} $PY tools/probe_predict.py --wide --out "$OUT/probe-predict.md" ;;
    probe_decode) step probe_decode 120 $PY tools/probe_decode.py --out "$OUT/probe-decode.md" ;;
    probe_compile_capture) step probe_compile_capture ${PROBE_S:-200} $PY tools/probe_compile_capture.py ;;
    probe_video_decode) step probe_video_decode ${PROBE_S:-200} $PY tools/probe_video_decode.py ${PROBE_VIDEO_ARGS:-} --out "$OUT/probe-video-decode.md" ;;
    probe_folder) step probe_folder ${PROBE_S:-200} $PY tools/probe_folder.py ${PROBE_FOLDER_ARGS:-} --out "$OUT/probe-folder.md" ;;
    probe_video) step probe_video ${PROBE_S:-200} $PY tools/probe_video.py --out "$OUT/probe-video.md" ;;
    probe_predict_memory) step probe_predict_memory ${PROBE_S:-200} $PY tools/probe_predict_memory.py --out "$OUT/probe-predict-memory.md" ;;
    probe_eager_host) step probe_eager_host ${PROBE_S:-240} $PY tools/probe_eager_host.py --out "$OUT/probe-eager-host.md" ;;
    probe_net_shapes) step probe_net_shapes ${PROBE_S:-120} $PY tools/probe_net_shapes.py --out "$OUT/probe-net-shapes.md" ;;
    probe_interleave) step probe_interleave ${PROBE_S:-150} $PY tools/probe_interleave.py --out "$OUT/probe-interleave.md" ;;
    probe_net_kernels) step probe_net_kernels ${PROBE_S:-420} $PY tools/probe_net_kernels.py ${PROBE_NET_ARGS:---batches 1,32} ;;
    *) echo "unknown step $what" ;;
  esac
done
echo; cat "$SUMMARY"
