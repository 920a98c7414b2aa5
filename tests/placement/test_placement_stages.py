"""StagePipeline: order, overlap, error path, early stop, device moves."""

from __future__ import annotations

import pickle
import threading
import time

import numpy as np
import pytest
import torch

from agents.placement import Stage, StageError, StagePipeline


def test_outputs_in_input_order_through_three_stages():
    pipe = StagePipeline([lambda x: x + 1, Stage(lambda x: x * 10, name="times10"), lambda x: -x])
    assert pipe.run(range(50)) == [-(x + 1) * 10 for x in range(50)]
    assert pipe.run([]) == []


def test_stage_k_works_on_item_i_plus_1_while_stage_k_plus_1_works_on_item_i():
    # stage 1 may finish item i only once stage 0 has started item i+1: run item by item, the
    # pipeline would wait for that forever (here: fail after 10 s), not just run slower
    n = 6
    first_started = [threading.Event() for _ in range(n)]

    def first(i):
        first_started[i].set()
        return i

    def second(i):
        if i + 1 < n and not first_started[i + 1].wait(timeout=10):
            raise AssertionError(f"stage 0 did not start item {i + 1} while stage 1 held item {i}")
        return i

    assert StagePipeline([first, second], queue_size=1).run(range(n)) == list(range(n))


def test_an_error_names_stage_and_item_and_nothing_hangs():
    def generator(x):
        if x == 7:
            raise ValueError("NaN latents")
        return x

    pipe = StagePipeline(
        [Stage(lambda x: x, name="policy"), Stage(generator, name="generator"), Stage(lambda x: x, name="reward")]
    )
    with pytest.raises(StageError, match=r"stage 'generator' failed on item 7: ValueError: NaN latents") as info:
        pipe.run(range(1000))
    assert info.value.stage == "generator" and info.value.index == 7
    assert isinstance(info.value.__cause__, ValueError)
    again = pickle.loads(pickle.dumps(info.value))  # it crosses a process boundary (a job in a process pool)
    assert (type(again), again.stage, again.index, str(again)) == (StageError, "generator", 7, str(info.value))
    time.sleep(0.3)
    assert not [t for t in threading.enumerate() if t.name.startswith("pipeline-")]  # all threads gone


def test_a_failing_input_iterator_is_reported_as_stage_input():
    def items():
        yield 0
        yield 1
        raise OSError("dataset shard missing")

    with pytest.raises(StageError, match="stage 'input' failed on item 2: OSError"):
        StagePipeline([lambda x: x]).run(items())


def test_stopping_early_stops_the_threads():
    consumed = []

    def endless():
        i = 0
        while True:
            consumed.append(i)
            yield i
            i += 1

    gen = StagePipeline([lambda x: x * 2], queue_size=2).imap(endless())
    assert [next(gen) for _ in range(5)] == [0, 2, 4, 6, 8]
    gen.close()
    time.sleep(0.3)
    assert len(consumed) < 15  # bounded queues: the input was not read far ahead
    assert not [t for t in threading.enumerate() if t.name.startswith("pipeline-")]


def test_inputs_are_moved_to_each_stage_device():
    seen = []

    def record(batch):
        seen.append(batch["x"].device)
        return batch

    pipe = StagePipeline([Stage(record, device="cpu"), Stage(record, device="cpu", move_inputs=False)])
    out = pipe.run([{"x": torch.ones(2)}])
    assert seen == [torch.device("cpu")] * 2 and out[0]["x"].tolist() == [1.0, 1.0]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_each_stage_runs_on_its_gpu():
    last = f"cuda:{torch.cuda.device_count() - 1}"

    def on_device(batch):
        return {"x": batch["x"] * 2, "current": torch.cuda.current_device()}

    out = StagePipeline([Stage(on_device, "cuda:0"), Stage(lambda b: b["x"].device, last)]).run([{"x": torch.ones(3)}])
    assert out == [torch.device(last)]


def test_bad_arguments():
    with pytest.raises(ValueError, match="non-empty list"):
        StagePipeline([])
    with pytest.raises(ValueError, match="non-empty list"):
        StagePipeline(lambda x: x)
    with pytest.raises(ValueError, match="queue_size"):
        StagePipeline([lambda x: x], queue_size=0)
    with pytest.raises(TypeError, match="callable"):
        Stage("fn")
    with pytest.raises(ValueError, match="only 'cpu' and 'cuda'"):
        Stage(lambda x: x, device="mps")


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_a_stage_whose_gpu_cannot_be_selected_fails_the_pipeline_instead_of_hanging(monkeypatch, device):
    selected = []

    def set_device(dev):  # as torch answers for a GPU that is not there
        selected.append(dev)
        raise RuntimeError(f"CUDA error: invalid device ordinal ({dev})")

    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    # a machine that reports two GPUs, so the pipeline's own up-front check passes and the
    # failure comes from selecting the GPU in the stage's thread
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    pipe = StagePipeline([Stage(lambda x: x, name="policy"), Stage(lambda x: x, device, name="generator")])
    with pytest.raises(StageError, match="stage 'generator' failed to start: RuntimeError: CUDA error"):
        pipe.run(range(4))
    assert selected == [torch.device("cuda", 0 if device == "cuda" else 1)]  # bare "cuda" spelled out as cuda:0


def test_a_stage_on_a_gpu_this_process_cannot_see_is_refused_before_any_thread_starts(monkeypatch):
    # on a CPU-only torch, set_device in the stage's thread used to fail with
    # "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"stage 'generator' asks for cuda:0, but CUDA is not available"):
        StagePipeline([Stage(lambda x: x, name="policy"), Stage(lambda x: x, "cuda", name="generator")])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=r"stage 'reward' asks for cuda:1, but only 1 CUDA device\(s\) are visible"):
        StagePipeline([Stage(lambda x: x, "cuda:1", name="reward")])
    assert not [t for t in threading.enumerate() if t.name.startswith("pipeline-")]


def test_stream_train_and_init_distributed_refuse_a_gpu_this_process_cannot_see(monkeypatch):
    # they reached torch's own errors: "Torch not compiled with CUDA enabled" (AssertionError) from
    # stream_train's first batch, "module 'torch._C' has no attribute '_cuda_setDevice'" from init_distributed
    from torch import nn

    from agents.placement import DistEnv, init_distributed, stream_train

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    net = nn.Linear(2, 1)
    with pytest.raises(ValueError, match=r"stream_train asks for cuda:0, but CUDA is not available"):
        stream_train(
            lambda b: net(b).mean(), [torch.ones(2, 2)], torch.optim.SGD(net.parameters(), lr=0.1), device="cuda"
        )
    with pytest.raises(ValueError, match=r"init_distributed asks for cuda:0, but CUDA is not available"):
        init_distributed(DistEnv(), "cuda:0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ValueError, match=r"init_distributed asks for cuda:2, but only 2 CUDA device\(s\) are visible"):
        init_distributed(DistEnv(), 2)


def test_stage_names_and_a_string_for_the_stages_are_refused():
    with pytest.raises(TypeError, match="Stage name must be a str or None, got int"):
        Stage(lambda x: x, name=5)
    with pytest.raises(ValueError, match="stages must be a non-empty list"):
        StagePipeline("generate")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only case of the fuzzing report")
def test_a_cuda_stage_on_a_cpu_only_machine_says_cuda_is_not_available():
    with pytest.raises(ValueError, match="CUDA is not available"):
        StagePipeline([Stage(lambda x: x, device="cuda")]).run([1])


def test_numpy_queue_size_is_accepted_and_bools_are_not():
    assert StagePipeline([lambda x: x + 1], queue_size=np.int64(1)).run([1, 2]) == [2, 3]
    with pytest.raises(ValueError, match="queue_size"):
        StagePipeline([lambda x: x], queue_size=True)


def _modes(x):
    y = torch.nn.functional.linear(x, torch.ones(2, 2, requires_grad=True))
    return y.requires_grad, torch.is_inference_mode_enabled(), y.dtype


def test_stages_and_the_input_run_under_the_callers_no_grad_inference_mode_and_autocast():
    # torch keeps these modes per thread: the stages' threads used to run with grad on and no autocast
    def items():
        yield torch.ones(1, 2) * torch.is_grad_enabled()

    pipe = StagePipeline([lambda x: x.clone(), _modes])
    assert pipe.run([torch.ones(1, 2)]) == [(True, False, torch.float32)]
    with torch.no_grad():
        assert pipe.run([torch.ones(1, 2)]) == [(False, False, torch.float32)]
        assert pipe.run(items()) == [(False, False, torch.float32)]
        assert StagePipeline([lambda x: x.tolist()]).run(items()) == [[[0.0, 0.0]]]  # the input thread too
    with torch.inference_mode():
        assert pipe.run([torch.ones(1, 2)]) == [(False, True, torch.float32)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert pipe.run([torch.ones(1, 2)]) == [(True, False, torch.bfloat16)]
    with torch.no_grad():
        gen = pipe.imap([torch.ones(1, 2)])  # the modes at the call count, not those at the first next()
    assert list(gen) == [(False, False, torch.float32)]


@pytest.mark.parametrize("reward_fails_on", [None, 2])
def test_outputs_before_a_failing_item_come_first_then_the_error_of_the_earliest_item(reward_fails_on):
    # the policy fails on item 6 while the reward stage still holds item 0, so the failure is known
    # before any output is read; the outputs of items 0..5 used to be dropped. An earlier item that
    # fails later in time (the reward's item 2) is the error the stream reaches first.
    policy_failed = threading.Event()

    def policy(i):
        if i == 6:
            policy_failed.set()
            raise ValueError("bad prompt")
        return i

    def reward(i):
        if i == 0:
            assert policy_failed.wait(timeout=10)
        if i == reward_fails_on:
            raise ValueError("NaN reward")
        return i * 10

    pipe = StagePipeline([Stage(policy, name="policy"), Stage(reward, name="reward")], queue_size=6)
    got = []
    with pytest.raises(StageError) as info:
        for out in pipe.imap(range(10)):
            got.append(out)
    last = 6 if reward_fails_on is None else reward_fails_on
    assert got == [i * 10 for i in range(last)]
    assert (info.value.stage, info.value.index) == (("policy", 6) if reward_fails_on is None else ("reward", 2))
    policy_failed.clear()
    with pytest.raises(StageError) as info_run:
        pipe.run(range(10))
    assert str(info_run.value) == str(info.value)  # run() raises the same error
    for _ in range(100):  # the threads end once they see the stop (polled every 0.1 s); a loaded CI runner is slow
        if not [t for t in threading.enumerate() if t.name.startswith("pipeline-")]:
            break
        time.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name.startswith("pipeline-")]


def test_items_that_are_not_iterable_are_refused_at_once():
    pipe = StagePipeline([lambda x: x])
    with pytest.raises(TypeError, match="items must be an iterable of inputs .*got NoneType"):
        pipe.run(None)
    with pytest.raises(TypeError, match="items must be an iterable of inputs .*got int"):
        pipe.imap(5)  # at the call, not at the first next()
