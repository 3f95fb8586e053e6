#!/usr/bin/env bash
# Pack what bench/device/gpu_run.sh needs on a bare GPU machine that has no package registry (Python 3.12, with
# PyTorch, numpy, scipy, onnxruntime already there): the pinned TVM (without its CUTLASS headers, xz-compressed
# and split in two, since one transfer holds at most 64 MiB) and the pure-Python / cp312 wheels autosched adds.
#   bash bench/device/pack.sh     # writes .dev/p1 (TVM, first part) and .dev/p2 (the rest); ~4 minutes
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
grep -qx '/.dev/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.dev/ >> .git/info/exclude; }
rm -rf .dev && mkdir -p .dev/p1 .dev/p2 .dev/wheels
PLATFORMS=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do PLATFORMS="$PLATFORMS --platform $p"; done
pin() { grep -o "\"$1==[^\"]*\"" pyproject.toml | tr -d '"'; }
for req in "$(pin apache-tvm)" "$(pin apache-tvm-ffi)" "$(pin optuna)" "$(pin sqlalchemy)" "$(pin tornado)" \
           "xgboost-cpu==$(pin xgboost | cut -d= -f3)" alembic Mako colorlog; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
    -d .dev/wheels "$req"
done
tmp=$(mktemp -d)
(cd "$tmp" && unzip -q "$OLDPWD"/.dev/wheels/apache_tvm-*.whl && rm -rf tvm/3rdparty \
   && tar cf - tvm apache_tvm-*.dist-info | xz -9e -T2 > tvm.tar.xz)
split -b 40M "$tmp/tvm.tar.xz" .dev/tvm.tar.xz.part-
mv .dev/tvm.tar.xz.part-aa .dev/p1/ && mv .dev/tvm.tar.xz.part-* .dev/p2/
rm .dev/wheels/apache_tvm-*.whl && mv .dev/wheels/*.whl .dev/p2/ && rm -rf .dev/wheels "$tmp"
du -sh .dev/p1 .dev/p2
