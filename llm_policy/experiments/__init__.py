"""RUN: end-to-end jobs as plain functions (a training run with its curve, plots)."""
