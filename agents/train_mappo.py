"""MAPPO on `uavsim.UAVSwarmEnv`, rollouts and updates on the environment's device.

    python -m agents.train_mappo                                    # configs/default.yaml
    python -m agents.train_mappo --config configs/smoke.yaml train.amp=bf16 seed=3
    python -m agents.train_mappo --resume runs/mappo-0-20250101-120000
    python -m agents.train_mappo --print-config train.amp=off      # every key and its value, no training

The run around the learner (`agents.algo.learner`: its state and one training iteration): the machine's
defaults, resume, the loop with logging, evaluation images and checkpoints, and the CLI.
"""

from __future__ import annotations

from agents.run.startup import interrupt_held  # first: it holds a Ctrl-C during the seconds of imports

with interrupt_held():
    import argparse
    import contextlib
    import dataclasses
    import os
    import sys
    from pathlib import Path

    import torch
    from tqdm import tqdm

    from agents.algo.compiled import cpu_rollout_warning
    from agents.algo.learner import Learner, build_learner, read_episode_stats, read_metrics, train_iteration
    from agents.algo.replicas import Replicas
    from agents.config import Config, Teacher, to_dict, to_yaml
    from agents.run import checkpoint as ckpt
    from agents.run import machine_defaults, run_lock
    from agents.run.command_line import parse_train_args, resolve_config
    from agents.run.control import (
        TrainingInterrupted,
        TrainingStopped,
        crossed,
        iteration_problem,
        launcher_command,
        stopped_message,
    )
    from agents.run.distributed import setup as setup_replicas
    from agents.run.learner_state import learner_state, load_learner_state
    from agents.run.logger import Logger, PhaseTimer, flatten, iteration_scalars
    from agents.run.paths import new_run_dir
    from agents.run.process import pick_device, setup_process
    from agents.run.resume import check_run_dir, resume_run_dir
    from agents.run.stop_request import StopRequest
    from uavsim.machine import hardware
    from uavsim.machine.contention import contention_warning


# -- the loop ------------------------------------------------------------------------------------
def train(cfg: Config, resume: str | Path | None = None) -> Learner:
    """Train to `cfg.train.total_env_steps`, from scratch or from a checkpoint.

    Args:
        cfg: the config (`auto` values are resolved here, for this machine).
        resume: a checkpoint file or run directory to continue (None: a new run).

    Returns:
        The learner at the end of the run.

    Raises:
        ValueError: a setting that fails once used (no GPU, too little memory, an unusable run directory).
        CheckpointError: the checkpoint cannot be resumed.
        TrainingStopped: too many consecutive bad iterations.
        TrainingInterrupted: Ctrl-C; the message says where to continue from.
    """

    replicas = setup_replicas(cfg.run.device)  # torchrun: join the group; else a single process
    replicas.device = device = replicas.device if replicas.active else pick_device(cfg.run.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # streams, events and new tensors default to this GPU, not cuda:0
    try:
        cfg, reasons = resolve_for_machine(cfg, device, replicas)
        setup_process(cfg)
        if replicas.is_main:
            print(hardware.banner(device, **reasons, ranks=replicas.world_size), file=sys.stderr)
            notes = [
                contention_warning(torch.get_num_threads()) if device.type == "cpu" else None,
                cpu_rollout_warning(cfg.train.compile_rollout, device),
                machine_defaults.fp32_update_note(cfg, device),
                machine_defaults.short_budget_note(cfg, replicas.world_size),
            ]
            for warning in filter(None, notes):
                print(warning, file=sys.stderr)
        return _train(cfg, resume, replicas, device)
    finally:
        replicas.close()


def resolve_for_machine(cfg: Config, device: torch.device, replicas: Replicas) -> tuple[Config, dict[str, str]]:
    """`machine_defaults.resolve` and `check_memory` for `device`; under torchrun rank 0's choices hold
    for every rank (a timing probe could choose differently on two ranks, and the replicas must
    compute alike).

    Returns:
        `(resolved config, reasons)` as `machine_defaults.resolve`.

    Raises:
        ValueError: any rank's resolution or memory check failed (the first rank's error).
    """
    problem = None
    try:
        resolved, reasons = machine_defaults.resolve(cfg, device)
        machine_defaults.check_memory(resolved, device)
    except ValueError as err:
        resolved, reasons, problem = cfg, {}, err
    first = next((p for p in replicas.gather_objects(problem) if p is not None), None)
    if first is not None:
        raise first
    if replicas.active:
        amp, num_envs = replicas.broadcast_object((resolved.train.amp, resolved.env.num_envs))
        resolved = dataclasses.replace(
            resolved,
            train=dataclasses.replace(resolved.train, amp=amp),
            env=dataclasses.replace(resolved.env, num_envs=num_envs),
        )
    return resolved, reasons


def _train(cfg: Config, resume: str | Path | None, replicas: Replicas, device: torch.device) -> Learner:
    # Rank 0 reads the file system and tells the others (ranks on other hosts may not see it).
    payload, source, run_dir, problem, own_run, reserved = None, None, None, None, False, None
    if replicas.is_main:
        try:
            if resume is not None:
                source, payload = ckpt.load_latest(resume)  # to the CPU; load_state_dict copies to the device
                run_dir = resume_run_dir(source, payload["config"]["run"]["dir"], cfg)
                own_run = Path(source).resolve().parent == ckpt.checkpoint_dir(run_dir).resolve()  # not a branch
            else:
                run_dir = Path(cfg.run.dir) if cfg.run.dir else (reserved := new_run_dir(cfg.seed))
                check_run_dir(run_dir)
            busy = run_lock.trainer_in(run_dir)  # a trainer still writing there (run_lock)
            if busy:
                raise ValueError(busy)
        except (ValueError, ckpt.CheckpointError) as err:
            problem = err
    payload, source, run_dir, problem, own_run = replicas.broadcast_object((payload, source, run_dir, problem, own_run))
    if problem is not None:
        raise problem
    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, dir=str(run_dir)))
    if payload is None and cfg.env.maps is not None and not Path(cfg.env.maps).is_absolute():
        # recorded whole: `agents.evaluate RUN` finds the map set from any directory, not only from this one
        cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, maps=str(Path(cfg.env.maps).resolve())))
    try:
        learner = build_learner(cfg, device, replicas)
    except BaseException:
        if reserved is not None:  # the name this run made and never wrote into
            with contextlib.suppress(OSError):
                reserved.rmdir()
        raise
    if payload is not None:
        load_learner_state(learner, payload, str(source))
        finished = own_run and payload["config"]["train"]["total_env_steps"] == cfg.train.total_env_steps
        if learner.iteration >= learner.num_iterations and finished:  # killed after its last checkpoint, resumed
            if replicas.is_main:  # by a retrying scheduler, say: done, not an error
                print(
                    f"run {run_dir} finished at {learner.env_steps} env steps: nothing to do (raise "
                    f"train.total_env_steps, {cfg.train.total_env_steps}, to continue)",
                    file=sys.stderr,
                )
            return learner
        if learner.iteration >= learner.num_iterations:
            raise ValueError(
                f"nothing to do: checkpoint {source} already holds {learner.env_steps} env steps, "
                f"train.total_env_steps={cfg.train.total_env_steps}; raise it to continue"
            )
    lock = None
    if replicas.is_main:  # after the checkpoint loaded: a failed resume leaves the run as it was
        run_dir.mkdir(parents=True, exist_ok=True)
        lock, note = run_lock.claim(run_dir)  # deleted when this run ends, however it ends
        if note:
            print(note, file=sys.stderr)
        if not ckpt.list_checkpoints(run_dir):  # else config.yaml is the newest checkpoint's, rewritten with each
            (run_dir / "config.yaml").write_text(to_yaml(cfg), encoding="utf-8")
        print(f"run directory: {run_dir}", file=sys.stderr)
    # TensorBoard: a fresh run hides whatever a run killed before its first checkpoint logged here; a
    # resumed run hides what a killed run logged after its checkpoint, but not *at* its step (the
    # resumed run logs next at a later step, that would never be written again), so it logs its own
    # config one step later too, where an earlier killed resume's copy is hidden
    start = learner.env_steps + 1 if payload is not None else 0
    logger = Logger(run_dir, purge_step=start, enabled=replicas.is_main)
    logger.hyperparameters(flatten(to_dict(cfg)), start)
    last_good, bar = source, None
    stop = StopRequest(enabled=replicas.world_size == 1)  # Ctrl-C in the loop: a checkpoint, then stop
    finished = False
    try:  # Ctrl-C in imitation too (minutes of a run) says what is left to resume, if anything
        if payload is None and cfg.imitation.teacher != Teacher.none:  # a resumed actor was cloned before
            _warm_start(learner, logger)
            last_good = _save(learner, run_dir)  # imitation costs minutes: a run killed after it keeps them
        timer = PhaseTimer(device)
        iterations = learner.num_iterations
        bar = tqdm(
            total=iterations * learner.steps_per_iteration,
            initial=learner.env_steps,
            unit="step",
            unit_scale=True,
            dynamic_ncols=True,
            disable=not (cfg.run.progress and replicas.is_main),
            desc="mappo",
        )
        with stop:
            _loop(learner, logger, timer, bar, run_dir, last_good, iterations, stop)
        finished = True
    except (KeyboardInterrupt, OSError) as err:
        newest = []
        with contextlib.suppress(OSError):  # the folder may be what went away
            newest = ckpt.list_checkpoints(run_dir)
        stopped = TrainingInterrupted(
            learner.env_steps,
            run_dir,
            newest[-1] if newest else source,
            source,
            launcher_command(replicas.world_size),
            replicas.is_main,
        )
        if isinstance(err, OSError):  # the run directory became unwritable (disk full, permissions): what is left
            raise OSError(f"{err}\n{stopped}") from err
        stopped.exit_status = stop.exit_status
        raise stopped from None
    finally:
        if bar is not None:
            bar.close()
        try:
            logger.close()  # a TensorBoard writer whose disk filled raises that error again here
        except OSError:
            if finished:
                raise
            # else the run's own error (what is left to resume) says more than the same disk's, and goes on
        finally:
            run_lock.release(lock)
    return learner


def _warm_start(learner: Learner, logger: Logger) -> None:
    """The actor imitates `imitation.teacher` (`agents.algo.imitation`); its loss, accuracy and time at step 0."""
    from agents.algo.imitation import warm_start

    show = learner.cfg.run.progress and learner.replicas.is_main
    stats = warm_start(learner, progress=show)
    fits = " + ".join(map(str, stats.pop("fit_epochs")))  # the first fit's, then each DAgger round's
    logger.scalars({f"imitation/{k}": v for k, v in stats.items()}, 0)
    if learner.replicas.is_main:
        print(
            f"imitation of {learner.cfg.imitation.teacher.value}: accuracy {stats['accuracy']:.3f}, "
            f"loss {stats['loss']:.3f}, {stats['epochs']} cloning epochs ({fits}), {stats['seconds']:.0f} s",
            file=sys.stderr,
        )


def _loop(
    learner: Learner,
    logger: Logger,
    timer: PhaseTimer,
    bar: tqdm,
    run_dir: Path,
    last_good: Path | None,
    iterations: int,
    stop: StopRequest,
) -> None:
    """Iterations until `iterations`: log, evaluate and checkpoint as configured; after the iteration in
    which `stop` received a signal, a checkpoint (unless that iteration went wrong), then KeyboardInterrupt."""
    from agents.evaluate import evaluate_for_tensorboard  # evaluation images during training

    cfg, replicas = learner.cfg, learner.replicas
    shown: dict[str, str] = {}  # episode-end coverage of the latest iteration that ended episodes
    saved_at = None  # the env steps of the loop's latest checkpoint
    while learner.iteration < iterations:
        if stop.signal is not None:  # between iterations the learner is whole: keep what it did
            if saved_at != learner.env_steps and learner.bad_iterations == 0:
                _save(learner, run_dir)
            raise KeyboardInterrupt
        before = learner.env_steps
        metrics = train_iteration(learner, timer.mark)
        m, ep, t = read_metrics(metrics, replicas), read_episode_stats(learner), timer.seconds()
        logger.scalars(iteration_scalars(learner, m, ep, t), learner.env_steps)
        bar.update(learner.env_steps - before)
        if ep["episodes"] > 0:
            shown = {"coverage": f"{ep['coverage']:.3f}", "steps_to_target": f"{ep['steps_to_target']:.0f}"}
        bar.set_postfix(
            **shown,
            now=f"{ep['last_coverage']:.3f}",
            sps=f"{learner.steps_per_iteration / (t['env'] + t['learn']):.0f}",
        )
        problem = iteration_problem(m, cfg.train)
        if problem is not None:
            learner.bad_iterations += 1
            msg = f"iteration {learner.iteration}: {problem}"
            logger.text("warnings", msg, learner.env_steps)
            if replicas.is_main:
                tqdm.write(msg, file=sys.stderr)
            if learner.bad_iterations >= cfg.train.max_bad_iterations:
                raise TrainingStopped(stopped_message(learner.bad_iterations, last_good), replicas.is_main)
            if learner.iteration < iterations:
                continue  # never checkpoint an iteration that went wrong, except the last below:
            # skipped updates left the parameters as they were, and a finished run has a final checkpoint
        else:
            learner.bad_iterations = 0
        if replicas.is_main and crossed(cfg.run.eval_interval, before, learner.env_steps):
            for tag, value in evaluate_for_tensorboard(learner, logger).items():
                logger.scalars({tag: value}, learner.env_steps)
        last = learner.iteration == iterations
        if crossed(cfg.run.checkpoint_interval, before, learner.env_steps) or last:
            last_good, saved_at = _save(learner, run_dir) or last_good, learner.env_steps


def _save(learner: Learner, run_dir: Path) -> Path | None:
    """A checkpoint of the learner as it is now (a collective: every rank calls it); its path on the
    main rank, None on the others. config.yaml beside it is the config --resume will continue."""
    state = learner_state(learner)
    if not learner.replicas.is_main:
        return None
    cfg = learner.cfg
    return ckpt.save_checkpoint(run_dir, state, cfg.run.keep_checkpoints, beside={"config.yaml": to_yaml(cfg)})


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return parse_train_args(argv, __doc__)


def main(argv: list[str] | None = None) -> int:
    """The command line (`argv`, None: `sys.argv`); returns the exit status (2 bad settings, 1 a
    failed run, 130 Ctrl-C)."""
    args = parse_args(argv)
    # under torchrun every rank meets the same bad setting: one of them says so (an error that knows its
    # rank carries is_main). RANK read as is: read_dist_env refuses malformed variables, which the error may be about
    first_rank = os.environ.get("RANK", "0") == "0"
    try:
        with interrupt_held("reading the settings"):  # a --resume reads and checks its checkpoint here
            cfg = resolve_config(args)
    except (ValueError, TypeError) as err:
        if first_rank:
            print(f"error: {err}", file=sys.stderr)
        return 2
    if args.print_config:  # the values this machine would run with: `auto` keys resolved
        try:
            cfg, _ = machine_defaults.resolve(cfg, pick_device(cfg.run.device))
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(to_yaml(cfg), end="")
        return 0
    try:
        learner = train(cfg, resume=args.resume)
    except KeyboardInterrupt as err:  # Ctrl-C: say where to continue from, exit like an interrupted shell command
        if getattr(err, "is_main", True):
            print(f"\n{str(err) or 'interrupted'}", file=sys.stderr)
        return getattr(err, "exit_status", 130)  # 143 after a SIGTERM
    except (TrainingStopped, ckpt.CheckpointError) as err:
        if getattr(err, "is_main", first_rank):
            print(f"error: {err}", file=sys.stderr)
        return 1
    except ValueError as err:  # settings that only fail once used (e.g. run.device=cuda without a GPU)
        if first_rank:
            print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the run directory became unwritable (disk full, removed, permissions)
        print(f"error: {err}", file=sys.stderr)  # every rank: it may be one rank's disk
        return 1
    if learner.replicas.is_main:
        print(f"done: {learner.env_steps} env steps, run directory {learner.cfg.run.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
