#!/usr/bin/env bash
# The GPU checks (issues 32 and 48) in calls of a lent GPU machine, sized to fit its minutes:
#
#   bash benchmarks/gpu_session.sh wheels   # here, once: the wheels the GPU image lacks, into .whl/
#   bash benchmarks/gpu_session.sh run [STEP ...]   # there (the device tool's `run`, carry [".whl"])
#
# Steps (default: learn train env tests; the first call seldom has time for the tests: run them in a
# second call, `run tests peers`):
#   tests       every test marked `cuda` (4 pytest workers)
#   env         the batched env on the GPU, eager, up to 262,144 environments, with the achieved
#               bandwidth fraction, and the NumPy reference loop of the same run
#   peers       VMAS navigation beside ours on the same GPU (<= 65,536 envs: its memory grows faster)
#   train       agent-steps/s of whole training iterations, bf16, 4,096 environments: eager and
#               captured (train.compile, train.compile_rollout) in one run
#   envcompile  the env's step under torch.compile beside the eager one
#   learn       `make train` as a user runs it on a GPU machine (run.recipe=auto: the GPU recipe,
#               configs/recipe_gpu.yaml over configs/default.yaml), its process wall clock, GPU
#               utilisation sampled each second, then agents.evaluate on the 512 test maps (--split test)
#
# Each step runs under its own limit and all of them within $BUDGET (570 s: the device tool stops a
# call at 600): a step that would start with under 30 s left is skipped and named in the log, so
# give the call timeout_s 600, and run the skipped steps in a second call within the 30 s the
# machine stays warm.
#
# `run` writes $OUT/log.txt (the machine, the CUDA tests' summary, each benchmark's output) and
# $OUT/results.tgz with every step's files (the device tool brings back 8 files).
# The exit status is 1 if a step failed, ran out of time or was skipped.
# Each step has its own time limit, so one that hangs or fails leaves the others' results (a
# benchmark writes its files at its end). The device image has torch (2.11.0+cu130 on 2026-11-26,
# Python 3.12) but not omegaconf, gymnasium or VMAS: they travel as wheels. Every test marked `cuda`
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
    # VMAS and what it needs beyond the image (pure Python; vmas has no wheel on the index)
    $PY -m pip wheel -q --no-deps -w .whl vmas==1.5.2 gym==0.26.2 gym-notices==0.0.8 pyglet==1.5.27 || exit
    ls .whl
    ;;
run)
    steps=("${@:2}")
    [ ${#steps[@]} -eq 0 ] && steps=(learn train env tests)
    for step in "${steps[@]}"; do
        case "$step" in
        tests | env | peers | train | envcompile | learn) ;;
        *) echo "unknown step $step (tests, env, peers, train, envcompile, learn)" >&2; exit 2 ;;
        esac
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
    }
    for step in "${steps[@]}"; do
        case "$step" in
        tests)
            echo "== CUDA tests" | tee -a "$LOG"
            limited 150 $PY -m pytest -q -m cuda -p no:cacheprovider -o addopts="" -rfEs --timeout 90 -n 4 \
                --ignore=tests/adapters/test_torchrl.py tests  # torchrl and tensordict: not on the image
            ;;
        env)
            echo "== env throughput" | tee -a "$LOG"
            limited 120 $PY -m benchmarks.env_throughput --backends reference-loop batched-cuda \
                batched-cuda-next-step-bf16 batched-cuda-sparse --max-gpu-envs 262144 --repeats 3 --seconds 0.5 \
                --out-dir "$OUT/env"
            ;;
        peers)
            echo "== env throughput: VMAS beside ours" | tee -a "$LOG"
            limited 60 $PY -m benchmarks.env_throughput --backends batched-cuda vmas-navigation-cuda \
                --max-gpu-envs 65536 --repeats 3 --seconds 0.5 --out-dir "$OUT/peers"
            ;;
        train)
            echo "== training throughput: eager and captured" | tee -a "$LOG"
            limited 240 $PY -m benchmarks.train_throughput --devices cuda --amps bf16 --pipelines ours ours-captured \
                --num-envs 4096 --num-steps 64 --iterations "${ITERATIONS:-3}" --out-dir "$OUT/train"
            ;;
        envcompile)
            echo "== env throughput: compiled step" | tee -a "$LOG"
            limited 150 $PY -m benchmarks.env_throughput --backends batched-cuda batched-cuda-compile \
                --max-gpu-envs 262144 --repeats 3 --seconds 0.5 --out-dir "$OUT/envcompile"
            ;;
        learn)
            echo "== default training on the GPU" | tee -a "$LOG"
            mkdir -p "$OUT/learn"
            nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 1 >"$OUT/learn/nvidia-smi.csv" &
            smi=$!
            # leaves 120 s for the evaluation (512 maps and two planners: 40 s for 256 on an H100)
            began=$SECONDS
            limited $((BUDGET - SECONDS - 120)) $PY -m agents.train_mappo run.dir=/tmp/learn run.progress=false
            echo "learn: process wall clock $((SECONDS - began)) s (the issue's target: <= 60 s)" | tee -a "$LOG"
            kill $smi
            cp /tmp/learn/config.yaml /tmp/learn/events.out.tfevents.* "$OUT/learn/" 2>/dev/null
            # the newest checkpoint, whether or not the run finished within its limit; the test maps
            # the README's figures are reported on
            limited 120 $PY -m agents.evaluate /tmp/learn --split test --out "$OUT/learn/eval.json"
            rm -f "$OUT"/learn/*.gif
            ;;
        esac
    done
    ls -lR "$OUT" | tee -a "$LOG"
    # everything but the log in one archive, written beside $OUT first (tar refuses a folder that
    # changes while it reads it)
    (cd "$OUT" && tar czf /tmp/gpu_results.tgz --exclude log.txt . && find . -mindepth 1 -maxdepth 1 -type d -exec rm -r {} + \
        && mv /tmp/gpu_results.tgz results.tgz)
    exit $failed
    ;;
*)
    echo "usage: bash benchmarks/gpu_session.sh wheels | run [tests] [env] [peers] [train] [envcompile] [learn]" >&2
    exit 2
    ;;
esac
