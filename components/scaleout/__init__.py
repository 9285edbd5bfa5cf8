"""Scale-out training: one training run over several machines (Vertex AI CustomJob worker
pools, a GKE JobSet, or worker processes on loopback), all built on the same TF_CONFIG."""
