#!/usr/bin/env bash
# The GPU checks of issue 15 in one call of a lent GPU machine, sized to fit its minutes:
#
#   bash benchmarks/gpu_session.sh wheels   # here, once: the wheels the GPU image lacks, into .whl/
#   bash benchmarks/gpu_session.sh run [tests] [env] [train]   # there (the device tool's `run`,
#                                                              # carry [".whl"]); default: all three
#
# The three steps take up to 200 + 150 + 360 s: all of them fit one call of the device tool's
# 600 s only when they end well before their limits; on a first try, run `tests env` in one call
# and `train` in the next, within the 30 s the machine stays warm.
#
# `run` writes under $OUT (the device tool's folder; default gpu_session_out/), at most 7 files:
#   log.txt            the machine, the CUDA tests' summary, each benchmark's output
#   env/env_throughput-*.{json,md}      the batched env on the GPU, eager, up to 262,144
#                                       environments, with the achieved bandwidth fraction
#   train/train_throughput-*.{json,md}  agent-steps/s of whole training iterations on the GPU,
#                                       bf16, 4,096 environments: eager
#   train_captured/...{json,md}         the same with train.compile and train.compile_rollout
# Each step has its own time limit, so one that hangs or fails leaves the others' results (a
# benchmark writes its files at its end). The device image has torch (2.11 when last read,
# Python 3.12) but not omegaconf or gymnasium: they travel as wheels. Test files that need
# packages it lacks (torchrl, tensordict) fail to collect and are skipped; every test marked
# `cuda` that collects runs.
set -u -o pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

case "${1:-}" in
wheels)
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    # the versions this project's CI installs (pure-Python wheels)
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        -d .whl omegaconf==2.4.0 gymnasium==1.4.0 farama-notifications==0.0.6 || exit
    ls .whl
    ;;
run)
    OUT=${OUT:-gpu_session_out}
    mkdir -p "$OUT"
    LOG="$OUT/log.txt"
    if [ -d .whl ]; then
        $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
            && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || exit
    fi
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
    {
        date -u
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
        $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
    } 2>&1 | tee "$LOG"
    $PY -c "import torch, sys; sys.exit(not torch.cuda.is_available())" || { echo "no CUDA device" | tee -a "$LOG"; exit 1; }
    steps=("${@:2}")
    [ ${#steps[@]} -eq 0 ] && steps=(tests env train)
    for step in "${steps[@]}"; do
        case "$step" in
        tests)
            echo "== CUDA tests" | tee -a "$LOG"
            timeout 200 $PY -m pytest -q -m cuda -p no:cacheprovider --continue-on-collection-errors \
                -o addopts="" -rfEs tests 2>&1 | tail -n 60 | tee -a "$LOG"
            ;;
        env)
            echo "== env throughput" | tee -a "$LOG"
            timeout 150 $PY -m benchmarks.env_throughput --backends batched-cuda batched-cuda-next-step-bf16 \
                batched-cuda-sparse --max-gpu-envs 262144 --repeats 3 --seconds 0.5 --out-dir "$OUT/env" \
                2>&1 | tail -n 40 | tee -a "$LOG"
            ;;
        train)
            for pipeline in ours ours-captured; do
                echo "== training throughput: $pipeline" | tee -a "$LOG"
                dir="$OUT/train"; limit=120
                [ "$pipeline" = ours-captured ] && dir="$OUT/train_captured" && limit=240
                timeout $limit $PY -m benchmarks.train_throughput --devices cuda --amps bf16 --pipelines "$pipeline" \
                    --num-envs 4096 --num-steps 64 --iterations 3 --out-dir "$dir" 2>&1 | tail -n 30 | tee -a "$LOG"
            done
            ;;
        *)
            echo "unknown step $step (tests, env, train)" | tee -a "$LOG"; exit 2
            ;;
        esac
    done
    rm -f "$OUT"/*/*.png  # the files that come back are few: the tables and JSON carry the figures
    ls -lR "$OUT" | tee -a "$LOG"
    ;;
*)
    echo "usage: bash benchmarks/gpu_session.sh wheels | run [tests] [env] [train]" >&2
    exit 2
    ;;
esac
