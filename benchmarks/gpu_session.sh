#!/usr/bin/env bash
# The GPU checks of issue 15 in one call of a lent GPU machine, sized to fit its minutes:
#
#   bash benchmarks/gpu_session.sh wheels   # here, once: the wheels the GPU image lacks, into .whl/
#   bash benchmarks/gpu_session.sh run [tests] [env] [train]   # there (the device tool's `run`,
#                                                              # carry [".whl"]); default: all three
#
# Each step runs under its own limit (tests 200 s, env 150 s, training 100 + 240 s) and all of them
# within $BUDGET (570 s: the device tool stops a call at 600): a step that would start with under
# 30 s left is skipped and named in the log, so give the call timeout_s 600, and run the skipped
# steps in a second call (`run train`) within the 30 s the machine stays warm.
#
# `run` writes under $OUT (the device tool's folder; default gpu_session_out/), at most 7 files:
#   log.txt            the machine, the CUDA tests' summary, each benchmark's output
#   env/env_throughput-*.{json,md}      the batched env on the GPU, eager, up to 262,144
#                                       environments, with the achieved bandwidth fraction
#   train_ours/train_throughput-ours-*.{json,md}  agent-steps/s of whole training iterations on the
#                                       GPU, bf16, 4,096 environments: eager
#   train_ours-captured/...             the same with train.compile and train.compile_rollout
# The exit status is 1 if a step failed, ran out of time or was skipped.
# Each step has its own time limit, so one that hangs or fails leaves the others' results (a
# benchmark writes its files at its end). The device image has torch (2.11 when last read,
# Python 3.12) but not omegaconf or gymnasium: they travel as wheels. Every test marked `cuda`
# runs but the TorchRL adapter's file (torchrl and tensordict are not on the image).
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
    steps=("${@:2}")
    [ ${#steps[@]} -eq 0 ] && steps=(tests env train)
    for step in "${steps[@]}"; do
        case "$step" in tests|env|train) ;; *) echo "unknown step $step (tests, env, train)" >&2; exit 2 ;; esac
    done
    OUT=${OUT:-gpu_session_out}
    BUDGET=${BUDGET:-570}  # seconds for the whole run: the device tool stops a call at 600
    mkdir -p "$OUT"
    LOG="$OUT/log.txt"
    failed=0
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

    # limited STEP_LIMIT CMD...: CMD under min(STEP_LIMIT, the budget left) seconds, its output in the
    # log as it comes, its exit status noted (124: its limit ran out); skipped under 30 s left.
    limited() {
        local limit=$1 left=$((BUDGET - SECONDS)); shift
        [ "$left" -lt "$limit" ] && limit=$left
        if [ "$limit" -lt 30 ]; then echo "skipped (${left}s of the budget left): $*" | tee -a "$LOG"; failed=1; return; fi
        timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
        local rc=${PIPESTATUS[0]}
        echo "exit status $rc after ${SECONDS}s of the run (limit ${limit}s): $*" | tee -a "$LOG"
        [ "$rc" -eq 0 ] || failed=1
        rm -f "$OUT"/*/*.png  # few files come back: the tables and JSON carry the figures
    }
    for step in "${steps[@]}"; do
        case "$step" in
        tests)
            echo "== CUDA tests" | tee -a "$LOG"
            limited 200 $PY -m pytest -q -m cuda -p no:cacheprovider -o addopts="" -rfEs --timeout 90 \
                --ignore=tests/adapters/test_torchrl.py tests  # torchrl and tensordict: not on the image
            ;;
        env)
            echo "== env throughput" | tee -a "$LOG"
            limited 150 $PY -m benchmarks.env_throughput --backends batched-cuda batched-cuda-next-step-bf16 \
                batched-cuda-sparse --max-gpu-envs 262144 --repeats 3 --seconds 0.5 --out-dir "$OUT/env"
            ;;
        train)
            for pipeline in ours ours-captured; do
                echo "== training throughput: $pipeline" | tee -a "$LOG"
                limit=100; [ "$pipeline" = ours-captured ] && limit=240
                limited $limit $PY -m benchmarks.train_throughput --devices cuda --amps bf16 --pipelines "$pipeline" \
                    --num-envs 4096 --num-steps 64 --iterations 3 --out-dir "$OUT/train_$pipeline"
                for f in "$OUT/train_$pipeline"/train_throughput-*; do  # the pipeline in the name: both can be kept
                    [ -e "$f" ] && mv "$f" "${f/train_throughput-/train_throughput-$pipeline-}"
                done
            done
            ;;
        esac
    done
    ls -lR "$OUT" | tee -a "$LOG"
    exit $failed
    ;;
*)
    echo "usage: bash benchmarks/gpu_session.sh wheels | run [tests] [env] [train]" >&2
    exit 2
    ;;
esac
