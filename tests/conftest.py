"""The suite runs on two pytest-xdist workers (`make test`), each with torch's default threads: on a
2-core machine their OpenMP threads share the cores, where spinning at every barrier waits out the
scheduler. Passive waits there: the default preset's PPO ran 1.9x faster beside one busy process
(docs/performance.md, "Design choices, measured"). OpenMP reads the variable once, when torch loads,
which has not happened yet when pytest imports this file; a policy the user set wins."""

import os
import sys

if "torch" not in sys.modules:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Under an emulated CPU class (`ATEN_CPU_CAPABILITY`, `ONEDNN_MAX_CPU_ISA`) every test that compiles
# uses that class's own inductor cache, also those that call torch.compile themselves: another
# class's cached kernels crashed the suite (`uavsim.machine.inductor_cache`).
from uavsim.machine.inductor_cache import use_class_cache  # noqa: E402 -- after the wait policy, set before torch loads

use_class_cache()
