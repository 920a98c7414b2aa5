"""The stage-pipeline part of the placement benchmark: policy -> generator -> reward as a
:class:`~agents.placement.StagePipeline` (threads in one process) against the same stages run
item by item."""

from __future__ import annotations

import time

import torch

from agents.placement import Stage, StagePipeline


def bench_stage_pipeline(device: str, cfg: dict) -> dict:
    """Item-by-item and pipelined seconds for ``cfg["pipe_items"]`` prompts, with each stage's own time."""
    from examples import toy_models as toy  # imports transformers

    prompts = toy.random_prompts(cfg["pipe_items"], batch=2, seed=5)
    # sizes chosen so the three stages take similar time on a CPU core (~20-40 ms per item):
    # overlap can only hide stages behind the slowest one
    policy = toy.PromptPolicy(toy.tiny_policy_lm(hidden=384, layers=6), device)
    generator = toy.ImageGenerator(toy.tiny_ddpm(), device, steps=1)
    reward = toy.ClipReward(toy.tiny_clip(image_size=32, hidden=384, layers=6), device)
    pipe = StagePipeline(
        [Stage(policy, device, "policy"), Stage(generator, device, "generator"), Stage(reward, device, "reward")]
    )
    saved = torch.get_num_threads()
    # one torch thread: with several, the stage threads' OpenMP teams fight over the cores
    torch.set_num_threads(1)
    try:
        [reward(generator(policy(p))) for p in prompts[:1]]  # warm-up
        stage_s = [0.0, 0.0, 0.0]
        sequential = []
        start = time.perf_counter()
        for p in prompts:
            value = p
            for k, fn in enumerate((policy, generator, reward)):
                t0 = time.perf_counter()
                value = fn(value)
                stage_s[k] += time.perf_counter() - t0
            sequential.append(value)
        t_seq = time.perf_counter() - start
        start = time.perf_counter()
        piped = pipe.run(prompts)
        t_pipe = time.perf_counter() - start
    finally:
        torch.set_num_threads(saved)
    if not all(torch.allclose(a, b) for a, b in zip(sequential, piped)):
        raise RuntimeError("the pipeline changed the results")
    ideal = sum(stage_s) / max(stage_s)  # overlap can at best hide every stage behind the slowest one
    print(
        f"  stage pipeline, 1 torch thread: item by item {t_seq:.3f} s, pipelined {t_pipe:.3f} s "
        f"(stages {', '.join(f'{v:.3f}' for v in stage_s)} s; ideal {ideal:.2f}x)",
        flush=True,
    )
    run = {
        "sequential_s": t_seq,
        "pipeline_s": t_pipe,
        "speedup": t_seq / t_pipe,
        "stage_s": dict(zip(("policy", "generator", "reward"), stage_s)),
        "ideal_speedup": ideal,
    }
    return {"items": len(prompts), "device": device, "threads_1": run}
