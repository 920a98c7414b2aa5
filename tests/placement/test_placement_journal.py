"""Journal: results survive a reopen, a torn last record is dropped, a journal never answers for other work."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from agents.placement.journal import Journal, item_digest, job_key_for

KEY = "tests.make_thing"


def test_roundtrip_in_one_session(tmp_path):
    with Journal(tmp_path / "j.bin", KEY) as j:
        assert j.get(0, "a") == (False, None)
        j.put(0, "a", {"score": 1.5})
        j.put(2, "c", None)  # a None result is a result, not "missing"
        assert j.get(0, "a") == (True, {"score": 1.5})
        assert j.get(2, "c") == (True, None)
        assert j.get(1, "b") == (False, None)
        assert len(j) == 2


def test_reopen_skips_finished_and_preserves_results(tmp_path):
    path = tmp_path / "sub" / "j.bin"  # the folder is created too
    result = {"t": torch.arange(6.0).reshape(2, 3)[1], "arr": np.ones(3), "s": "x"}
    with Journal(path, KEY) as j:
        j.put(0, "a", result)
        j.put(1, "b", [1, 2])
    with Journal(path, KEY) as j:
        assert len(j) == 2
        ok, got = j.get(0, "a")
        assert ok and got["s"] == "x" and np.array_equal(got["arr"], np.ones(3))
        assert torch.equal(got["t"], torch.tensor([3.0, 4.0, 5.0]))
        # a view is stored as its own elements, not its whole storage
        assert got["t"].untyped_storage().nbytes() == 3 * 4
        assert j.get(1, "b") == (True, [1, 2])
        assert j.get(2, "c") == (False, None)
        j.put(2, "c", 3)
    with Journal(path, KEY) as j:
        assert [j.get(i, x)[0] for i, x in enumerate("abc")] == [True, True, True]
        assert j.get(2, "c") == (True, 3) and j.get(3, "d") == (False, None)


def test_tensor_items_match_by_value_in_a_new_process(tmp_path):
    # plain pickling embeds a storage address, so the digest must be computed from the values
    item = {"x": torch.arange(12, dtype=torch.bfloat16).reshape(3, 4).t(), "id": 7}
    path = tmp_path / "j.bin"
    code = (
        "import torch, sys\n"
        "from agents.placement.journal import Journal\n"
        "item = {'x': torch.arange(12, dtype=torch.bfloat16).reshape(3, 4).t().contiguous(), 'id': 7}\n"
        f"with Journal(sys.argv[1], {KEY!r}) as j: j.put(0, item, 'done')\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    with Journal(path, KEY) as j:
        assert j.get(0, item) == (True, "done")
    assert item_digest(torch.zeros(2)) != item_digest(torch.zeros(2, dtype=torch.float64))
    assert item_digest(torch.zeros(2)) != item_digest(torch.zeros(1, 2))


def test_equal_items_have_one_digest_whatever_objects_they_share():
    # one string object met twice pickles as a back-reference, two equal ones in full: items built in code
    # and the same items read back from a file must still be recognised
    shared = "a photo of nothing"
    built = {"prompt": "x", "negatives": [shared, shared]}
    read_back = {"prompt": "x", "negatives": ["a photo of nothing", "".join(["a photo ", "of nothing"])]}
    assert built == read_back and item_digest(built) == item_digest(read_back)
    assert item_digest(built) != item_digest({"prompt": "x", "negatives": [shared]})
    grid = np.arange(6).reshape(2, 3)
    assert item_digest(grid.T) == item_digest(np.ascontiguousarray(grid.T))  # Fortran order pickles otherwise
    assert item_digest(grid) != item_digest(grid.astype(np.int32))
    cyclic = [1]
    cyclic.append(cyclic)  # pickled with the memo, which cycles need
    assert item_digest(cyclic) == item_digest(cyclic)


def test_sets_digest_alike_in_every_process():
    # a set's order follows string hashes, salted per process (PYTHONHASHSEED)
    code = (
        "import functools\n"
        "from agents.placement.journal import item_digest\n"
        "print(item_digest({'cat', 'dog', 'bird', 'fish'}).hex(), item_digest(frozenset({'a', 'b', 'c'})).hex())\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1


def test_a_journal_of_the_old_digests_says_so(tmp_path):
    import pickle

    from agents.placement import journal

    path = tmp_path / "j.bin"
    payload = pickle.dumps({"format": 1, "job_key": KEY}, 5)
    path.write_bytes(journal._MAGIC + journal._record(payload))
    with pytest.raises(ValueError, match=r"j\.bin was written before 2026-12-05.*delete it to start over"):
        Journal(path, KEY)


def test_torn_last_record_is_ignored_and_truncated(tmp_path):
    path = tmp_path / "j.bin"
    with Journal(path, KEY) as j:
        j.put(0, "a", "A")
        j.put(1, "b", "B")
    whole = path.stat().st_size
    # a crash while appending item 2: its length prefix promises more bytes than were written
    with open(path, "ab") as f:
        f.write((1000).to_bytes(8, "little") + b"\x00\x01\x02\x03" + b"partial")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn append is expected after a crash: no warning
        with Journal(path, KEY) as j:
            assert path.stat().st_size == whole
            assert j.get(1, "b") == (True, "B") and j.get(2, "c") == (False, None)
            j.put(2, "c", "C")
    with Journal(path, KEY) as j:
        assert [j.get(i, x)[1] for i, x in enumerate("abc")] == ["A", "B", "C"]


def test_torn_record_with_a_bad_checksum_is_dropped(tmp_path):
    path = tmp_path / "j.bin"
    with Journal(path, KEY) as j:
        j.put(0, "a", "A")
        size_one = path.stat().st_size
        j.put(1, "b", "B")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the last record's payload changed after its checksum was written
    path.write_bytes(bytes(data))
    with Journal(path, KEY) as j:
        assert j.get(0, "a") == (True, "A") and j.get(1, "b") == (False, None)
    assert path.stat().st_size == size_one


def test_damage_before_the_end_warns_and_keeps_what_precedes(tmp_path):
    path = tmp_path / "j.bin"
    with Journal(path, KEY) as j:
        for i in range(3):
            j.put(i, i, i * 10)
    data = bytearray(path.read_bytes())
    data[-60] ^= 0xFF  # inside item 1's record, which item 2's follows
    path.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="damaged record"):
        with Journal(path, KEY) as j:
            found = [j.get(i, i) for i in range(3)]
    assert found[0] == (True, 0) and found[2] == (False, None)


def test_header_torn_at_creation_starts_afresh(tmp_path):
    path = tmp_path / "j.bin"
    path.write_bytes(b"AGJRNL1\n\x05\x00")
    with Journal(path, KEY) as j:
        j.put(0, "a", 1)
    with Journal(path, KEY) as j:
        assert j.get(0, "a") == (True, 1)


def test_a_whole_header_that_fails_its_checksum_is_refused_not_wiped(tmp_path):
    path = tmp_path / "j.bin"
    with Journal(path, KEY) as j:
        for i in range(5):
            j.put(i, i, f"result {i}")
    data = bytearray(path.read_bytes())
    data[8 + 12 + 3] ^= 0xFF  # a byte of the header's payload (magic, length + CRC, payload)
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"j\.bin has a damaged header \(checksum\); delete it to start over"):
        Journal(path, KEY)
    assert path.read_bytes() == bytes(data)  # the five results are still there, for the user to recover


def test_other_job_key_and_other_file_are_refused(tmp_path):
    path = tmp_path / "j.bin"
    with Journal(path, KEY) as j:
        j.put(0, "a", 1)
    with pytest.raises(ValueError, match=rf"journal .*j\.bin was written for job_key '{KEY}', not 'other'"):
        Journal(path, "other")
    with pytest.raises(ValueError, match=r"is a folder; pass a file's path"):  # was a bare IsADirectoryError
        Journal(tmp_path, KEY)
    text = tmp_path / "notes.txt"
    text.write_text("some unrelated file that must not be truncated\n")
    with pytest.raises(ValueError, match="notes.txt is not a journal"):
        Journal(text, KEY)
    assert text.read_text().startswith("some unrelated")
    with pytest.raises(ValueError, match=r"a part of its folder .*notes\.txt is a file"):  # was a FileExistsError
        Journal(text / "run.journal", KEY)


def test_other_item_at_an_index_is_refused(tmp_path):
    path = tmp_path / "j.bin"
    with Journal(path, KEY) as j:
        j.put(3, {"prompt": "a cat"}, "img")
    with Journal(path, KEY) as j:
        with pytest.raises(ValueError, match=r"j\.bin was written for other items: item 3 differs"):
            j.get(3, {"prompt": "a dog"})
        with pytest.raises(ValueError, match="item 3 differs"):
            j.put(3, {"prompt": "a dog"}, "img2")
        assert j.get(3, {"prompt": "a cat"}) == (True, "img")


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="job_key must be a non-empty str"):
        Journal(tmp_path / "j.bin", "")
    with pytest.raises(TypeError, match="path must be"):
        Journal(3, KEY)
    with Journal(tmp_path / "j.bin", KEY) as j:
        with pytest.raises(ValueError, match="index must be an int >= 0"):
            j.get(-1, "a")
        with pytest.raises(ValueError, match="index must be an int >= 0"):
            j.put(True, "a", 1)
        with pytest.raises(TypeError, match="item 0 cannot be pickled"):
            j.put(0, lambda: 0, 1)
        with pytest.raises(TypeError, match="result of item 0 cannot be pickled"):
            j.put(0, "a", lambda: 0)
        assert len(j) == 0
    with pytest.raises(RuntimeError, match="is closed"):
        j.get(0, "a")


def _factory(device, model="a"):
    return abs


class _Factory:
    def __init__(self, model):
        self.model = model

    def __call__(self, device):
        return abs


class _Scorer:
    def __init__(self, scale):
        self.scale = scale

    def make(self, device):
        return lambda x: x * self.scale


def _factory_for(model):
    def make(device):
        return model

    return make


def test_job_key_names_the_factory_and_what_it_carries():
    assert job_key_for(_factory) == f"{__name__}._factory"
    a, b = functools.partial(_factory, model="a"), functools.partial(_factory, model="b")
    assert job_key_for(a).startswith(f"{__name__}._factory[") and job_key_for(a) != job_key_for(b)
    assert job_key_for(a) == job_key_for(functools.partial(_factory, model="a"))
    assert job_key_for(_Factory("a")) == job_key_for(_Factory("a")) != job_key_for(_Factory("b"))
    assert job_key_for(_Factory("a")).startswith(f"{__name__}._Factory[")
    # a bound method's object, a closure's cells and a lambda's code configure the job too (they were dropped:
    # a journal written by Scorer(10).make answered Scorer(1000).make's items)
    assert job_key_for(_Scorer(10).make) == job_key_for(_Scorer(10).make) != job_key_for(_Scorer(1000).make)
    assert job_key_for(_Scorer(10).make).startswith(f"{__name__}._Scorer.make[")
    assert job_key_for(_factory_for("clip")) == job_key_for(_factory_for("clip")) != job_key_for(_factory_for("sig"))
    assert job_key_for(lambda device: abs) != job_key_for(lambda device: round)
    # what cannot be pickled counts by its repr without memory addresses: the same key in another process
    local = _factory_for(lambda x: x)
    assert " at 0x" not in job_key_for(local) and job_key_for(local) == job_key_for(_factory_for(lambda x: x))


def test_a_batch_of_results_is_written_with_one_sync(tmp_path, monkeypatch):
    from agents.placement import journal

    syncs = []
    real_fsync = journal.os.fsync
    monkeypatch.setattr(journal.os, "fsync", lambda fd: (syncs.append(fd), real_fsync(fd)))
    path = tmp_path / "j.bin"
    with Journal(path, KEY) as j:
        before = len(syncs)
        j.put_many([(i, f"item {i}", torch.full((2,), float(i))) for i in range(5)])
        assert len(syncs) - before == 1 and len(j) == 5
        with pytest.raises(ValueError, match="item 2 differs"):  # checked before anything is written
            j.put_many([(7, "item 7", 7), (2, "another item", 2)])
        assert len(j) == 5
    with Journal(path, KEY) as j:
        assert [j.get(i, f"item {i}")[1].tolist() for i in range(5)] == [[float(i)] * 2 for i in range(5)]
        assert j.get(7, "item 7") == (False, None)
