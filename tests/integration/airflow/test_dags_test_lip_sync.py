"""Lip sync through the whole DAG (``airflow dags test``, local workers) on its stand-ins, after the face swapper: a
carphone clip with a tone track, a voice of silence then loud noise among the sources beside the face. Every frame is
the target's (count and timestamps), the face swapped; the lower faces of frames whose voice window is silent are
left as the swapper made them, those of loud ones darkened; the output's sound is the voice (flac: sample for sample), cut to
the video's duration, not the target's tone."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
from demo_airflow import dags_test, run_succeeded, swap_conf
from people import carphone, carphone_face_contrast, person_file
from readback import frame_digests, rgb_frames
from standins import write_standins
from standins_lip_sync import write_lip_sync_standins
from voices import decoded_voice, write_voice

from facefusion_provider.engine.store import MODELS_CACHE_ENV, MODELS_DIR_ENV

pytestmark = pytest.mark.slow

FRAMES, SEGMENT = 18, 6
SILENT_SECONDS = 0.45
MARGIN = 0.1  # seconds: the voice's FFT resampling (FaceFusion's) rings a little before the noise's sharp onset


def test_the_dag_swaps_the_face_and_moves_its_mouth_to_the_voice(dags_test_env: dict[str, str], tmp_path: Path) -> None:
    models = write_lip_sync_standins(write_standins(tmp_path / "models"))
    face = person_file(tmp_path / "astronaut.png")
    voice = write_voice(tmp_path / "message.wav", SILENT_SECONDS, 2.0)
    target = carphone(tmp_path / "carphone.mp4", frames=FRAMES, audio_rate=48000)
    env = {**dags_test_env, MODELS_DIR_ENV: str(models), MODELS_CACHE_ENV: str(tmp_path / "model-cache")}
    output = tmp_path / "out" / "spoken.mp4"
    swapped_only = tmp_path / "out" / "swapped.mp4"
    options = {
        "processors": ["face_swapper", "lip_syncer"],
        "face_swapper_model": "inswapper_128",
        "face_swapper_blend": 100,
        "face_swapper_color_correction": False,
        "lip_syncer_model": "wav2lip_gan_96",
        "output_audio_encoder": "flac",
        "output_video_quality": 100,
        "segment_size": SEGMENT,
    }

    result = dags_test(swap_conf([str(face), str(voice)], str(target), str(output), options), env, timeout=600)
    assert run_succeeded(result), (result.stdout + result.stderr)[-6000:]
    reference = {**options, "processors": ["face_swapper"], "output_audio_encoder": None}
    result = dags_test(swap_conf([str(face)], str(target), str(swapped_only), reference), env, timeout=600)
    assert run_succeeded(result), (result.stdout + result.stderr)[-6000:]

    assert [(d.pts, d.seconds) for d in frame_digests(str(output))] == [
        (d.pts, d.seconds) for d in frame_digests(str(target))
    ]
    spoken, swapped = rgb_frames(output), rgb_frames(swapped_only)
    assert len(spoken) == FRAMES
    judged = {"silent": 0, "loud": 0}
    for number, (after, before) in enumerate(zip(spoken, swapped, strict=True)):
        assert carphone_face_contrast(before) < 3, "the face swapped (paint stand-in: one flat colour)"
        # how much darker the lower face is than the swapper left it (the paint face's edges, converted to RGB and
        # back once more behind the lip syncer, move both ways and average out)
        darker = float((before.astype(int) - after)[130:210, 140:220].mean())
        seconds = number * 1001 / 30000
        if seconds + 0.2 + MARGIN <= SILENT_SECONDS:  # the frame's 0.2 s window well inside the silence
            assert darker < 2.5, f"frame {number}: silent"
            judged["silent"] += 1
        if seconds - 0.025 >= SILENT_SECONDS:  # the window and its Fourier spread inside the noise
            assert darker > 15, f"frame {number}: loud"
            judged["loud"] += 1
    assert judged == {"silent": 5, "loud": 3}
    with av.open(str(output)) as container:
        (stream,) = container.streams.audio
        assert stream.codec_context.name == "flac"
    sound, video_seconds = decoded_voice(output), FRAMES * 1001 / 30000
    assert len(sound) == round(video_seconds * 48000)
    np.testing.assert_array_equal(sound, decoded_voice(voice)[: len(sound)])
