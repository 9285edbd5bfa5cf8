"""A stand-in for podman, docker and gcloud (Cloud Build) on PATH, for `gkeflow images build`.

Installed by :func:`install` as ``BIN/podman``, ``BIN/docker`` and ``BIN/gcloud`` (small
shell scripts calling this file with the engine's name). Each call appends one JSON line
to ``$FAKE_BUILDER_LOG``: the engine, its arguments and, for a build, the files of the
build context. It prints what the real tool prints where gkeflow reads it, with digests
derived from the reference (so a test can predict them). ``FAKE_BUILDER_FAIL=TEXT`` makes
any call whose arguments contain TEXT fail with exit 1; ``FAKE_BUILDER_NOISE`` adds the
warnings and update notices real CLIs print on stderr; ``FAKE_BUILDER_NO_REPO_DIGESTS``
makes docker report no repository digest (``null``); ``FAKE_BUILDER_NO_PULL`` makes a build
fail as podman and docker (BuildKit) do when the Dockerfile's base image cannot be pulled;
``FAKE_BUILDER_HANG=FILE`` makes a build write its process id and context folder to FILE,
then wait until it is ended.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import time
from pathlib import Path


def digest(reference: str, pushed: bool) -> str:
    """The digest this fake reports for ``reference``: pushed manifest or local image."""
    kind = "pushed" if pushed else "local"
    return "sha256:" + hashlib.sha256(f"{kind} {reference}".encode()).hexdigest()


def install(bin_dir: Path) -> Path:
    """Write the podman, docker and gcloud shims into ``bin_dir``; returns it."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for engine in ("podman", "docker", "gcloud"):
        shim = bin_dir / engine
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" '
                        f'{engine} "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def _context_files(context: Path) -> list[str]:
    return sorted(p.relative_to(context).as_posix() for p in context.rglob("*") if p.is_file())


def _secret(option: str, context: Path) -> dict:
    """What a build got as ``--secret id=ID,src=FILE``: its id, text and mode, whether it
    lies outside the context, and whether any of its values is in a file of the context."""
    fields = dict(part.split("=", 1) for part in option.split(","))
    source = Path(fields["src"])
    text = source.read_text()
    values = [line.split("=", 1)[1].strip("'") for line in text.splitlines()]
    files = [p.read_bytes() for p in context.rglob("*") if p.is_file()]
    return {"id": fields["id"], "text": text, "mode": oct(source.stat().st_mode & 0o777),
            "outside_context": context.resolve() not in source.resolve().parents,
            "value_in_context": any(v.encode() in data for v in values for data in files)}


def main(engine: str, args: list[str]) -> int:
    entry: dict = {"engine": engine, "args": args}
    if engine in ("podman", "docker") and args[:1] == ["build"]:
        context = Path(args[-1])
        entry["context"] = _context_files(context)
        entry["dockerfile"] = Path(_option(args, "--file")).read_text()[:200]
        if "--secret" in args:
            entry["secret"] = _secret(_option(args, "--secret"), context)
    if engine == "gcloud" and args[:2] == ["builds", "submit"]:
        config = json.loads(Path(_option(args, "--config")).read_text())
        entry["cloudbuild"] = config
        entry["context"] = _context_files(Path(args[-1]))
    with open(os.environ["FAKE_BUILDER_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")
    if os.environ.get("FAKE_BUILDER_NOISE"):  # what CLIs print on stderr beside answers
        print("WARNING: the credential helper is deprecated", file=sys.stderr)
        print("Updates are available for some Google Cloud CLI components.  To install "
              "them,\nplease run:\n  $ gcloud components update", file=sys.stderr)
    if engine in ("podman", "docker") and args[:1] == ["build"] and os.environ.get(
            "FAKE_BUILDER_NO_PULL"):
        return _no_pull(engine, Path(_option(args, "--file")))
    hang = os.environ.get("FAKE_BUILDER_HANG")
    if hang and args[:1] == ["build"]:
        print("STEP 1/9: FROM python:3.11.11-slim-bookworm AS locked", flush=True)
        Path(hang + ".tmp").write_text(json.dumps({"pid": os.getpid(), "context": args[-1]}))
        os.replace(hang + ".tmp", hang)
        while True:
            time.sleep(60)
    failing = os.environ.get("FAKE_BUILDER_FAIL")
    if failing and any(failing in arg for arg in args):
        print("STEP 3/9: RUN pip install --require-hashes ...")
        print("ERROR: no space left on device", file=sys.stderr)
        return 1
    if engine in ("podman", "docker"):
        if args[0] == "build":
            print("STEP 1/2: FROM python:3.11.11-slim-bookworm")
            print(f"COMMIT {_option(args, '--tag')}")
        elif args[0] == "push":
            reference = args[-1]
            if "--digestfile" in args:
                Path(_option(args, "--digestfile")).write_text(digest(reference, True))
            print(f"Writing manifest to image destination\n{reference}: digest: "
                  f"{digest(reference, True)} size: 1234")
        elif args[:2] == ["image", "inspect"]:
            reference, fmt = args[-1], _option(args, "--format")
            if "RepoDigests" in fmt and os.environ.get("FAKE_BUILDER_NO_REPO_DIGESTS"):
                print("null")
            elif "RepoDigests" in fmt:
                repository = reference.rsplit(":", 1)[0]
                print(json.dumps([f"{repository}@{digest(reference, True)}"]))
            else:
                print(digest(reference, False))
        return 0
    state = Path(os.environ["FAKE_BUILDER_LOG"] + ".cloudbuild")
    if args[:2] == ["builds", "submit"]:
        state.write_text(entry["cloudbuild"]["images"][0])
        print("b-1234")
    elif args[:2] == ["builds", "describe"]:
        reference = state.read_text()
        print(json.dumps({"id": args[2], "status": "SUCCESS", "results": {"images": [
            {"name": reference, "digest": digest(reference, True)}]}}))
    elif args[:2] == ["builds", "log"]:
        print("Step #0 - build: done")
    return 0


def _no_pull(engine: str, dockerfile: Path) -> int:
    base = next(line.split()[1] for line in dockerfile.read_text().splitlines()
                if line.upper().startswith("FROM "))
    host = "registry-1.docker.io"
    if engine == "podman":
        print(f"[1/2] STEP 1/9: FROM {base} AS locked")
        print(f"Trying to pull docker.io/library/{base}...", file=sys.stderr)
        print(f"Error: creating build container: initializing source docker://{base}: pinging "
              f'container registry {host}: Get "https://{host}/v2/": dial tcp: lookup {host}: '
              "no such host", file=sys.stderr)
        return 125
    name, tag = base.split(":", 1)
    print(f"ERROR: failed to solve: {base}: failed to resolve source metadata for "
          f'docker.io/library/{base}: failed to do request: Head "https://{host}/v2/library/'
          f'{name}/manifests/{tag}": dial tcp: lookup {host}: no such host', file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
