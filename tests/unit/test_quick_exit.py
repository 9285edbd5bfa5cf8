"""A step process leaves without the interpreter's last garbage collections over every object
(about a second after TensorFlow's import): importing gkeflow's components freezes what is
alive at exit, and nothing else changes (the exit status, output written before)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, check=False)


def test_objects_alive_at_exit_are_frozen_once_components_are_imported():
    # an exit handler registered first runs last: it sees what gkeflow's handler left
    done = _run("""
        import atexit, gc, sys
        atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0))
        import gkeflow.components
        print("frozen before exit:", gc.get_freeze_count() > 0, flush=True)
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["frozen before exit: False", "frozen at exit: True"]


def test_the_exit_status_and_buffered_output_are_kept():
    done = _run("""
        import sys
        import gkeflow.components
        sys.stdout.write("written, not flushed")
        raise SystemExit(3)
        """)
    assert done.returncode == 3 and done.stdout == "written, not flushed"
    failed = _run("""
        import gkeflow.components
        raise RuntimeError("a step's error")
        """)
    assert failed.returncode == 1 and "RuntimeError: a step's error" in failed.stderr
