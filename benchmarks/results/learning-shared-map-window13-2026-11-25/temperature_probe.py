"""Probe (not part of the package): the sampled policy with its logits divided by tau, on maps of a
validation seed (not the protocol's 12345), paired against the coordinated planner.

    python benchmarks/results/learning-shared-map-window13-2026-11-25/temperature_probe.py RUN SEED EPISODES TAU...

Run 2026-11-25 on ent003-s1's final checkpoint, seed 777, 256 maps (coordinated: 57.4 steps), Zen 4 EPYC:
tau 1.0 +2.9 +- 1.0, tau 0.6 +2.0 +- 0.7, tau 0.4 +3.7 +- 1.1 steps against the planner.
"""
import sys, torch, numpy as np
from agents import checkpoint as ckpt
from agents.resume import saved_config
from agents.networks import make_actor
from agents.evaluate import run_episodes, actor_policy, scripted_policy
from uavsim.env import UAVSwarmEnv

run, seed, episodes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
taus = [float(t) for t in sys.argv[4:]]
torch.set_num_threads(1)
path, payload = ckpt.load_latest(run)
cfg = saved_config(path, payload); env_cfg = cfg.env_config()
actor = make_actor(env_cfg, cfg.model); actor.load_state_dict(payload["actor"]); actor.eval()

class Tempered(torch.nn.Module):
    def __init__(self, a, tau):
        super().__init__(); self.a, self.tau = a, tau
        self.map_dim, self.recurrent = a.map_dim, a.recurrent
    def headings(self, s): return self.a.headings(s)
    def forward(self, *args, **kw): return self.a(*args, **kw) / self.tau

env = UAVSwarmEnv(env_cfg, num_envs=episodes, seed=seed)
sc = scripted_policy("coordinated", env, seed)
coord = run_episodes(env, lambda obs: sc(env))[0]["steps_to_target"]
print("coordinated", coord.mean())
for tau in taus:
    env = UAVSwarmEnv(env_cfg, num_envs=episodes, seed=seed)
    with torch.no_grad():
        r = run_episodes(env, actor_policy(Tempered(actor, tau), env, False, seed))[0]["steps_to_target"]
    d = r - coord
    print(f"tau {tau}: steps {r.mean():.1f}  vs coord {d.mean():+.1f} +- {d.std(ddof=1)/np.sqrt(len(d)):.1f}", flush=True)
