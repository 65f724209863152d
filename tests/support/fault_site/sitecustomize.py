"""Loaded by every Python process whose PYTHONPATH starts here (``faults.fault_env``): installs the listed faults."""

import os
import sys

if os.environ.get("FACEFUSION_TEST_FAULTS"):
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import faults

    faults.install_when_imported()
