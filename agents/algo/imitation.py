"""A warm start for PPO: the actor first imitates a scripted planner (`imitation.teacher`).

The planner (`uavsim.policies`' greedy or coordinated one) plays `imitation.env_steps` steps of
demonstration episodes; the actor is then fitted to its moves by cross-entropy (behaviour cloning),
on exactly the inputs it sees in training (the AMP dtype's observations and headings). Then, for
`imitation.dagger_rounds` rounds, the cloned actor plays and the planner labels the states it
reaches (DAgger, Ross et al. 2011), and the actor is fitted again to all labels so far: a clone
has never seen the states its own mistakes lead to, and without these rounds it stalls there. The
demonstration episodes are environments of the run's seed that PPO never plays (global indices
from `DEMO_FIRST_ENV`, one range per rank) and never the evaluation's seed.

Only the actor is cloned. PPO then starts with a critic that knows nothing of the cloned policy,
and its first advantages are noise: `train.actor_warmup` ramps the actor's learning rate up from
0 over that fraction of the iterations while the critic learns (`agents.algo.learner.learning_rates`),
and `train.clone_kl_coef` keeps PPO near the clone (a frozen copy of it, `Learner.clone`). What
each of these is worth, measured: docs/performance.md, "Design choices, measured".

This is a one-off phase before the first iteration: it reads the loss back once per epoch, for
the progress bar and a non-finite check; nothing of it runs in the training loop.
"""

from __future__ import annotations

import itertools
import math
import sys
import time

import torch
from tqdm import tqdm

from agents.algo.action_noise import ActionNoise
from agents.algo.heading import HEADING_DIM
from agents.algo.learner import Learner
from agents.algo.networks import Actor
from agents.algo.ppo import rows_of_steps
from agents.algo.rollout import agent_ids
from agents.config import Teacher
from uavsim.env import UAVSwarmEnv
from uavsim.scripted import make_scripted

DEMO_FIRST_ENV = 2**30  # global env index of rank 0's first demonstration environment (MAX_KEY is 2**31)


class Demonstrations:
    """The planner's moves and what the actor saw, in buffers allocated once (every round writes into
    them: no copy that doubles the peak memory). Rows of `local`, `heading`, `actions` index
    (frame, UAV); rows of `shared_map` index frames.

    Args:
        capacity: frames (one environment's step each) the buffers hold.
        num_agents: `N`, UAVs per frame.
        local_dim: `L`, the local observation's width.
        map_dim: the shared map's width (0: a local actor; no `heading` or `shared_map`).
        obs_dtype: the observations' dtype (the AMP dtype under AMP).
        device: where the buffers live.
    """

    def __init__(
        self, capacity: int, num_agents: int, local_dim: int, map_dim: int, obs_dtype: torch.dtype, device: torch.device
    ):
        n = self.num_agents = num_agents
        self.local = torch.empty(capacity * n, local_dim, dtype=obs_dtype, device=device)
        self.heading = torch.empty(capacity * n, HEADING_DIM, device=device) if map_dim else None
        self.shared_map = torch.empty(capacity, map_dim, dtype=obs_dtype, device=device) if map_dim else None
        self.actions = torch.empty(capacity * n, dtype=torch.uint8, device=device)
        self.num_frames = 0  # frames written so far

    def add(
        self,
        local: torch.Tensor,
        actions: torch.Tensor,
        heading: torch.Tensor | None = None,
        shared_map: torch.Tensor | None = None,
    ) -> None:
        """Append one step of `B` environments.

        Args:
            local: `[B, N, L]` local observations.
            actions: `[B, N]` the planner's moves.
            heading: `[B, N, 3]` float32 headings (shared-map actors only).
            shared_map: `[B, map_dim]` the state's pooled map (shared-map actors only).

        Raises:
            ValueError: the step does not fit in the buffers.
        """
        f, b, n = self.num_frames, actions.shape[0], self.num_agents
        if f + b > self.actions.shape[0] // n:
            raise ValueError(f"these demonstrations hold {self.actions.shape[0] // n} frames; {f + b} do not fit")
        self.local[f * n : (f + b) * n] = local.reshape(b * n, -1)
        self.actions[f * n : (f + b) * n] = actions.reshape(-1)
        if self.heading is not None:
            self.heading[f * n : (f + b) * n] = heading.reshape(b * n, -1)
            self.shared_map[f : f + b] = shared_map
        self.num_frames = f + b


def demo_env_shape(env_steps: int, steps_per_env: int, num_envs: int) -> tuple[int, int]:
    """`(environments, steps each)` for `env_steps` demonstration steps: up to `num_envs`
    environments (the training env's), but few enough that each plays at least `steps_per_env`
    steps (`imitation.steps_per_env`; the task's max_steps: whole episodes, not only their starts)."""
    envs = max(1, min(num_envs, env_steps // steps_per_env))
    return envs, math.ceil(env_steps / envs)


def make_teacher(name: Teacher, env: UAVSwarmEnv, seed: int):
    """The planner that `imitation.teacher` names, playing `env`, with its tie-breaks drawn from `seed`.

    Raises:
        ValueError: `name` is neither greedy nor coordinated.
    """
    if name not in (Teacher.greedy, Teacher.coordinated):
        raise ValueError(f"imitation.teacher must be greedy or coordinated to imitate, got {name!r}")
    return make_scripted(Teacher(name).value, env, planner_seed=seed)


@torch.no_grad()
def collect_demonstrations(
    actor: Actor,
    env: UAVSwarmEnv,
    teacher,
    steps: int,
    autocast,
    into: Demonstrations,
    progress: bool = False,
    noise: ActionNoise | None = None,
) -> None:
    """Play `steps` steps of fresh episodes of `env` and write the teacher's moves, with the actor's
    inputs, `into` the demonstrations.

    Args:
        actor: the actor whose inputs are recorded (and who moves, with `noise`).
        env: the demonstration environments.
        teacher: `teacher(env) -> actions [B, N]`, the planner.
        steps: steps to play.
        autocast: the networks' autocast factory.
        into: the demonstrations to append to.
        progress: show a progress bar.
        noise: with it the actor moves, sampling with it, and the teacher only labels the states the
            actor reaches (DAgger); without it the teacher moves.
    """
    obs = env.reset()
    agent = agent_ids(env.num_envs, env.num_uavs, env.device)
    for _ in tqdm(
        range(steps),
        desc="imitation: " + ("the actor's states" if noise else "demonstrations"),
        unit="step",
        disable=not progress,
        file=sys.stderr,
        leave=False,
    ):
        act = teacher(env)
        if actor.map_dim:
            with autocast():
                heading = actor.headings(obs["state"])
            into.add(obs["local"], act, heading, obs["state"][:, : actor.map_dim])
        else:
            into.add(obs["local"], act)
        obs, *_ = env.step(act if noise is None else actor.act(obs, agent, noise, autocast)[0])


def clone(
    actor: Actor,
    demos: Demonstrations | list[Demonstrations],
    epochs: int,
    lr: float,
    minibatch_steps: int,
    generator: torch.Generator,
    autocast,
    sync_gradients=None,
    progress: bool = False,
    min_gain: float = 0.0,
) -> dict[str, float]:
    """Fit `actor` to `demos` by cross-entropy, with Adam, for `epochs` passes or until they stop paying.

    Args:
        actor: the actor to fit, in place.
        demos: the demonstrations; a list (a mixed-size run's, one per team and map size): each
            epoch takes their minibatches in turn, one of each.
        epochs: passes over `demos`.
        lr: Adam's learning rate.
        minibatch_steps: frames per minibatch (all their UAVs).
        generator: draws the minibatches' order.
        autocast: the networks' autocast factory.
        sync_gradients: the ranks' gradient average (torchrun), so that every replica takes the same steps.
        progress: show a progress bar.
        min_gain: stop after an epoch whose accuracy beats the best epoch before it by less than this
            (`imitation.min_accuracy_gain`; 0: every epoch). The epoch's accuracy is read anyway.

    Returns:
        `{"loss", "accuracy", "epochs"}` of the last epoch (accuracy: the planner's move is the actor's
        most likely; epochs: passes made).

    Raises:
        ValueError: the loss is not finite.
    """
    sets = demos if isinstance(demos, list) else [demos]
    device = sets[0].actions.device
    # foreach: CUDA's default, a few multi-tensor ops for every parameter at once; on a CPU the same numbers bit
    # for bit as its default loop of several ops a parameter, and `benchmarks.gpu_counts` then counts what CUDA launches
    optimizer = torch.optim.Adam(actor.parameters(), lr=lr, foreach=True)
    agents = [agent_ids(min(minibatch_steps, d.num_frames), d.num_agents, device) for d in sets]
    out = {"loss": math.nan, "accuracy": math.nan, "epochs": 0}
    best = -math.inf
    bar = tqdm(
        range(epochs), desc="imitation: cloning", unit="epoch", disable=not progress, file=sys.stderr, leave=False
    )
    for _ in bar:
        plans = []
        for d, agent in zip(sets, agents):  # whole minibatches: equal sizes on every rank
            mb = min(minibatch_steps, d.num_frames)
            order = torch.randperm(d.num_frames, generator=generator, device=device)
            plans.append([(d, order[start : start + mb], agent) for start in range(0, d.num_frames // mb * mb, mb)])
        sums, count = torch.zeros(2, device=device), 0
        for d, picked, agent in (item for turn in itertools.zip_longest(*plans) for item in turn if item is not None):
            with autocast():
                shared = d.shared_map[picked] if d.shared_map is not None else None
                logits = actor(
                    rows_of_steps(d.local, picked, d.num_agents),
                    agent,
                    shared,
                    state_repeat=d.num_agents,
                    heading=rows_of_steps(d.heading, picked, d.num_agents) if d.heading is not None else None,
                ).float()
            target = rows_of_steps(d.actions, picked, d.num_agents).long()
            loss = torch.nn.functional.cross_entropy(logits, target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if sync_gradients is not None:
                sync_gradients(actor.parameters())
            optimizer.step()
            sums += torch.stack([loss.detach(), (logits.argmax(1) == target).float().mean()])
            count += 1
        loss, accuracy = (sums / count).tolist()  # once per epoch, outside the training loop
        if not math.isfinite(loss):
            raise ValueError(f"imitation: the cloning loss is {loss} (try a lower imitation.lr)")
        out = {"loss": loss, "accuracy": accuracy, "epochs": out["epochs"] + 1}
        bar.set_postfix(loss=f"{loss:.3f}", accuracy=f"{accuracy:.3f}")
        if min_gain > 0 and accuracy - best < min_gain:
            break  # this pass bought less than it cost: the labels are learned as far as they go
        best = max(best, accuracy)
    bar.close()
    return out


def warm_start(learner: Learner, progress: bool = False) -> dict[str, float]:
    """Clone `learner.cfg.imitation.teacher` into `learner.actor` (and its `clone`) before the first iteration.
    A mixed-size run's (size-agnostic) actor imitates the planner on every group's task.

    Args:
        learner: the freshly built learner.
        progress: show progress bars.

    Returns:
        `{"loss", "accuracy", "epochs", "fit_epochs", "seconds"}`: the cloning's last loss and accuracy, its
        passes over every fit, the passes of each fit (a tuple: the first, then each DAgger round's), and the
        phase's duration.

    Raises:
        ValueError: a recurrent actor, or a non-finite cloning loss.
    """
    cfg, replicas = learner.cfg, learner.replicas
    ic = cfg.imitation
    if learner.actor.recurrent:
        raise ValueError("imitation.teacher needs a feed-forward actor (model.recurrent=false)")
    began = time.perf_counter()
    # A mixed-size run's groups share the demonstrations; each group's episodes are as many of the
    # run's environments as its share needs (all of them on one task, as for a single size).
    tasks = [g.env for g in learner.groups]
    all_envs = sum(t.num_envs for t in tasks)
    players, first = [], DEMO_FIRST_ENV
    for task in tasks:
        per_env = ic.steps_per_env or task.config.max_steps
        envs, steps = demo_env_shape(math.ceil(ic.env_steps / len(tasks)), per_env, all_envs)
        env = UAVSwarmEnv(
            task.config,
            num_envs=envs,
            device=task.device,
            seed=cfg.seed,
            first_env_index=first + replicas.rank * envs,
            obs_dtype=task.obs_dtype,
            check_action_range=False,  # the planner's and the actor's moves are in range: no host read a step
        )
        first += replicas.world_size * envs  # the next group's range, past every rank's
        dagger_steps = math.ceil(ic.dagger_env_steps / len(tasks) / envs)
        demos = Demonstrations(
            (steps + ic.dagger_rounds * dagger_steps) * envs,
            env.num_uavs,
            env.local_obs_dim,
            learner.actor.map_dim,
            env.obs_dtype,
            env.device,
        )
        teacher = make_teacher(ic.teacher, env, cfg.seed)
        collect_demonstrations(learner.actor, env, teacher, steps, learner.autocast, demos, progress)
        noise = ActionNoise(cfg.seed + 4, env.env_index, env.num_uavs)
        players.append((env, teacher, demos, dagger_steps, noise))
    all_demos = [p[2] for p in players]
    generator = torch.Generator(learner.env.device).manual_seed(cfg.seed + 3)  # the same on every rank
    sync = replicas.average_gradients if replicas.active else None
    fit = lambda epochs: clone(  # noqa: E731
        learner.actor,
        all_demos,
        epochs,
        ic.lr,
        ic.minibatch_steps,
        generator,
        learner.autocast,
        sync,
        progress,
        ic.min_accuracy_gain,
    )
    stats = fit(ic.epochs)
    fit_epochs = [stats["epochs"]]
    for _ in range(ic.dagger_rounds):  # each on the next episodes of the demonstration environments
        for env, teacher, demos, dagger_steps, noise in players:
            collect_demonstrations(learner.actor, env, teacher, dagger_steps, learner.autocast, demos, progress, noise)
        stats = fit(ic.dagger_epochs)
        fit_epochs.append(stats["epochs"])
    stats["epochs"], stats["fit_epochs"] = sum(fit_epochs), tuple(fit_epochs)  # over every fit, and each
    if learner.clone is not None:  # PPO's anchor (train.clone_kl_coef)
        learner.clone.load_state_dict(learner.actor.state_dict())
    return {**stats, "seconds": time.perf_counter() - began}
