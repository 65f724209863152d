"""The media layer (PyAV, no Airflow): probe, frame-exact decode, encode, merge by remux, preview, synthetic media.

probe      exact frame count and per-frame timestamps from packets, rate, size, rotation, other streams
decode     frames [start, end) by seeking to the keyframe before start, identified by timestamp
encode     the final codec with settings that depend only on the options and the target
merge      segments' packets remuxed into the output with the original's audio and other streams, timestamps kept
preview    per-segment thumbnail pairs and the contact sheet built from them
images     JPEG/PNG in and out; synth: generated test, demo and benchmark media; readback: per-frame checks
"""

from __future__ import annotations
