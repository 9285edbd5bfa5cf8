"""The workers' test order (tests/ordering.py): each worksteal share starts with an equal
part of the long files and keeps every file's tests together."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tests.ordering import file_of, known_durations, shares


def items(spec: dict[str, int]) -> list:
    return [SimpleNamespace(nodeid=f"{name}::test_{i}") for name, n in spec.items()
            for i in range(n)]


def test_each_share_starts_with_an_equal_part_of_the_long_files():
    spec = {f"tests/unit/test_{i:02d}.py": 5 for i in range(20)}
    spec |= {"tests/local/test_ray.py": 1, "tests/local/test_sweep.py": 2,
             "tests/local/test_run.py": 3, "tests/local/test_deploy.py": 2}
    durations = {"tests/local/test_ray.py": 60, "tests/local/test_sweep.py": 50,
                 "tests/local/test_run.py": 40, "tests/local/test_deploy.py": 30}
    collected = items(spec)
    ordered = shares(collected, 2, durations)

    assert sorted(i.nodeid for i in ordered) == sorted(i.nodeid for i in collected)
    half = len(ordered) // 2  # what worksteal gives the first worker
    first, second = ordered[:half], ordered[half:]
    long_in = [[file_of(i.nodeid) for i in share if file_of(i.nodeid) in durations]
               for share in (first, second)]
    assert all(names and names[0] == file_of(share[0].nodeid)
               for names, share in zip(long_in, (first, second), strict=True))  # long first
    loads = [sum(durations[n] for n in set(names)) for names in long_in]
    assert loads == [90, 90]  # 60 + 30 and 50 + 40
    for share in (first, second):  # a file's tests stay together on a worker
        names = [file_of(i.nodeid) for i in share]
        runs = [name for k, name in enumerate(names) if k == 0 or names[k - 1] != name]
        assert len(runs) == len(set(runs))


def test_one_worker_keeps_the_collection_order():
    collected = items({"tests/a.py": 3, "tests/b.py": 3})
    assert shares(collected, 1, {"tests/b.py": 100}) == collected


def test_unreadable_durations_count_one_second_a_test(tmp_path):
    (tmp_path / "durations.json").write_text("not json")
    assert known_durations(tmp_path / "durations.json") == {}
    (tmp_path / "durations.json").write_text(json.dumps({"tests/a.py": 2.5}))
    assert known_durations(tmp_path / "durations.json") == {"tests/a.py": 2.5}
    collected = items({"tests/a.py": 1, "tests/b.py": 6, **{f"tests/c{i}.py": 1
                                                             for i in range(6)}})
    ordered = shares(collected, 2, {})
    assert file_of(ordered[0].nodeid) == "tests/b.py"  # 6 tests: 6 s, the longest
