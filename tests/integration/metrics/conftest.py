"""A real OTLP/HTTP endpoint per test (otlp_receiver.py) and the environment that points a process at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from otlp_receiver import OtlpReceiver


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()
