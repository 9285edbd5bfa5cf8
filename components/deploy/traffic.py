"""The traffic split as a value: which deployed version gets what share, and how a canary,
a promotion and a rollback change it. Both targets use these rules; only how a split is
stored differs (a Vertex AI Endpoint's ``traffic_split``, an InferenceService's canary).

A split maps a deployed version's key (a Vertex deployed-model id, a KServe predictor
name) to a whole percent; the shares of a non-empty split add up to 100.

- :func:`canary`: the new version gets ``percent``; the rest stays with the version that
  serves most now (the stable one); others keep 0. The first version gets 100.
- :func:`promote`: the new version gets 100; of the others, the ``keep`` most recently
  deployed stay deployed at 0 (for a rollback), the rest are undeployed.
- :func:`rollback`: the split before the last change, over the versions still deployed;
  versions the last change added are undeployed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Split = dict[str, int]


class TrafficError(ValueError):
    """A traffic change that cannot be made; the message says why."""


def check_percent(percent: int, what: str = "traffic") -> int:
    if isinstance(percent, bool) or not isinstance(percent, int) or not 1 <= percent <= 100:
        raise TrafficError(f"{what} must be a whole percent from 1 to 100; got {percent!r}")
    return percent


def check_split(split: Mapping[str, int]) -> Split:
    """A copy of ``split`` after checking it: whole percents from 0 to 100 adding up to 100."""
    out = {str(k): int(v) for k, v in split.items()}
    if any(not 0 <= v <= 100 for v in out.values()):
        raise TrafficError(f"traffic shares must be 0..100; got {out}")
    if out and sum(out.values()) != 100:
        raise TrafficError(f"traffic shares must add up to 100; got {out}")
    return out


def stable_of(split: Mapping[str, int], order: Sequence[str] = ()) -> str | None:
    """The version serving most now (on a tie, the most recently deployed)."""
    if not split or not any(split.values()):
        return None
    rank = {key: i for i, key in enumerate(order)}
    return max(split, key=lambda k: (split[k], rank.get(k, -1)))


def canary(current: Mapping[str, int], new: str, percent: int,
           order: Sequence[str] = ()) -> Split:
    """The split after deploying ``new`` with ``percent`` of the traffic."""
    check_percent(percent)
    current = check_split(current)
    stable = stable_of({k: v for k, v in current.items() if k != new}, order)
    if stable is None:
        return {**{k: 0 for k in current if k != new}, new: 100}
    split = {k: 0 for k in current}
    split[stable] = 100 - percent
    split[new] = percent
    return check_split(split)


@dataclass(frozen=True)
class Promotion:
    split: Split
    undeploy: list[str]


def promote(current: Mapping[str, int], new: str, order: Sequence[str], keep: int = 1
            ) -> Promotion:
    """``new`` gets 100%; ``keep`` previous versions stay deployed (at 0), the rest go.

    Args:
        current: The split now; ``new`` must be deployed.
        new: The version to promote.
        order: Deployed versions, oldest first.
        keep: Previous versions to keep deployed for a rollback.
    """
    if keep < 0:
        raise TrafficError(f"keep must be 0 or more; got {keep}")
    current = check_split(current)
    if new not in current and new not in order:
        raise TrafficError(f"version {new} is not deployed; deploy it before promoting it")
    deployed = [k for k in order if k in current or k == new] or list(current)
    for key in current:
        if key not in deployed:
            deployed.append(key)
    others = [k for k in deployed if k != new]
    kept = others[len(others) - keep:] if keep else []
    undeploy = [k for k in others if k not in kept]
    return Promotion({**{k: 0 for k in kept}, new: 100}, undeploy)


@dataclass(frozen=True)
class Rollback:
    split: Split
    undeploy: list[str]


def rollback(current: Mapping[str, int], previous: Mapping[str, int] | None) -> Rollback:
    """Restore ``previous`` (the split before the last change) over what is deployed."""
    current = check_split(current)
    if not previous:
        raise TrafficError("there is no earlier traffic split to roll back to")
    previous = check_split(previous)
    gone = sorted(k for k, v in previous.items() if v and k not in current)
    if gone:
        raise TrafficError(f"cannot roll back: version(s) {', '.join(gone)} of the earlier "
                           "split are no longer deployed (raise keep to keep them)")
    split = {k: v for k, v in previous.items() if k in current}
    undeploy = [k for k in current if k not in split]
    return Rollback(check_split(split), undeploy)


def describe(split: Mapping[str, int], names: Mapping[str, str] | None = None) -> str:
    """``"v3 90%, v4 10%"`` (largest share first)."""
    names = names or {}
    if not split:
        return "no traffic"
    parts = sorted(split.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{names.get(k, k)} {v}%" for k, v in parts)
