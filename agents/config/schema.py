"""The training configuration's schema: its sections as typed dataclasses, with their defaults.

`agents.config.load_config` fills a `Config` from YAML presets and overrides;
`agents.config.checks.check_config` checks the ranges the types cannot express.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from agents.config.env_section import AUTO, EnvSection, env_configs, largest, split_envs
from uavsim.config import EnvConfig


class Amp(str, enum.Enum):
    """Autocast mode: `off` (float32), `bf16` (CPU and GPU), `fp16` (with a GradScaler), or `auto`:
    chosen for the device at start (`agents.run.machine_defaults`)."""

    auto = "auto"
    off = "off"
    bf16 = "bf16"
    fp16 = "fp16"


class CriticKind(str, enum.Enum):
    """`mappo`: critic on the global state + the agent's local observation + its id (agent-specific
    global state). `ippo`: critic on the local observation + id only."""

    mappo = "mappo"
    ippo = "ippo"


class Teacher(str, enum.Enum):
    """The scripted planner the actor imitates before PPO (`agents.algo.imitation`); `none`: no warm start."""

    none = "none"
    greedy = "greedy"
    coordinated = "coordinated"


class Recipe(str, enum.Enum):
    """Which batch shape a run takes (`agents.config.recipe`): `preset`, the preset as written;
    `gpu`, configs/recipe_gpu.yaml laid over it; `auto`, gpu for the command line's default preset
    on CUDA, else preset."""

    auto = "auto"
    preset = "preset"
    gpu = "gpu"


class Activation(str, enum.Enum):
    tanh = "tanh"
    relu = "relu"


DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")  # what `run.device` (and `agents.evaluate --device`) accept


@dataclass
class ModelConfig:
    hidden_size: int = 128
    num_layers: int = 2  # hidden layers of each MLP
    activation: Activation = Activation.tanh
    critic: CriticKind = CriticKind.mappo
    # the critic reads the local window's channels (3 w^2 of the local observation's values); false: the rest
    # of it only (position, time, memory, heading, window paths), a first-layer GEMM on a fifth of the width
    critic_window: bool = True
    agent_id: bool = True  # one-hot agent id in the actor's and the critic's input
    # K > 0 (with agent_id=false): a one-hot of the index mod K, K wide at any team size; 0: none
    agent_roles: int = 0
    # inputs that do not depend on the team or the map size (needs agent_id=false): the mappo
    # critic sees the UAVs as a density map instead of a list of positions; allows mixed sizes
    size_agnostic: bool = False
    # the actor also sees the shared coverage map (pooled map + heading); on in shared_map.yaml
    actor_shared_map: bool = False
    recurrent: bool = False  # a GRU between the actor's encoder and its head (rMAPPO)
    recurrent_size: int = 0  # model.recurrent: the GRU's units; 0 for hidden_size

    def id_width(self, num_agents: int) -> int:
        """Columns of the id one-hot in the networks' first layers for a team of `num_agents`."""
        return num_agents if self.agent_id else self.agent_roles

    @property
    def gru_units(self) -> int:
        """Units of the recurrent actor's GRU (the size of a UAV's hidden state)."""
        return self.recurrent_size or self.hidden_size


@dataclass
class TrainConfig:
    total_env_steps: int = 2_000_000
    num_steps: int = 64  # rollout length T per iteration; a batch is num_steps x num_envs x num_uavs
    update_epochs: int = 4
    num_minibatches: int = 4  # each takes whole environment steps (all UAVs of a step together)
    actor_lr: float = 5e-4
    critic_lr: float = 5e-4
    anneal_lr: bool = True
    adam_eps: float = 1e-5
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    clip_vloss: bool = True
    vf_clip_coef: float = 0.2  # on the normalized value scale when value_norm is on
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5  # clipped separately for the actor and the critic
    norm_adv: bool = True
    # a mixed-size run's advantages normalized per size group (true) or over all groups (false):
    # their scales differ by up to 5x between map sizes (configs/size_agnostic.yaml)
    norm_adv_per_group: bool = False
    value_norm: bool = True
    value_norm_beta: float = 0.995  # per-iteration decay of the running return statistics
    amp: Amp = Amp.auto  # auto: bf16 where the device computes it natively, fp16 on older GPUs, else off
    compile: bool = False  # torch.compile the minibatch loss (forward + backward); CPU: needs a C++ compiler
    # the rollout step as one captured graph (CUDA graphs on a GPU); on a CPU slow to compile and run (training.md)
    compile_rollout: bool = False
    # fraction of the iterations over which the actor's lr ramps up from 0 (the critic's does not)
    actor_warmup: float = 0.0
    # weight of KL(clone || actor) on the rollout's states in PPO's loss (needs imitation.teacher)
    clone_kl_coef: float = 0.0
    chunk_length: int = 16  # model.recurrent: steps of back-propagation through time per sequence (divides num_steps)
    max_bad_iterations: int = 3  # consecutive bad iterations -> stop (agents.run.control.iteration_problem)


@dataclass
class ImitationConfig:
    """A warm start: the actor imitates a scripted planner before PPO (`agents.algo.imitation`)."""

    teacher: Teacher = Teacher.none  # none | greedy | coordinated
    env_steps: int = 81_920  # demonstration steps (environments x steps) per rank
    # steps each demonstration environment plays; 0: the task's max_steps (whole episodes, fewer
    # environments); shorter: more environments per planner call (a GPU's width; episodes reach
    # 95 % coverage in ~60 steps)
    steps_per_env: int = 0
    epochs: int = 20  # passes of behaviour cloning over the demonstrations
    # stop a fit early once an epoch's accuracy beats the best before it by less than this; 0: every epoch
    min_accuracy_gain: float = 0.0
    lr: float = 1e-3
    minibatch_steps: int = 512  # environment steps (all their UAVs) per cloning minibatch
    dagger_rounds: int = 0  # rounds in which the cloned actor plays and the planner labels its states
    dagger_env_steps: int = 40_960  # the actor's steps per round (environments x steps) per rank
    dagger_epochs: int = 10  # passes over all labels after each round


@dataclass
class RunConfig:
    dir: str | None = None  # None -> runs/mappo-<seed>-<time>
    device: str = "auto"  # auto (cuda if available, else cpu) | cpu | cuda | cuda:N
    # preset | gpu (configs/recipe_gpu.yaml over the preset) | auto: gpu for the default preset on CUDA
    recipe: Recipe = Recipe.auto
    torch_threads: int | str = AUTO  # auto: the cores this process may use; 0 leaves torch's default
    retain_host_memory: bool = True  # glibc keeps freed memory: no page faults on each step's big tensors
    deterministic: bool = False  # torch.use_deterministic_algorithms; exact resume on CPU
    checkpoint_interval: int = 500_000  # env steps between checkpoints; 0: only the final one
    keep_checkpoints: int = 3
    eval_interval: int = 1_000_000  # env steps between evaluation images in TensorBoard; 0: off
    eval_envs: int = 32  # environments of the in-training evaluation
    progress: bool = True  # tqdm progress bar
    # KEY=VALUE overrides of the env that agents.evaluate and agents.export apply to this run's policy
    # before their own --env: the task it plays once trained (e.g. path_radius=12; docs/training.md)
    evaluate_env: list[str] = field(default_factory=list)


@dataclass
class Config:
    seed: int = 0
    env: EnvSection = field(default_factory=EnvSection)  # type: ignore[valid-type]
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    imitation: ImitationConfig = field(default_factory=ImitationConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def env_config(self) -> EnvConfig:
        """The task; a mixed-size run's largest group (`agents.config.env_section.largest`)."""
        return largest(self.env_configs())

    def env_configs(self) -> list[EnvConfig]:
        """Each group's task (`agents.config.env_section`): one for a single-size run."""
        return env_configs(self.env)

    def group_num_envs(self) -> list[int]:
        """Environments of each group (`agents.config.env_section.split_envs`)."""
        return split_envs(self.num_envs, len(self.env_configs()))

    @property
    def resolved(self) -> bool:
        """Whether every `auto` key holds its value for this machine (`agents.run.machine_defaults`)."""
        return AUTO not in (self.env.num_envs, self.run.torch_threads) and self.train.amp != Amp.auto

    # Derived values: computed, never configured (the batch geometry needs a resolved env.num_envs).
    @property
    def num_envs(self) -> int:
        """`env.num_envs`, once resolved (`agents.run.machine_defaults.resolve`)."""
        if not isinstance(self.env.num_envs, int):
            raise ValueError(
                f"env.num_envs is {self.env.num_envs!r}: resolve the config for a device first "
                "(agents.run.machine_defaults.resolve) or set env.num_envs"
            )
        return self.env.num_envs

    @property
    def batch_size(self) -> int:
        """Samples per iteration: num_steps x num_envs x num_uavs, summed over groups (one per agent-step)."""
        groups = zip(self.group_num_envs(), self.env_configs())
        return self.train.num_steps * sum(b * c.num_uavs for b, c in groups)

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.train.num_minibatches

    @property
    def env_steps_per_iteration(self) -> int:
        return self.train.num_steps * self.num_envs

    def num_iterations(self, world_size: int = 1) -> int:
        """Iterations of the run when `world_size` torchrun ranks each play `env.num_envs`."""
        return max(1, self.train.total_env_steps // (self.env_steps_per_iteration * world_size))
