"""The experience bank keeps successful traces only, deduplicated and durable; the retriever returns the
nearest experiences and never the trajectory itself."""

from __future__ import annotations

import pytest

from lopd_envs.trace import Trace
from lopd_train.experience.bank import ExperienceBank, trace_key
from lopd_train.experience.retriever import Retriever


def trace(task_id: str, task: str, call: str, success: bool = True) -> Trace:
    t = Trace(env_id="lopd/BFCLv3-v0", task_id=task_id, task=task, category="simple", reward=float(success),
              success=success)
    t.add({"name": call, "arguments": {"x": 1}}, "ok")
    return t


def test_bank_stores_successes_only_and_deduplicates(tmp_path):
    bank = ExperienceBank(tmp_path / "bank.sqlite")
    added = bank.add([trace("a", "Get the weather in Paris", "get_weather"),
                      trace("b", "Book a flight", "book", success=False),
                      trace("a", "Get the weather in Paris", "get_weather")], rollout=3)
    assert len(added) == 1 and len(bank) == 1
    exp = bank.all()[0]
    assert exp.task_id == "a" and exp.rollout == 3 and exp.text.startswith("Task: Get the weather in Paris")
    assert Trace.from_json(exp.trace).steps[0].action["name"] == "get_weather"
    assert bank.add([trace("a", "Get the weather in Paris", "get_weather")]) == []


def test_bank_survives_reopening_and_snapshots_merge_back(tmp_path):
    bank = ExperienceBank(tmp_path / "bank.sqlite")
    bank.add([trace("a", "t1", "f"), trace("b", "t2", "g")])
    bank.snapshot(tmp_path / "snap.sqlite")
    bank.add([trace("c", "t3", "h")])
    bank.close()
    again = ExperienceBank(tmp_path / "bank.sqlite")
    assert [e.task_id for e in again.all()] == ["a", "b", "c"]
    fresh = ExperienceBank(tmp_path / "fresh.sqlite")
    assert fresh.merge_from(tmp_path / "snap.sqlite") == 2
    assert fresh.merge_from(tmp_path / "snap.sqlite") == 0


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    bank = ExperienceBank(tmp_path_factory.mktemp("bank") / "bank.sqlite")
    bank.add([trace("w1", "What is the weather in Paris today?", "get_weather"),
              trace("w2", "Tell me the weather forecast for Berlin", "get_weather"),
              trace("m1", "Compute the factorial of 7", "math.factorial"),
              trace("f1", "Book a flight from London to Rome", "book_flight"),
              trace("m2", "Compute the square root of 81", "math.sqrt")])
    return bank, Retriever(bank)


def test_retriever_returns_the_nearest_experiences_first(filled):
    _, retriever = filled
    (hits,) = retriever.retrieve(["How is the weather in Madrid?"], k=2)
    assert [h.task_id for h in hits] == ["w1", "w2"] or [h.task_id for h in hits] == ["w2", "w1"]
    (math_hits,) = retriever.retrieve(["Compute the factorial of 5"], k=1)
    assert math_hits[0].task_id == "m1"


def test_retriever_never_returns_the_trajectory_itself(filled):
    bank, retriever = filled
    own = bank.get_by_key(trace_key(trace("m1", "Compute the factorial of 7", "math.factorial")))
    (hits,) = retriever.retrieve(["Compute the factorial of 7"], k=3, exclude=[[own.id]])
    assert own.id not in [h.id for h in hits] and len(hits) == 3


def test_retriever_handles_fewer_experiences_than_j_and_an_empty_bank(tmp_path, filled):
    _, retriever = filled
    (hits,) = retriever.retrieve(["anything"], k=10)
    assert len(hits) == 5
    empty = Retriever(ExperienceBank(tmp_path / "empty.sqlite"), embedder=retriever.embedder)
    assert empty.retrieve(["anything"], k=3) == [[]]


def test_retriever_index_grows_past_its_initial_capacity(tmp_path, filled):
    _, base = filled
    bank = ExperienceBank(tmp_path / "big.sqlite")
    r = Retriever(bank, embedder=base.embedder)
    r.capacity = 2
    r.index.resize_index(2)
    r.add(bank.add([trace(f"t{i}", f"task number {i}", "f") for i in range(5)]))
    assert len(r.ids) == 5 and len(r.retrieve(["task number 3"], k=5)[0]) == 5
