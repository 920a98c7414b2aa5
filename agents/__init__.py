"""MAPPO for the uavsim swarm, and the GPU placement library the team's other pipelines share.

- `agents.algo`: the algorithm (networks, rollout, GAE, PPO, imitation, the learner's iteration);
- `agents.run`: the run around it (device and process setup, machine defaults, checkpoints and
  resume, logs, torchrun);
- `agents.placement`: models and work spread over GPUs (diffusion, VLM, streaming jobs);
- entry points: `python -m agents.train_mappo`, `python -m agents.evaluate`; their typed config is
  `agents.config`. Layout and data flow: docs/architecture.md.
"""

import os as _os
import sys as _sys

# torch's OpenMP threads spin at every barrier by default, so a process that shares its cores with one other busy
# process waits out the scheduler at each small op. On a 2-core AMD EPYC (Zen 3) beside one busy process, the default
# preset's PPO iteration ran 1.7-1.9x faster with passive waits than spinning, and alone within the runs' noise
# either way (docs/performance.md, "Design choices, measured"). OpenMP reads the variable once, when torch
# loads: set it only before that, and never over the user's own.
if "torch" not in _sys.modules:
    _os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
