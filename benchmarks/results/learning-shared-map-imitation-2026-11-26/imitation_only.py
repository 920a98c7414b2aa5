"""Evaluate the actor right after the imitation warm start (no PPO) on the protocol maps. From the
repository root: python imitation_only.py OUT.json seed=1 imitation.teacher=coordinated imitation.dagger_rounds=2"""
import sys, json, torch
torch.set_num_threads(1)
from agents.config import load_config
from agents import machine_defaults
from agents.learner import build_learner
from agents.imitation import warm_start
from agents.evaluate import evaluate_all
cpu = torch.device("cpu")
cfg = load_config("configs/shared_map.yaml", ["env.obs_radius=6", "train.update_epochs=3", "run.torch_threads=1"] + sys.argv[2:])
cfg, _ = machine_defaults.resolve(cfg, cpu)
learner = build_learner(cfg, cpu)
stats = warm_start(learner)
print(stats, flush=True)
res, _ = evaluate_all(learner.actor, cfg.env_config(), 256, 12345, cpu, record=False)
json.dump(res, open(sys.argv[1], "w"))
for p in ("policy", "policy_sampled"):
    g = res["paired_vs_greedy"][p]; c = res["paired_vs_coordinated"][p]
    print(p, res[p]["mean_steps_to_target"], "vs greedy %.1f ± %.1f" % (g["mean_steps_diff"], g["stderr"]),
          "vs coord %.1f ± %.1f (faster %d slower %d)" % (c["mean_steps_diff"], c["stderr"], c["faster"], c["slower"]))
