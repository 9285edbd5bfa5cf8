"""The processes the tests start see what the images install (tests/step_site): what it hides
is in no image's lock, and is hidden in a child process though this environment has it."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys

from tests.conftest import REPO_ROOT
from tests.step_site.sitecustomize import HIDDEN as HIDDEN_MODULES

HIDDEN = {"sklearn": "scikit-learn", "matplotlib": "matplotlib"}


def test_what_the_step_site_hides_is_in_no_image():
    assert set(HIDDEN_MODULES) == set(HIDDEN)
    locks = sorted((REPO_ROOT / "images").glob("requirements-*.lock"))
    assert len(locks) == 4
    for lock in locks:
        pinned = set(re.findall(r"^([A-Za-z0-9_.-]+)==", lock.read_text(), re.M))
        assert not pinned & set(HIDDEN.values()), lock.name


def test_a_child_process_cannot_import_them_though_they_are_installed():
    for name, distribution in HIDDEN.items():
        importlib.metadata.distribution(distribution)  # the dev environment has them
        __import__(name)  # and this process, pytest's, can import them
    code = ("import sys\nfor name in sys.argv[1:]:\n    try:\n        __import__(name)\n"
            "    except ImportError:\n        print(name, 'hidden')\n")
    result = subprocess.run([sys.executable, "-c", code, *HIDDEN], capture_output=True,
                            text=True, check=True)
    assert result.stdout.split("\n")[:2] == [f"{name} hidden" for name in HIDDEN]
