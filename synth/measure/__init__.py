"""Measurements: nccl-tests output, the runtime model, calibration, doctor."""
