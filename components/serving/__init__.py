"""Serving runtimes shared by registration and deployment: which container serves a model
trained with a given TensorFlow (:mod:`.runtimes`) and the TensorFlow Serving releases known
to exist (:mod:`.serving_tags`). Standard library only at import time."""
