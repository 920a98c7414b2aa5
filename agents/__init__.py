"""MAPPO for the uavsim swarm, and the GPU placement library the team's other pipelines share.

- `agents.algo`: the algorithm (networks, rollout, GAE, PPO, imitation, the learner's iteration);
- `agents.run`: the run around it (device and process setup, machine defaults, checkpoints and
  resume, logs, torchrun);
- `agents.placement`: models and work spread over GPUs (diffusion, VLM, streaming jobs);
- entry points: `python -m agents.train_mappo`, `python -m agents.evaluate`; their typed config is
  `agents.config`. Layout and data flow: docs/architecture.md.
"""
