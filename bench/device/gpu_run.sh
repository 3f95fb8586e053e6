#!/usr/bin/env bash
# On a lent GPU machine (bare, no registry; see bench/device/pack.sh), in two calls since one transfer holds 64 MiB:
#   bash bench/device/gpu_run.sh stash      # carry .dev/p1: keeps TVM's first part on the machine, probes it
#   bash bench/device/gpu_run.sh run [S [M]]  # carry .dev/p2: installs, runs the GPU tests and bench/gpu_check.py
#                                             #   (S tuning seconds for its four cases, default 240; M the model's
#                                             #   share of them, default 0.35)
# Logs and the JSON land in $OUT (the device tool brings that folder back).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/autosched-out}; mkdir -p "$OUT"
STASH=/root/autosched-dev
PY=${PY:-python3}

probe() {
  echo "== $(date -u +%T) machine"; nvidia-smi -L; nproc; "$PY" --version
  "$PY" -c "import numpy, torch, ml_dtypes; print('numpy', numpy.__version__, 'torch', torch.__version__, \
'ml_dtypes', ml_dtypes.__version__, 'cuda', torch.cuda.is_available())"
  command -v nvcc && nvcc --version | tail -2
}

cudart_dir() {
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64 \
           $("$PY" -c "import nvidia, os; print(' '.join(os.path.join(p, s) for p in nvidia.__path__ \
for s in ('cu13/lib', 'cuda_runtime/lib')))" 2>/dev/null); do
    [ -e "$d/libcudart.so.13" ] && { echo "$d"; return; }
  done
  dirname "$(find / -name 'libcudart.so.13*' -not -path '/proc/*' 2>/dev/null | head -1)"
}

if [ "${1:-run}" = stash ]; then
  mkdir -p "$STASH" && cp .dev/p1/* "$STASH"/ && ls -la "$STASH"
  probe 2>&1 | tee "$OUT/probe.log"; echo "cudart: $(cudart_dir)" | tee -a "$OUT/probe.log"
  exit 0
fi

budget=${2:-240}
share=${3:-0.35}
site=/tmp/site; rm -rf "$site"; mkdir -p "$site"
part1=$(ls "$STASH"/tvm.tar.xz.part-aa .dev/p1/tvm.tar.xz.part-aa 2>/dev/null | head -1)
[ -n "$part1" ] || { echo "TVM's first part is not on this machine: run 'gpu_run.sh stash' first (carry .dev/p1)"; exit 3; }
echo "== $(date -u +%T) install"
cat "$part1" .dev/p2/tvm.tar.xz.part-* | xz -d | tar x -C "$site" || exit 3
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .dev/p2/*.whl || exit 3
export PYTHONPATH="$site:$PWD" PYTHONUNBUFFERED=1 AUTOSCHED_QUIET=0
export LD_LIBRARY_PATH="$(cudart_dir):${LD_LIBRARY_PATH:-}" PATH="/usr/local/cuda/bin:$PATH"
probe
"$PY" -c "import tvm; d = tvm.cuda(0); print('tvm', tvm.__version__, 'cuda', d.exist, d.compute_version)" || exit 3

echo "== $(date -u +%T) GPU tests"
TESTS=${TESTS:-tests/measure/test_cuda.py tests/spaces/test_cuda_codegen.py tests/deploy/test_cuda_models.py}
timeout 240 "$PY" -m pytest -p no:cacheprovider -m gpu -rs -q --timeout 180 $TESTS \
  2>&1 | grep -v Warning | tee "$OUT/pytest_gpu.log" | tail -40

echo "== $(date -u +%T) bench/gpu_check.py --budget-s $budget --model-share $share"
timeout $((budget + 240)) "$PY" bench/gpu_check.py --budget-s "$budget" --model-share "$share" --repeat 7 \
  --out gpu_check_h200 \
  2>&1 | grep -v Warning > "$OUT/gpu_check.log"
cp bench/results/gpu_check_h200.json "$OUT"/ 2>/dev/null
tail -45 "$OUT/gpu_check.log"; echo "== $(date -u +%T) done"
