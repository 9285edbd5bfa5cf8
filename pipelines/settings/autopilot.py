"""GKE Autopilot as a platform of its own: Kubeflow Pipelines on an Autopilot cluster.

Everything that differs from GKE Standard is declared here; the layers that compile, plan
and price ask the declaration (:mod:`~gkeflow.pipelines.settings.platforms`):

- **Selected** by ``targets.gke.autopilot: true`` (``--target gke`` then compiles, plans and
  submits for Autopilot through the same Kubeflow Pipelines API), or named directly
  (``gkeflow plan --target autopilot``, ``gkeflow compile --target autopilot``).
- **Resource rules** (:data:`RULES`): Autopilot raises a pod's requests to its minimums and
  into its CPU:memory ratio, rounds CPU up, and rejects a pod above its maximums, so gkeflow
  applies the same rules before compiling: what ``plan`` shows is what Autopilot schedules
  and bills, and a pod Autopilot would reject is refused in one line first.
- **No node pools**: accelerators are chosen by node selectors alone (the GPU's
  ``cloud.google.com/gke-accelerator`` with the ``Accelerator`` compute class, a TPU's
  ``gke-tpu-accelerator`` and ``gke-tpu-topology``); Autopilot adds the tolerations itself.
  Spot, flex-start and reservations use the same selectors as on Standard.
- **Billed per pod**: a CPU pod by its requests at Autopilot's per-vCPU and per-GiB rates
  (the ``autopilot-vcpu`` / ``autopilot-ram-gib`` rows, every region a price refresh reads
  from the Kubernetes Engine SKUs), a GPU or TPU pod by Autopilot's accelerator rules
  (``autopilot-gpu`` / ``autopilot-tpu`` rows; missing, with the reason, where none was read),
  never as a Standard node.
"""

from __future__ import annotations

from gkeflow.pipelines.settings.platforms import Platform, PodRules, register

#: The general-purpose compute class's rules (clusters without bursting, which every
#: cluster version honours), from the page below.
RULES = PodRules(
    title="GKE Autopilot (general-purpose pods)",
    source="https://cloud.google.com/kubernetes-engine/docs/concepts/autopilot-resource-requests",
    read="2026-12-07",
    cpu_min=0.25,
    memory_min_gib=0.5,
    cpu_max=30.0,
    memory_max_gib=110.0,
    cpu_step=0.25,
    gib_per_cpu_min=1.0,
    gib_per_cpu_max=6.5,
    accelerator_selectors={"cloud.google.com/compute-class": "Accelerator"},
)

AUTOPILOT = register(Platform(
    "autopilot", "GKE Autopilot", kubernetes=True, training_engine="jobset",
    backend="gke", selected_by="autopilot", node_pools=False, pod_rules=RULES,
    pod_prices=True))
