"""Time to build every pipeline for both targets (what `gkeflow compile`, `submit` and
`schedule apply` do before anything is sent), with KFP's own container-spec check (it reads
the whole call stack's source with ``inspect.stack()`` on every resource setting) against
gkeflow's frame-name form (:mod:`gkeflow.pipelines.compute.kfp_task_check`), in one process,
alternating rounds. The stack is made ``--depth`` frames deep first, as a CLI or a test
runner would have it.

    python bench/build_pipelines.py [--rounds 5] [--depth 40]

Prints ``kfp_check_s=... gkeflow_check_s=... speedup=...`` (median seconds per round).
"""

from __future__ import annotations

import argparse
import statistics
import time


def build_all() -> None:
    from gkeflow.pipelines.targets.compile import COMPILE_TARGETS, PIPELINES

    for build in PIPELINES.values():
        for target in COMPILE_TARGETS:
            build(target)


def deep(depth: int, func):
    return func() if depth <= 0 else deep(depth - 1, func)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--depth", type=int, default=40)
    args = parser.parse_args()

    from kfp.dsl.pipeline_task import PipelineTask

    from gkeflow.pipelines.compute import kfp_task_check

    original = PipelineTask._ensure_container_spec_exists
    build_all()  # imports and first-build costs out of the way
    times = {"kfp": [], "gkeflow": []}
    for _ in range(args.rounds):
        for name, check in (("kfp", original),
                            ("gkeflow", kfp_task_check._ensure_container_spec_exists)):
            # apply_compute installs gkeflow's form; put the chosen one back each time
            kfp_task_check.install = lambda check=check: setattr(
                PipelineTask, "_ensure_container_spec_exists", check) or True
            start = time.perf_counter()
            deep(args.depth, build_all)
            times[name].append(time.perf_counter() - start)
    kfp_s, ours_s = statistics.median(times["kfp"]), statistics.median(times["gkeflow"])
    print(f"kfp_check_s={kfp_s:.2f} gkeflow_check_s={ours_s:.2f} speedup={kfp_s / ours_s:.1f} "
          f"rounds={args.rounds} depth={args.depth}")


if __name__ == "__main__":
    main()
