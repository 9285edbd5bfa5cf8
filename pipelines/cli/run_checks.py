"""The short message a user sees when a step fails on their data or parameters (the
traceback stays in the log); the checks before a run are in
:mod:`gkeflow.pipelines.settings.parameters`."""

from __future__ import annotations

import re

#: Exceptions a step raises for problems in the data or the parameters: shown as their
#: message alone (the traceback is in the run log, and shown with --debug).
USER_ERRORS = ("DataError", "EvaluationError", "ParameterError", "ConfigError", "PredictError",
               "DriftError", "RegistryError")
_ERROR_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(" + "|".join(USER_ERRORS) + r"): (.*)$")


def user_error(log_lines: list[str]) -> str | None:
    """The message of the data or parameter error a step's log ends with, or None.

    The message is the exception line and the lines after it (a message may hold
    sample rows), up to the end of the traceback block.
    """
    lines = [line.rstrip() for line in log_lines]
    for index in range(len(lines) - 1, -1, -1):
        match = _ERROR_LINE.match(lines[index])
        if match:
            message = [match.group(2)]
            for line in lines[index + 1:]:
                if not line.strip() or line.lstrip().startswith(("Traceback", "ERROR", "INFO",
                                                                 "WARNING")):
                    break
                message.append(line)
            return "\n".join(message)
    return None


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b")


def failure_message(log_lines: list[str], debug: bool) -> tuple[str, bool]:
    """What a local run shows for a failed step, and whether it left the traceback out:
    the data or parameter error (:func:`user_error`), else the exception's own line, else
    the end of the step's output. With ``debug``, the whole traceback."""
    lines = [line.rstrip() for line in log_lines if line.strip()]
    start = max((i for i, line in enumerate(lines)
                 if line.lstrip().startswith("Traceback (most recent call last)")), default=None)
    if debug:
        return "\n".join(lines[start:] if start is not None else lines[-1000:]), False
    message = user_error(lines)
    if message is not None:
        return message, True
    # the exception's line has the indentation of its "Traceback" line; frames are deeper
    indent = len(lines[start]) - len(lines[start].lstrip()) if start is not None else 0
    exceptions = [line.strip() for line in lines[start or 0:]
                  if len(line) - len(line.lstrip()) == indent
                  and _EXCEPTION_LINE.match(line.lstrip())]
    if exceptions:
        return exceptions[-1], True
    return "\n".join(lines[-8:]), False
