#!/usr/bin/env bash
# Several GPU-session commands side by side on the one lent machine ("lanes"), for correctness work
# whose timings do not matter (learning runs, parity rows, numerics, GPU tests): one call, many rows.
#
#   OUT=$OUT bash tools/gpu_lanes.sh \
#     'learn: RUNS=ec:s,fomo:100:point LEARN_S=500 bash tools/gpu_session.sh learn_families' \
#     'p1: ROWS=birefnet:t:matte,sam:b:prompt-segment PARITY_S=480 bash tools/gpu_session.sh parity' \
#     'n1: ROWS=convnext:tiny NUMERICS_S=480 bash tools/gpu_session.sh numerics'
#
# Each lane runs `bash -c` on its command with OUT=/tmp/lanes/<name> and OMP_NUM_THREADS set to the
# cores divided among the lanes (unless set already): lanes that each started one CPU thread per core
# spent their time in thread contention (a segment validation took 297 s instead of seconds). When
# every lane has ended, the lanes' folders are packed into $OUT/lanes.tgz (the call returns at most 8
# files, two folders deep) and each lane's summary is printed.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-out}; LANES=/tmp/lanes
rm -rf "$LANES"; mkdir -p "$OUT" "$LANES"
[ $# -gt 0 ] || { echo "usage: bash tools/gpu_lanes.sh 'name: command' ..." >&2; exit 2; }
threads=${OMP_NUM_THREADS:-$(( $(nproc) / $# > 0 ? $(nproc) / $# : 1 ))}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$LANES/gpu.txt" 2>&1
for lane in "$@"; do
  name=${lane%%:*}; cmd=${lane#*:}
  case $name in ''|*[!A-Za-z0-9_-]*) echo "lane name '$name': letters, digits, _ and - only" >&2; exit 2 ;; esac
  mkdir -p "$LANES/$name"
  (OUT="$LANES/$name" OMP_NUM_THREADS=$threads bash -c "$cmd" > "$LANES/$name/lane.log" 2>&1
   echo "rc=$?" >> "$LANES/$name/lane.log") &
done
wait
tar czf "$OUT/lanes.tgz" -C /tmp lanes
for d in "$LANES"/*/; do
  echo "=== lane $(basename "$d")"
  if [ -f "$d/summary.txt" ]; then cat "$d/summary.txt"; else tail -n 15 "$d/lane.log"; fi
done
