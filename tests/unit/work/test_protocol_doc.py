"""docs/protocol.md names every file the code writes under a work root: each path ``WorkLayout``, ``RootLayout`` and
the output's helpers can produce appears in its artefact table, and every invariant it names is checked by the
simulation."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from facefusion_provider.work.layout import (
    PREPARE_CLAIM,
    AnalysisLayout,
    RootLayout,
    WorkLayout,
    merge_claim_name,
    output_marker_uri,
    preview_uri_of,
    segment_claim_name,
    segment_file_name,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "protocol.md"
SIMULATION = Path(__file__).with_name("simulation.py")


def _table_paths() -> list[str]:
    """The first cell of every row of the artefact table, as a pattern: ``{...}`` stands for any name."""
    text = DOC.read_text()
    table = text.split("## Artefacts", 1)[1].split("\n## ", 1)[0]
    cells = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| `")]
    return [cell for cell in cells]


def _matches(path: str, cells: list[str]) -> bool:
    for cell in cells:
        for quoted in re.findall(r"`([^`]+)`", cell):
            pattern = re.escape(quoted)
            pattern = re.sub(r"\\\{[^}]*\\\}", "[^/]+", pattern)  # {name}, {i:05d} ...
            if re.search(pattern + "$", path):
                return True
    return False


def test_every_path_the_layout_produces_is_in_the_protocol_table() -> None:
    work = WorkLayout.under("s3://bucket/root", "w1")
    root = RootLayout.of("s3://bucket/root")
    produced = {
        "work_json": work.work_json,
        "segment_marker": work.segment_marker(7),
        "segment_marker (incarnation 2)": work.segment_marker(7, 2),
        "retired_marker": work.retired_marker(7, 1),
        "segment_file": work.segment_file(segment_file_name(7, "writer1")),
        "frame_preview": work.frame_preview(1234),
        "claim (segment)": work.claim(segment_claim_name(7), 2),
        "claim (prepare)": work.claim(PREPARE_CLAIM, 1),
        "claim (merge)": work.claim(merge_claim_name("facefusion_swap.manual-1.abc"), 1),
        "run_lease": work.run_lease("facefusion_swap.manual-1.abc"),
        "sound_file": work.sound_file,
        "deleting": work.deleting,
        "voice": work.voice_file,
        "encoded sound": work.encoded_sound(".m4a"),
        "refusal": work.refusal("gpu-node-1-42"),
        "worker": root.worker("gpu-node-1-42"),
        "signal": root.signal,
        "clock_probe": root.clock_probe("gpu-node-1-42"),
        "analysis": AnalysisLayout.under("s3://bucket/root", "a1").segment_faces(3),
        "output marker": output_marker_uri("s3://out/clip.mp4"),
        "preview": preview_uri_of("s3://out/clip.mp4"),
    }
    cells = _table_paths()
    missing = {name: path for name, path in produced.items() if not _matches(path, cells)}
    assert not missing, f"docs/protocol.md's artefact table does not name: {missing}"
    # A new path in the layout must be added above (and to the document).
    members = {name for name, _ in inspect.getmembers(WorkLayout) if not name.startswith("_")}
    members |= {name for name, _ in inspect.getmembers(RootLayout) if not name.startswith("_")}
    known = {
        "work_json",
        "segment_marker",
        "retired_marker",
        "segment_file",
        "frame_preview",
        "claim",
        "run_lease",
        "sound_file",
        "voice_file",
        "encoded_sound",
    }
    known |= {
        "deleting",
        "refusal",
        "clock_probe",
        "worker",
        "signal",
        "under",
        "of",
        "work_id",
        "work_uri",
        "root_uri",
    }
    folders = {"segments_dir", "claims_dir", "runs_dir", "refusals_dir", "works_dir", "workers_dir"}
    assert members - known - folders == set(), "a new path in the layout: name it in docs/protocol.md and here"


def test_every_invariant_the_document_names_is_checked_by_the_simulation() -> None:
    named = set(re.findall(r"`(I\d-[a-z-]+)`", DOC.read_text()))
    assert len(named) >= 5
    simulated = SIMULATION.read_text() + Path(__file__).with_name("test_simulation.py").read_text()
    unchecked = {name for name in named if name not in simulated}
    assert not unchecked, f"invariants the simulation does not check: {unchecked}"
