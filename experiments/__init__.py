"""Experiment binaries and the code they share."""

import os

# TensorFlow's C++ INFO and WARNING lines (one per TF session, thousands per
# run) before TensorFlow is first imported; errors still show.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
