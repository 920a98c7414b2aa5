"""In-training evaluation curves (32 maps of the run's seed, every 500k steps) and the policy's
entropy at the end, read from the runs' TensorBoard files: python curves.py OUT label=run ...
(runs under /tmp/exp3/). Runs of one seed share the planners' lines; runs of several seeds get
their own coordinated line, dashed in the run's colour."""
import glob, json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
out = sys.argv[1]
runs = dict(a.rsplit("=", 1) for a in sys.argv[2:])  # label=run
data = {}
for label, run in runs.items():
    ea = EventAccumulator(glob.glob(f"/tmp/exp3/{run}/events*")[0], size_guidance={"scalars": 0}); ea.Reload()
    data[label] = {tag.split("/")[0]: [(e.step, e.value) for e in ea.Scalars(tag)]
                   for tag in ("eval_sampled/mean_steps_to_target", "eval/mean_steps_to_target",
                               "eval_coordinated/mean_steps_to_target", "eval_greedy/mean_steps_to_target")}
    data[label]["entropy_end"] = ea.Scalars("losses/entropy")[-1].value
json.dump(data, open(out + ".json", "w"), indent=1)
same_maps = len({tuple(data[label]["eval_coordinated"]) for label in runs}) == 1
fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
for ax, key, title in zip(axes, ("eval", "eval_sampled"), ("most likely action", "sampled actions")):
    for label in runs:
        xs, ys = zip(*data[label][key])
        line, = ax.plot([x / 1e6 for x in xs], ys, marker="o", ms=3, label=label)
        if not same_maps:
            xs, ys = zip(*data[label]["eval_coordinated"])
            ax.plot([x / 1e6 for x in xs], ys, "--", color=line.get_color(), label=f"coordinated planner ({label})")
    if same_maps:
        first = next(iter(runs))
        for base, style in (("eval_coordinated", "k--"), ("eval_greedy", "k:")):
            xs, ys = zip(*data[first][base])
            ax.plot([x / 1e6 for x in xs], ys, style, label=base.split("_")[1] + " planner")
    ax.set_title(f"{title}: in-training evaluation, 32 maps"); ax.set_xlabel("PPO env steps (M)"); ax.grid(alpha=0.3)
axes[0].set_ylabel("mean steps to 95 % coverage")
axes[1].legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
fig.tight_layout(); fig.savefig(out + ".png", dpi=110)
