"""The GPU model's arithmetic: seconds of a piece of work on an H100 / H200 from its counts (kernels,
host syncs, bytes, FLOPs), and of the phases of a training run added up. The formula and what each
constant stands for: `benchmarks.gpu_model`'s docstring.
"""

from __future__ import annotations

import dataclasses

from benchmarks.step_cost import GPUS

# Dense bf16 matmul rate, FLOP/s: 788 T measured on an H200 of this workplace (8192^3, random data);
# the H100 is the same processor (the datasheets give both ~990 T).
MATMUL_PEAK = {"H100 SXM": 788e12, "H200": 788e12}


@dataclasses.dataclass(frozen=True)
class Constants:
    """The model's constants (seconds per kernel / sync, fractions of the datasheet / measured peaks)."""

    launch_eager_us: float  # host cost per eager kernel (Python + dispatcher + launch)
    launch_compiled_us: float  # per eager-counted kernel of `train.compile(_rollout)` with graphs skipped
    launch_planner_us: float  # host cost per op of a scripted planner's call (uavsim.scripted)
    launch_replayed_us: float  # per kernel replayed from a CUDA graph (assumed: no committed row replayed one)
    sync_us: float  # per host sync beyond the queue it drains
    bw_fraction: float  # of the DRAM peak the counted bytes stream at
    mm_efficiency: float  # of MATMUL_PEAK the update's matmuls reach (assumed: small GEMMs, never dominant)
    process_s: float  # a training process's start, build and shutdown

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if not getattr(self, f.name) >= 0:
                raise ValueError(f"constant {f.name} must be >= 0, got {getattr(self, f.name)}")


def work_seconds(
    kernels: float, syncs: float, nbytes: float, flops: float, gpu: str, c: Constants, launch: str = "eager"
) -> dict[str, float]:
    """Seconds of one piece of work, and its terms (the formula: `benchmarks.gpu_model`'s docstring)."""
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}; known: {sorted(GPUS)}")
    per = {
        "eager": c.launch_eager_us,
        "compiled": c.launch_compiled_us,
        "replayed": c.launch_replayed_us,
        "planner": c.launch_planner_us,
    }
    if launch not in per:
        raise ValueError(f"launch must be one of {sorted(per)}, got {launch!r}")
    host = kernels * per[launch] * 1e-6
    memory = nbytes / (c.bw_fraction * GPUS[gpu]) if nbytes else 0.0
    matmul = flops / (c.mm_efficiency * MATMUL_PEAK[gpu]) if flops else 0.0
    sync = syncs * c.sync_us * 1e-6
    return {
        "seconds": max(host, memory + matmul) + sync,
        "launches": host,
        "memory": memory,
        "matmul": matmul,
        "syncs": sync,
    }


def scaled(terms: dict[str, float], times: float) -> dict[str, float]:
    return {k: v * times for k, v in terms.items()}


TERMS = ("seconds", "launches", "memory", "matmul", "syncs")


def total(parts: dict[str, dict[str, float]]) -> dict[str, float]:
    """The sum of ``parts``' terms (`TERMS`; shares such as 'rollout launches' are not summed)."""
    return {k: sum(terms.get(k, 0.0) for terms in parts.values()) for k in TERMS}


def env_step(counts: dict, variant: str, envs: int, gpu: str, c: Constants) -> dict[str, float]:
    """One env step of ``envs`` environments: kernels and syncs from the 256-env count (every step
    has resets there, as at thousands), bytes per env-step times ``envs``."""
    k = counts[variant]["256"]
    return work_seconds(k["kernels"], k["syncs"], k["bytes_per_env_step"] * envs, 0.0, gpu, c)


def iteration_fit(it: dict) -> dict[str, float]:
    """Per-iteration counts from the three counted shapes (envs x steps = 16x18, 32x18, 16x36):
    kernels and syncs ``a + b x steps`` (checked equal at the two batch sizes), bytes and FLOPs
    ``p + r x steps + q x envs x steps`` (weights are read once per step and per minibatch,
    activations and storage once per env-step)."""
    a, b, d = it["16x18"], it["32x18"], it["16x36"]
    if not (
        a["steps"] == b["steps"] and a["envs"] == d["envs"] and b["envs"] != a["envs"] and d["steps"] != a["steps"]
    ):
        raise ValueError("iteration counts need shapes (E, T), (E', T) and (E, T') with E != E' and T != T'")
    dt = d["steps"] - a["steps"]
    out = {
        "kernels_per_step": (d["kernels"] - a["kernels"]) / dt,
        "syncs_per_step": (d["syncs"] - a["syncs"]) / dt,
        "same_kernels_at_two_batches": a["kernels"] == b["kernels"],
    }
    out["kernels_fixed"] = a["kernels"] - out["kernels_per_step"] * a["steps"]
    out["syncs_fixed"] = a["syncs"] - out["syncs_per_step"] * a["steps"]
    for k in ("bytes", "flops"):
        q = (b[k] - a[k]) / ((b["envs"] - a["envs"]) * a["steps"])
        r = (d[k] - a[k] - q * a["envs"] * dt) / dt
        out[f"{k}_per_env_step"], out[f"{k}_per_step"] = q, r
        out[f"{k}_fixed"] = a[k] - r * a["steps"] - q * a["envs"] * a["steps"]
    return out


def iteration_counts(it: dict, envs: int, steps: int) -> dict[str, float]:
    """Kernels, syncs, bytes and FLOPs of one iteration of ``envs`` x ``steps`` (`iteration_fit`)."""
    f = iteration_fit(it)
    out = {k: f[f"{k}_fixed"] + f[f"{k}_per_step"] * steps for k in ("kernels", "syncs")}
    for k in ("bytes", "flops"):
        out[k] = f[f"{k}_fixed"] + f[f"{k}_per_step"] * steps + f[f"{k}_per_env_step"] * envs * steps
    return out


def iteration(it: dict, envs: int, steps: int, gpu: str, c: Constants, launch: str = "eager") -> dict[str, float]:
    n = iteration_counts(it, envs, steps)
    return work_seconds(n["kernels"], n["syncs"], n["bytes"], n["flops"], gpu, c, launch)


def per_call(call: dict, gpu: str, c: Constants, launch: str = "eager") -> dict[str, float]:
    """A counted call (kernels, syncs, bytes, FLOPs, at the batch it ran) as `work_seconds`."""
    return work_seconds(call["kernels"], call["syncs"], call["bytes"], call["flops"], gpu, c, launch)


def cloning(mb: dict, im: dict, gpu: str, c: Constants, launch: str = "eager") -> dict[str, float]:
    """Behaviour cloning's passes: ``im``'s epochs over its frames (``epochs``, ``frames``,
    ``minibatch_steps``) in minibatches counted as ``mb``, launched as ``launch``; each epoch adds its
    read of the loss and accuracy (a host sync) and, where counted (``mb["epoch"]``), its own ops."""
    minibatches = sum(e * (f // im["minibatch_steps"]) for e, f in zip(im["epochs"], im["frames"]))
    epoch = mb.get("epoch", {"kernels": 0, "syncs": 0, "bytes": 0, "flops": 0})
    epochs = sum(im["epochs"])
    return total(
        {
            "mb": scaled(per_call(mb, gpu, c, launch), minibatches),
            "epochs": scaled(per_call(epoch | {"syncs": epoch["syncs"] + 1}, gpu, c, launch), epochs),
        }
    )


def learn_run(
    lc: dict,
    envs: int,
    steps: int,
    env_steps: float,
    eval_interval: float,
    gpu: str,
    c: Constants,
    launch: str = "eager",
    planner_syncs: float | None = None,
) -> dict[str, dict[str, float]]:
    """A training run's phases, each `work_seconds`' terms summed: ``lc`` is a `gpu_counts` learn
    count; ``launch`` is the PPO iterations' launch mode; ``planner_syncs`` replaces the planner's
    counted host syncs per call (a design's)."""
    iterations = env_steps / (envs * steps)
    parts = {"process": {"seconds": c.process_s, "launches": 0, "memory": 0, "matmul": 0, "syncs": 0}}
    im = lc.get("imitation")
    if im:
        call = dict(im["demo_call"])
        if planner_syncs is not None:
            call["syncs"] = planner_syncs
        demo = per_call(call, gpu, c, launch="planner")
        dagger = total({"call": demo, "policy": per_call(im["dagger_policy_step"], gpu, c)})
        parts["imitation: planner calls"] = scaled(demo, im["demo_steps"])
        parts["imitation: DAgger steps"] = scaled(dagger, im["dagger_rounds"] * im["dagger_steps"])
        parts["imitation: cloning"] = cloning(im["clone_minibatch"], im, gpu, c)
    one = iteration(lc["iteration"], envs, steps, gpu, c, launch)
    rollout = work_seconds(iteration_fit(lc["iteration"])["kernels_per_step"] * steps, 0, 0, 0, gpu, c, launch)
    parts["PPO iterations"] = scaled(one, iterations)
    parts["PPO iterations"]["rollout launches"] = rollout["launches"] * iterations  # a share of its launches
    parts |= evaluation_parts(lc, env_steps, eval_interval, gpu, c)
    return parts


def evaluation_parts(lc: dict, env_steps: float, eval_interval: float, gpu: str, c: Constants) -> dict[str, dict]:
    """The in-training evaluations and the planners' reference episodes they compute once; none where
    the run does not evaluate (``eval_interval`` 0: the GPU recipe's)."""
    if eval_interval <= 0:
        return {}
    evals = int(env_steps // eval_interval)
    if "eval_episode_argmax" not in lc:
        raise ValueError("these counts were taken at run.eval_interval 0: count the run again to predict evaluations")
    parts = {}
    episodes = total({k: per_call(lc[k], gpu, c) for k in ("eval_episode_argmax", "eval_episode_sampled")})
    # and one more argmax episode for the logged image (`first_episode_frames`)
    parts["in-training evaluations"] = scaled(
        total({"2": episodes, "img": per_call(lc["eval_episode_argmax"], gpu, c)}), evals
    )
    steps_per_episode = lc["eval_steps"]
    parts["planners' reference episodes (once)"] = total(
        {
            t: scaled(per_call(lc[f"eval_baseline_{t}_call"], gpu, c, launch="planner"), steps_per_episode)
            for t in ("greedy", "coordinated")
        }
    )
    return parts
