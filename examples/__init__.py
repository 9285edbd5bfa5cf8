"""Pipelines built from gkeflow's components next to components of your own."""
