#!/usr/bin/env bash
# The checks for a GPU machine, in one script: the CUDA tests, then the GPU benchmarks.
# Written for a machine with one NVIDIA GPU, PyTorch with CUDA, torch-geometric and no
# network (no torch-cluster or torch-scatter needed): the package runs from this checkout
# through PYTHONPATH, nothing is installed. At most 10 minutes (the sum of the stages' time
# limits); each stage has its
# own time limit so that one slow stage cannot take the others' time.
#
#     bash benchmarks/cuda_check.sh [OUT_DIR]     # default: cuda_check_out
#
# Writes OUT_DIR/cuda_check.tgz (the result tables and every log) and prints a summary.
# A torch-harmonics wheel in .whl/ (a folder git ignores) is used where it imports.
set -uo pipefail
# STAGES: the stages to run (default: all; e.g. STAGES="tests tour" to rerun two)
STAGES=${STAGES:-"tests qsv_cuda qsv_cuda_compiled profile tour focus_speed"}
out=${1:-cuda_check_out}
res="$out/results"
mkdir -p "$res"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if ls .whl/torch_harmonics-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/th_site \
        .whl/torch_harmonics-*.whl >"$out/th_install.log" 2>&1
    # a wheel built for another torch may fail to load: probe in a child first
    if PYTHONPATH="/tmp/th_site:$PYTHONPATH" python3 -c "import torch_harmonics" \
            >>"$out/th_install.log" 2>&1; then
        export PYTHONPATH="$PYTHONPATH:/tmp/th_site"
    fi
fi
{ date -u; nvidia-smi; python3 -c "import torch, torch_geometric, sys; print(sys.version); \
print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name()); \
print('torch_geometric', torch_geometric.__version__)"; nproc; cat /proc/loadavg; } \
    >"$out/machine.txt" 2>&1
stage() {  # stage NAME LIMIT_S COMMAND... (skipped unless NAME is in $STAGES)
    local name=$1 limit=$2; shift 2
    [[ " $STAGES " == *" $name "* ]] || return 0
    local t0=$SECONDS
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "$name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
    tail -n 4 "$out/$name.log" | sed "s/^/    /"
}
stage tests 150 python3 -m pytest -q -p no:cacheprovider -o addopts="" \
    tests/test_cuda.py "tests/nn/focus/test_flex.py::test_cuda_outputs_and_gradients" \
    --junitxml="$res/cuda_tests.xml"
note="lent GPU machine, nothing else running"
stage qsv_cuda 45 python3 -m benchmarks.qsv.cuda --out "$res" --machine "$note" \
    --no-compiled --memory
stage qsv_cuda_compiled 100 python3 -m benchmarks.qsv.cuda --out "$res" --machine "$note" \
    --compiled --no-memory --name qsv_cuda_compiled --max-seconds 5
stage profile 30 python3 -m benchmarks.qsv.cuda --out "$res" --machine "$note" --profile
stage tour 150 python3 -m quest_geometric tour --device cuda --only qsv --only focus \
    --only qk --out "$out/tour"
stage focus_speed 100 python3 -m benchmarks.focus.speed --device cuda --out "$res" \
    --lengths 16384 131072 --repeat 3 --max-seconds 5 --name focus_speed_cuda
tar czf "$out/cuda_check.tgz" -C "$out" --exclude cuda_check.tgz .
cat "$out/summary.txt"
