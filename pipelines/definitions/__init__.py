"""The pipeline definitions (training, sweep, prediction, fan-out preparation) and the
stages they share; each is built per target from the settings and the compute profiles."""
