"""Real containers for the kubernetes backend: rootful podman with runc, a Debian base made by debootstrap (no image
registry is reachable), and the CPU variant of the worker image built from images/worker/Dockerfile.

Everything the tests create in podman (images, pods, secrets, volumes) is removed afterwards. What stays between runs
on purpose: the debootstrap tarball under .cache/podman/ and the build's uv download cache (a podman cache mount).
"""

from __future__ import annotations

import logging
import os
import resource
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from system_binaries import find_binary, require_binary

logger = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[3]
SETUP_SCRIPT = Path(__file__).with_name("setup_podman.sh")
CACHE = ROOT / ".cache" / "podman"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = "python3"  # the Dockerfile installs the rest with apt
SYSTEM_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CGROUP_ATTEMPTS = 4
# The programs the container test runs, and their Debian packages (setup_podman.sh installs them as root).
CONTAINER_PROGRAMS = {"podman": "podman", "runc": "runc", "debootstrap": "debootstrap", "catatonit": "catatonit"}


@dataclass
class Podman:
    """The podman CLI with this session's containers.conf, and a record of what the tests created."""

    program: str
    env: dict[str, str]
    created_images: list[str] = field(default_factory=list)

    def run(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        for attempt in range(CGROUP_ATTEMPTS):
            result = subprocess.run(
                [self.program, *args], check=False, env=self.env, capture_output=True, text=True, timeout=timeout
            )
            # runc on this host's hybrid cgroups sometimes refuses a container while other tests load the machine.
            if "unable to apply cgroup configuration" not in result.stderr or attempt == CGROUP_ATTEMPTS - 1:
                break
            logger.warning("podman %s: runc refused the cgroup; again in 10 s", " ".join(args[:2]))
            time.sleep(10)
        logger.info("podman %s: %.1f s", " ".join(args[:2]), time.monotonic() - started)
        if check and result.returncode != 0:
            raise AssertionError(
                f"podman {' '.join(args[:3])} ... failed ({result.returncode}):\n{result.stderr[-4000:]}"
            )
        return result

    def image_ids(self) -> set[str]:
        return set(self.run("images", "--all", "--quiet", "--no-trunc").stdout.split())

    def volume_names(self) -> set[str]:
        return set(self.run("volume", "ls", "--quiet").stdout.split())


def _containers_conf(directory: Path) -> Path:
    """runc (crun refuses the hybrid cgroups here) and ulimits this kernel grants: podman's defaults are higher."""
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 65536)
    path = directory / "containers.conf"
    path.write_text(
        f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc=4096:4096"]\n[engine]\nruntime = "runc"\n'
    )
    return path


def _podman_or_skip(directory: Path) -> Podman:
    if os.geteuid() != 0:
        pytest.skip("the container test needs rootful podman: run it as root (CI does)")
    if not all(find_binary(program) for program in CONTAINER_PROGRAMS):
        # Installs what is missing where it can (Debian, a reachable mirror); what is still missing skips below.
        bash = require_binary("bash", package="bash")
        subprocess.run([bash, str(SETUP_SCRIPT)], check=False, timeout=900)
    programs = {program: require_binary(program, package=package) for program, package in CONTAINER_PROGRAMS.items()}
    env = {**os.environ, "CONTAINERS_CONF": str(_containers_conf(directory))}
    info = subprocess.run(
        [programs["podman"], "info"], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    if info.returncode != 0:
        pytest.skip(f"podman cannot run here: {info.stderr.strip()[-500:]}")
    return Podman(programs["podman"], env)


def _debootstrap_tarball() -> Path:
    """A minimal Debian 12 root filesystem with Python, made once and kept under .cache/podman/."""
    tarball = CACHE / f"debian-bookworm-minbase-{BASE_PACKAGES.replace(',', '-')}.tar"
    if tarball.exists():
        return tarball
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="debootstrap-", dir=CACHE) as scratch:
        rootfs = Path(scratch, "rootfs")
        subprocess.run(
            [
                require_binary("debootstrap", package="debootstrap"),
                "--variant=minbase",
                f"--include={BASE_PACKAGES}",
                "bookworm",
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            check=True,
            capture_output=True,
            timeout=900,
        )
        partial = tarball.with_suffix(".tar.part")
        tar = require_binary("tar", package="tar")
        subprocess.run([tar, "-C", str(rootfs), "-cf", str(partial), "."], check=True, timeout=300)
        partial.rename(tarball)
    return tarball


@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    tool = _podman_or_skip(tmp_path_factory.mktemp("podman"))
    before = tool.image_ids()
    yield tool
    leftover = tool.image_ids() - before
    if leftover:
        tool.run("rmi", "--force", *sorted(leftover), check=False)


@pytest.fixture(scope="session")
def worker_image(podman: Podman) -> str:
    """The CPU variant of the worker image, built on the debootstrap base; both are removed after the session."""
    tag = f"{uuid.uuid4().hex[:8]}"
    base = f"localhost/facefusion-itest-base:{tag}"
    image = f"localhost/facefusion-worker-itest:{tag}"
    podman.run("import", str(_debootstrap_tarball()), base, timeout=300)
    build = [
        "build",
        "--file",
        str(ROOT / "images" / "worker" / "Dockerfile"),
        "--build-arg",
        "VARIANT=cpu",
        "--build-arg",
        f"CPU_BASE={base}",
        "--tag",
        image,
    ]
    if SYSTEM_CA_BUNDLE.exists():  # a TLS-inspecting proxy's CA lives there; the image does not keep it
        build += ["--secret", f"id=ca_bundle,src={SYSTEM_CA_BUNDLE}"]
    podman.run(*build, str(ROOT), timeout=900)
    return image
