"""``images.requirements`` checked before an image is built: what pip would refuse or what
must not end up in a layer, each found before the first build step.

* Lines that point at this machine's files (``-r other.txt``, ``./pkg``, ``file:``): only the
  requirements file is copied into the build.
* Credentials written out in URLs (``https://user:token@host``): they would stay in a layer.
  Write ``${VARIABLE}`` instead (pip expands it); :func:`write_secret` hands the variables to
  the build as a secret file mounted for the requirements step only.
* Pins the images' locks do not satisfy (:func:`pin_conflict`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from gkeflow.pipelines.targets import image_locks


class RequirementsError(ValueError):
    """The requirements file cannot be used; the message is one line naming the fix."""


def read_requirements(requirements: Path) -> str:
    """The text of ``requirements``, refused in one line when a line points at local files
    or holds a credential in plain text."""
    if not requirements.is_file():
        raise RequirementsError(f"images.requirements: {requirements} does not exist; "
                              "point it at a pip requirements file")
    try:
        text = requirements.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise RequirementsError(f"{requirements}: not UTF-8 text (byte {exc.start}); save it as "
                              "UTF-8") from exc
    for number, line in enumerate(text.splitlines(), 1):
        shown = plain_credential(line.split(" #", 1)[0].strip())
        if shown:
            raise RequirementsError(
                f"{requirements}:{number}: {shown} holds a credential in plain text, which "
                "would stay in an image layer; write ${VARIABLE} in its place (e.g. https://"
                "__token__:${PYPI_TOKEN}@host/simple) and set that variable in the "
                "environment: it is passed to the build as a secret")
        problem = local_reference(line.split(" #", 1)[0].strip())
        if problem:
            raise RequirementsError(
                f"{requirements}:{number}: {problem} is not supported in images.requirements "
                "(only that file is copied into the build, not what it points to); list "
                "packages from an index, or put your own code in images.include")
    return text


#: The user information of a URL (``scheme://USERINFO@host``).
_USERINFO_RE = re.compile(r"\b([a-z][a-z0-9+.-]*)://([^/\s?#]*)@([^/\s?#]*)", re.IGNORECASE)
#: pip expands ``${NAME}`` (upper case, digits, ``_``) in requirements files.
_VARIABLE_RE = re.compile(r"\$\{([A-Z0-9_]+)\}")
#: The build secret carrying the variables a requirements file names.
PIP_SECRET = "gkeflow-pip-env"


def plain_credential(line: str) -> str:
    """The URL of ``line`` that carries a credential written out (shown as
    ``scheme://***@host``), or "": a password, or a user name standing alone (a token),
    that is not a ``${VARIABLE}``; ``git@`` (SSH) holds no secret."""
    if line.startswith("#"):
        return ""
    for scheme, userinfo, host in _USERINFO_RE.findall(line):
        user, _, password = userinfo.partition(":")
        secret = password if password else ("" if user == "git" else user)
        if secret and not _VARIABLE_RE.fullmatch(secret):
            return f"{scheme}://***@{host}"
    return ""


def secret_variables(text: str) -> list[str]:
    """The ``${NAME}`` variables the package lines of a requirements file name, in order."""
    names: list[str] = []
    for line in text.splitlines():
        if not line.lstrip().startswith("#"):
            names += [n for n in _VARIABLE_RE.findall(line.split(" #", 1)[0]) if n not in names]
    return names


def write_secret(path: Path, names: Sequence[str], environ=None) -> list[str]:
    """Write ``export NAME='value'`` lines for ``names`` (from the environment) into
    ``path``, readable by the owner only; returns the values (to hide from logs). Raises
    :class:`RequirementsError` naming a variable that is not set."""
    environ = os.environ if environ is None else environ
    missing = [name for name in names if not environ.get(name)]
    if missing:
        raise RequirementsError(f"images.requirements names ${{{missing[0]}}}, which is not set; "
                              f"export {missing[0]} before `gkeflow images build` (it is "
                              "passed to the build as a secret, never into a layer)")
    path.touch(mode=0o600)
    path.chmod(0o600)
    quoted = {name: environ[name].replace("'", "'\\''") for name in names}
    path.write_text("".join(f"export {name}='{value}'\n" for name, value in quoted.items()),
                    encoding="utf-8")
    return [environ[name] for name in names]


#: Options that name other files or folders on this machine.
_FILE_OPTIONS = re.compile(r"^(-r|-c|-e|-f|--requirement|--constraint|--editable|"
                           r"--find-links)(?:\s*=?\s*|(?=\S))(.*)$")


def local_reference(line: str) -> str:
    """What in a requirements line points at this machine's files ("" when nothing)."""
    if not line or line.startswith("#"):
        return ""
    option = _FILE_OPTIONS.match(line)
    if option:
        target = option.group(2)
        if option.group(1) in ("-f", "--find-links") and re.match(r"^https?://", target):
            return ""  # a remote package index page
        return f"{option.group(1)} {target}".strip()
    if line.startswith(("./", "../", "/", "~", "file:")) or re.match(r"^[A-Za-z]:\\", line):
        return f"the local path {line.split()[0]}"
    return ""


def pin_conflict(requirements: Path, text: str, flavour: str, lock: Path) -> str:
    """One line naming the first requirement of ``text`` that the ``flavour`` image's
    ``lock`` does not satisfy: the package, the user's pin and the locked version; ""."""
    for number, name, line, locked in image_locks.pin_conflicts(text, lock)[:1]:
        return (f"{requirements}:{number}: {line} conflicts with the {flavour} image's locked "
                f"{name} {locked}; allow {locked} or drop the pin (the images keep the "
                "lock's versions)")
    return ""
