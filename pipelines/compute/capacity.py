"""How a step obtains its machines: consumption option, replicas, queue, reservation.

Checks the capacity fields of a :class:`~gkeflow.pipelines.compute.profiles.ComputeProfile`
(``scheduling``, ``max_wait``, ``replicas``, ``queue``, ``reservation``,
``ephemeral_storage``) against the catalogue in :mod:`gkeflow.pipelines.compute.gpu_catalogue`
before anything is compiled, and applies them to a single-pod GKE step:

- ``spot``: node selector ``cloud.google.com/gke-spot: "true"`` and its NoSchedule
  toleration (GKE, "Spot VMs");
- ``flex-start``: node selector ``cloud.google.com/gke-flex-start: "true"`` (GKE, "Run a
  small batch workload with flex-start provisioning mode", https://cloud.google.com/
  kubernetes-engine/docs/how-to/dws-flex-start-training, read 2026-11-30) and a toleration
  of the same key: the cluster autoscaler treats that key as "a label / (optional) taint
  key used for nodes using Flex Start provisioning model" (kubernetes/autoscaler, GKE
  labels), so a tainted flex-start node pool admits the pod too;
- ``reservation``: node selectors ``cloud.google.com/reservation-name: NAME`` and
  ``cloud.google.com/reservation-affinity: "specific"``, plus
  ``cloud.google.com/reservation-project: PROJECT`` for a shared reservation written
  ``projects/PROJECT/reservations/NAME`` or ``projects/PROJECT/zones/ZONE/reservations/NAME``
  (GKE, "Consuming reserved zonal resources",
  https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations, read
  2026-11-30); a Vertex AI CustomJob accepts only the latter (:func:`reservation_problem`);
- ``queue``: pod label ``kueue.x-k8s.io/queue-name: QUEUE`` (Kueue, plain Pod
  integration).

``ephemeral_storage``: kfp 2.17 has no ephemeral-storage field (the pipeline spec's
``ResourceSpec`` carries CPU, memory and accelerator; kfp-kubernetes'
``KubernetesExecutorConfig`` has no container resources), so a single-pod GKE step gets it
as a sized generic ephemeral volume over the launcher's staging directory
(:mod:`gkeflow.pipelines.compute.scratch`); engines that write their own pod spec (a JobSet) apply
it as a request, a Vertex AI CustomJob as its boot disk. Single-pod Vertex AI steps stage
nothing (``/gcs``) and do not apply it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gkeflow.pipelines.compute import accelerators as acc
from gkeflow.pipelines.compute import gpu_catalogue as cat
from gkeflow.pipelines.settings.platforms import Unsupported, platform

GKE_SPOT_LABEL = "cloud.google.com/gke-spot"
GKE_FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
GKE_RESERVATION_NAME_LABEL = "cloud.google.com/reservation-name"
GKE_RESERVATION_PROJECT_LABEL = "cloud.google.com/reservation-project"
GKE_RESERVATION_AFFINITY_LABEL = "cloud.google.com/reservation-affinity"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

#: Steps that may run on several machines unless a pipeline names others.
MULTI_NODE_STEPS = ("train-model",)

_OPTION_TEXT = {cat.STANDARD: "on demand", cat.SPOT: "as Spot",
                cat.FLEX_START: "with flex-start", cat.RESERVATION: "from a reservation"}
#: A Kubernetes label value (Kueue queue names are object names, a subset).
_LABEL_VALUE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_RESERVATION_RE = re.compile(
    r"^(?:projects/(?P<project>[a-z][-a-z0-9]{4,28}[a-z0-9]|[0-9]{1,20})/"
    r"(?:zones/(?P<zone>[a-z]+-[a-z]+[0-9]+-[a-z])/)?reservations/)?"
    r"(?P<name>[a-z]([-a-z0-9]{0,61}[a-z0-9])?)$")
#: What a Vertex AI CustomJob's ``ReservationAffinity.values`` takes: "the full resource name
#: of the reservation" (google.cloud.aiplatform_v1.ReservationAffinity), with its zone.
VERTEX_RESERVATION_FORM = "projects/PROJECT/zones/ZONE/reservations/NAME"


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def parse_reservation(reservation: str) -> tuple[str, str, str]:
    """``(project, zone, name)`` of ``NAME``, ``projects/P/reservations/NAME`` or
    ``projects/P/zones/Z/reservations/NAME`` (absent parts empty).

    Raises:
        ValueError: none of these forms.
    """
    match = _RESERVATION_RE.match(reservation)
    if not match:
        raise ValueError(reservation)
    return match.group("project") or "", match.group("zone") or "", match.group("name")


def split_reservation(reservation: str) -> tuple[str, str]:
    """``"projects/p/reservations/r"`` -> ``("p", "r")``; ``"r"`` -> ``("", "r")``; a zone
    in the name is dropped (a GKE node pool's reservation is in the node pool's zone)."""
    project, _, name = parse_reservation(reservation)
    return project, name


def reservation_problem(step: str, reservation: str, target: str) -> str:
    """Why ``reservation`` cannot be used on ``target``, in one line; "" when it can.

    GKE selects nodes by the reservation's name (and project, for a shared one), so a bare
    name is complete there. A Vertex AI CustomJob needs the full resource name with the
    zone, which cannot be completed from the target's project and region (a region has
    several zones), so anything shorter is refused.
    """
    try:
        project, zone, _ = parse_reservation(reservation)
    except ValueError:
        forms = (VERTEX_RESERVATION_FORM if platform(target).managed else
                 f"NAME, projects/PROJECT/reservations/NAME or {VERTEX_RESERVATION_FORM}")
        return f"{step}: reservation {reservation!r} is not a reservation name; use {forms}"
    if platform(target).managed and not (project and zone):
        return (f"{step}: reservation {reservation!r}: Vertex AI needs the reservation's full "
                f"name {VERTEX_RESERVATION_FORM} (the zone cannot be inferred from the region)")
    return ""


def offered_options(profile) -> frozenset[str]:
    """Consumption options of the shapes that can host ``profile``'s GPUs (all for CPU steps)."""
    if not profile.uses_gpu:
        return frozenset(cat.CONSUMPTION) - {cat.FLEX_START}
    shapes = acc.shapes_for(profile.accelerator, profile.accelerator_count)
    return frozenset().union(*(acc.consumption_of(s) for s in shapes)) if shapes else frozenset()


def _consumption_problems(step: str, p) -> list[str]:
    if getattr(p, "uses_tpu", False):
        return []  # checked against the TPU catalogue (tpu_profile.tpu_problems)
    if not p.uses_gpu:
        if p.scheduling == cat.FLEX_START:
            return [f"{step}: scheduling=flex-start obtains GPU machines; this step asks for "
                    "no GPU (use standard, spot or reservation)"]
        return []
    if p.accelerator not in acc.ACCELERATORS or p.accelerator_count not in acc.valid_counts(
            p.accelerator):
        return []  # reported by the shape checks
    if not acc.runs_the_images(p.accelerator):
        return []  # said once, up front (accelerators.architecture_problem)
    problems = []
    offered = offered_options(p)
    if p.scheduling not in offered:
        shapes = acc.shapes_for(p.accelerator, p.accelerator_count)
        what = shapes[0].name if len({s.name for s in shapes}) == 1 else (
            f"{p.accelerator} x {p.accelerator_count}")
        problems.append(
            f"{step}: {what} is not offered {_OPTION_TEXT[p.scheduling]}: use scheduling="
            f"{_join(acc.ordered(offered))}")
    return problems


def capacity_problems(step: str, p, target: str,
                      multi_node_steps: Iterable[str] = MULTI_NODE_STEPS) -> list[str]:
    """Everything wrong with ``p``'s capacity fields for ``step``; empty when valid."""
    problems = _consumption_problems(step, p)
    if p.scheduling == cat.FLEX_START:
        if p.timeout_s <= 0:
            problems.append(
                f"{step}: scheduling=flex-start needs a maximum run time: set timeout_s "
                "(at most 7d; flex-start capacity runs for up to 7 days)")
        elif p.timeout_s > cat.FLEX_START_MAX_RUN_S:
            problems.append(
                f"{step}: timeout_s {p.timeout_s} is longer than flex-start allows "
                f"({cat.FLEX_START_MAX_RUN_S} s = 7 days)")
    problems += mixed_capacity_problems(step, p, target)
    multi = tuple(multi_node_steps)
    if p.replicas > 1 and step not in multi:
        problems.append(
            f"{step}: replicas {p.replicas}: only {_join(list(multi)) if multi else 'no step'} "
            "can run on several machines; set replicas to 1")
    if p.queue and not _LABEL_VALUE_RE.match(p.queue):
        problems.append(
            f"{step}: queue {p.queue!r} is not a Kueue LocalQueue name (lower-case letters, "
            "digits and '-', at most 63 characters)")
    if p.reservation:
        if p.scheduling != cat.RESERVATION:
            problems.append(
                f"{step}: reservation applies to scheduling=reservation only; this step's "
                f"scheduling is {p.scheduling}")
        problem = reservation_problem(step, p.reservation, target)
        if problem:
            problems.append(problem)
    elif p.scheduling == cat.RESERVATION:
        problems.append(
            f"{step}: scheduling=reservation needs the reservation: set reservation=NAME "
            f"(or projects/PROJECT/reservations/NAME for a shared one; {VERTEX_RESERVATION_FORM} "
            "on Vertex AI)")
    return problems


def mixed_capacity_problems(step: str, p, target: str) -> list[str]:
    """Why ``chief_scheduling`` (an on-demand chief, Spot workers) cannot apply to ``p``."""
    if not p.chief_scheduling:
        return []
    if platform(target).managed:
        return [f"{step}: chief_scheduling {p.chief_scheduling} with scheduling {p.scheduling} "
                "cannot run on Vertex AI: a CustomJob has one scheduling strategy for all its "
                "machines; drop chief_scheduling or run the step on gke"]
    problems = []
    if p.scheduling != cat.SPOT:
        problems.append(f"{step}: chief_scheduling {p.chief_scheduling} applies to "
                        f"scheduling=spot only (Spot workers); this step's scheduling is "
                        f"{p.scheduling}")
    if p.replicas < 2 or p.uses_tpu:
        problems.append(f"{step}: chief_scheduling needs a multi-node GPU or CPU step (replicas "
                        f">= 2, no TPU): a chief and at least one worker")
    return problems


def runs_as_pipeline_step(p) -> bool:
    """Whether a Vertex step runs as a plain pipeline step (one machine, standard capacity).

    Such a step gets the machine Vertex AI Pipelines picks, capped at 96 vCPUs / 624 GB;
    other scheduling or several replicas need a CustomJob with an explicit machine type.
    """
    return p.replicas == 1 and p.scheduling == cat.STANDARD


def capacity_notes(profiles, target: str) -> list[str]:
    """Capacity requests ``target`` cannot honour on a single step, said out loud."""
    checks = []
    where = platform(target)
    if where.ignores(Unsupported.QUEUE):
        checks.append((lambda p: p.queue, where.why(Unsupported.QUEUE)))
    if where.ignores(Unsupported.STEP_EPHEMERAL_STORAGE):
        checks.append((lambda p: p.ephemeral_storage,
                       where.why(Unsupported.STEP_EPHEMERAL_STORAGE)))
    notes = []
    for applies, text in checks:
        steps = [step for step, profile in profiles.items() if applies(profile)]
        if steps:
            notes.append(f"{text}: {', '.join(steps)}")
    for step, p in profiles.items():
        if p.uses_gpu and p.accelerator in acc.ACCELERATORS:
            from gkeflow.pipelines.compute.units import cpu_cores, memory_bytes

            caveat = acc.zone_limit_note(p.accelerator, p.accelerator_count,
                                         cpu_cores(p.cpu), memory_bytes(p.memory) / acc.GIB)
            if caveat:
                notes.append(f"{step}: {caveat}")
    return notes


def apply_gke_capacity(task, p) -> None:
    """Selectors, tolerations and labels that place a single-pod GKE step on its capacity."""
    from kfp import kubernetes

    if p.scheduling == cat.SPOT:
        kubernetes.add_node_selector(task, GKE_SPOT_LABEL, "true")
        kubernetes.add_toleration(
            task, key=GKE_SPOT_LABEL, operator="Equal", value="true", effect="NoSchedule")
    elif p.scheduling == cat.FLEX_START:
        kubernetes.add_node_selector(task, GKE_FLEX_START_LABEL, "true")
        kubernetes.add_toleration(
            task, key=GKE_FLEX_START_LABEL, operator="Equal", value="true",
            effect="NoSchedule")
    elif p.scheduling == cat.RESERVATION:
        project, name = split_reservation(p.reservation)
        kubernetes.add_node_selector(task, GKE_RESERVATION_NAME_LABEL, name)
        kubernetes.add_node_selector(task, GKE_RESERVATION_AFFINITY_LABEL, "specific")
        if project:
            kubernetes.add_node_selector(task, GKE_RESERVATION_PROJECT_LABEL, project)
    if p.queue:
        kubernetes.add_pod_label(task, KUEUE_QUEUE_LABEL, p.queue)


def label_training_pod(task) -> None:
    """Give a single-pod GKE training step the labels `gkeflow monitoring apply`'s GPU
    duty-cycle alert selects by default (JobSet pods get the same in their template)."""
    from kfp import kubernetes

    from gkeflow.pipelines.settings.monitoring_config import GKE_POD_LABELS

    for key, value in GKE_POD_LABELS.items():
        kubernetes.add_pod_label(task, key, value)


def describe(p, target: str) -> tuple[str, str, str]:
    """(capacity, nodes x GPUs per node, total GPUs) of a step for ``gkeflow plan``."""
    capacity = {cat.STANDARD: "on-demand"}.get(p.scheduling, p.scheduling)
    if p.chief_scheduling:
        capacity += " (chief on-demand)"  # chief_scheduling is standard or empty
    if p.scheduling == cat.FLEX_START and p.max_wait:
        capacity += f" (wait {p.max_wait})"
    elif p.scheduling == cat.RESERVATION:
        capacity += f" {p.reservation}"
    nodes = f"{p.replicas} x {p.accelerator_count}"
    return capacity, nodes, str(p.replicas * p.accelerator_count)
