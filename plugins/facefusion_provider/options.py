"""The one options model. It generates the worker's CLI flags, the DAG's Params schema and work.json's ``options``.

Field names follow FaceFusion's (``face_swapper_blend`` is ``--face-swapper-blend``). Adding an option is one edit here.
Each processor's own options are a class of their own (``FaceSwapperOptions``, ...), composed into ``Options`` and named
in ``PROCESSOR_OPTIONS``; its module in ``engine/processors/`` points at that class. They live here, not in the engine,
because the Airflow side builds its form and validates confs from them without numpy or onnxruntime.
"""

from __future__ import annotations

import argparse
import json
import re
import types
import typing
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from facefusion_provider.exceptions import InvalidOptionError

Processor = Literal[
    "face_swapper",
    "face_enhancer",
    "frame_enhancer",
    "frame_colorizer",
    "background_remover",
    "face_debugger",
    "expression_restorer",
    "face_editor",
    "age_modifier",
    "deep_swapper",
    "lip_syncer",
]
ExecutionProvider = Literal["tensorrt", "cuda", "cpu"]
FaceDetectorModel = Literal["retinaface_mnet", "yoloface_8n", "retinaface_10g", "scrfd_2.5g", "yunet_2023_mar", "many"]
FaceDetectorSize = Literal["160x160", "320x320", "480x480", "512x512", "640x640"]
FaceLandmarkerModel = Literal["face_mesh_468", "2dfan4", "peppa_wutz", "many"]
FaceSelectorMode = Literal["one", "many", "reference"]
FaceSelectorOrder = Literal[
    "left-right", "right-left", "top-bottom", "bottom-top", "small-large", "large-small", "best-worst", "worst-best"
]
FaceSelectorGender = Literal["female", "male"]
FaceSelectorRace = Literal["white", "black", "latino", "asian", "indian", "arabic"]  # FaceFusion's fairface classes
FaceSwapperModel = Literal[
    "classic",
    "inswapper_128",
    "inswapper_128_fp16",
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
    "hififace_unofficial_256",
]
FaceSwapperPixelBoost = Literal["128x128", "256x256", "384x384", "512x512", "768x768", "1024x1024"]
FaceMaskType = Literal["box", "occlusion", "area", "region"]
FaceMaskRegion = Literal[
    "skin",
    "left-eyebrow",
    "right-eyebrow",
    "left-eye",
    "right-eye",
    "glasses",
    "nose",
    "mouth",
    "upper-lip",
    "lower-lip",
]
FaceOccluderModel = Literal["xseg_1", "xseg_2", "xseg_3", "many"]
FaceParserModel = Literal["bisenet_resnet_34", "bisenet_resnet_18"]
FaceMaskArea = Literal["upper-face", "lower-face", "mouth"]
FaceEnhancerModel = Literal[
    "gfpgan_1.4",
    "gpen_bfr_256",
    "gpen_bfr_512",
    "codeformer",
    "restoreformer_plus_plus",
    "gfpgan_1.2",
    "gfpgan_1.3",
    "gpen_bfr_1024",
    "gpen_bfr_2048",
]
FrameEnhancerModel = Literal[
    "clear_reality_x4",
    "face_dat_x4",
    "nomos8k_sc_x4",
    "real_esrgan_x2",
    "real_esrgan_x2_fp16",
    "real_esrgan_x4",
    "real_esrgan_x4_fp16",
    "real_esrgan_x8",
    "real_esrgan_x8_fp16",
    "real_hatgan_x4",
    "real_web_photo_x4",
    "realistic_rescaler_x4",
    "remacri_x4",
    "siax_x4",
    "span_kendata_x4",
    "swin2_sr_x4",
    "tghq_face_x8",
    "ultra_sharp_x4",
    "ultra_sharp_2_x4",
]
FrameColorizerModel = Literal["ddcolor", "ddcolor_artistic", "deoldify", "deoldify_artistic", "deoldify_stable"]
FrameColorizerSize = Literal["192x192", "256x256", "384x384", "512x512"]
BackgroundRemoverModel = Literal[
    "ben_2",
    "birefnet_general",
    "birefnet_portrait",
    "corridor_key_1024",
    "corridor_key_2048",
    "isnet_general",
    "modnet",
    "ormbg",
    "rmbg_1.4",
    "rmbg_2.0",
    "silueta",
    "u2net_cloth",
    "u2net_general",
    "u2net_human",
    "u2netp",
]
FaceDebuggerItem = Literal[
    "bounding-box", "face-landmark-5", "face-landmark-5/68", "face-landmark-68", "face-landmark-68/5", "face-mask"
]
LivePortraitModel = Literal["live_portrait"]
ExpressionRestorerArea = Literal["upper-face", "lower-face"]
OutputVideoEncoder = Literal["libx264", "libx265", "libvpx-vp9", "h264_nvenc", "hevc_nvenc", "prores_ks"]
AgeModifierModel = Literal["fran", "styleganex_age"]
# FaceFusion's audio encoders that this build's FFmpeg (PyAV's) has: libvorbis is not among them.
OutputAudioEncoder = Literal["flac", "aac", "libmp3lame", "libopus", "pcm_s16le", "pcm_s32le"]
LipSyncerModel = Literal["wav2lip_96", "wav2lip_gan_96", "edtalk_256"]
VoiceExtractorModel = Literal["kim_vocal_1", "kim_vocal_2", "uvr_mdxnet"]
OutputVideoPreset = Literal[
    "ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow"
]

# FaceFusion 3.8.1's deep swapper models (DeepFaceLab / DeepFaceLive ``.dfm`` files, one person each), by their
# makers; the number ending each name is the model's crop size. A user's own model is ``custom/<name>``: the file
# ``custom/<name>.dfm`` in the models folder, as FaceFusion names the files in its ``.assets/models/custom``.
_DEEP_SWAPPER_MODELS_BY_MAKER: dict[str, str] = {
    "druuzil": """
        adam_levine_320 adrianne_palicki_384 agnetha_falskog_224 alan_ritchson_320 alicia_vikander_320
        amber_midthunder_320 andras_arato_384 andrew_tate_320 angelina_jolie_384 anne_hathaway_320
        anya_chalotra_320 arnold_schwarzenegger_320 benjamin_affleck_320 benjamin_stiller_384 bradley_pitt_224
        brie_larson_384 bruce_campbell_384 bryan_cranston_320 catherine_blanchett_352 christian_bale_320
        christopher_hemsworth_320 christoph_waltz_384 cillian_murphy_320 cobie_smulders_256 dwayne_johnson_384
        edward_norton_320 elisabeth_shue_320 elizabeth_olsen_384 elon_musk_320 emily_blunt_320 emma_stone_384
        emma_watson_320 erin_moriarty_384 eva_green_320 ewan_mcgregor_320 florence_pugh_320 freya_allan_320
        gary_cole_224 gigi_hadid_224 harrison_ford_384 hayden_christensen_320 heath_ledger_320 henry_cavill_448
        hugh_jackman_384 idris_elba_320 jack_nicholson_320 james_carrey_384 james_mcavoy_320 james_varney_320
        jason_momoa_320 jason_statham_320 jennifer_connelly_384 jimmy_donaldson_320 jordan_peterson_384
        karl_urban_224 kate_beckinsale_384 laurence_fishburne_384 lili_reinhart_320 luke_evans_384
        mads_mikkelsen_384 mary_winstead_320 margaret_qualley_384 melina_juergens_320 michael_fassbender_320
        michael_fox_320 millie_bobby_brown_320 morgan_freeman_320 patrick_stewart_224 rachel_weisz_384
        rebecca_ferguson_320 scarlett_johansson_320 shannen_doherty_384 seth_macfarlane_384 thomas_cruise_320
        thomas_hanks_384 william_murray_384 zoe_saldana_384
    """,
    "edel": """
        emma_roberts_224 ivanka_trump_224 lize_dzjabrailova_224 sidney_sweeney_224 winona_ryder_224
    """,
    "iperov": """
        alexandra_daddario_224 alexei_navalny_224 amber_heard_224 dilraba_dilmurat_224 elon_musk_224
        emilia_clarke_224 emma_watson_224 erin_moriarty_224 jackie_chan_224 james_carrey_224 jason_statham_320
        keanu_reeves_320 margot_robbie_224 natalie_dormer_224 nicolas_coppola_224 robert_downey_224
        rowan_atkinson_224 ryan_reynolds_224 scarlett_johansson_224 sylvester_stallone_224 thomas_cruise_224
        thomas_holland_224 vin_diesel_224 vladimir_putin_224
    """,
    "jen": """
        angelica_trae_288 ella_freya_224 emma_myers_320 evie_pickerill_224 kang_hyewon_320 maddie_mead_224
        nicole_turnbull_288
    """,
    "mats": """
        alica_schmidt_320 ashley_alexiss_224 billie_eilish_224 brie_larson_224 cara_delevingne_224
        carolin_kebekus_224 chelsea_clinton_224 claire_boucher_224 corinna_kopf_224 florence_pugh_224
        hillary_clinton_224 jenna_fischer_224 kim_jisoo_320 mica_suarez_320 shailene_woodley_224
        shraddha_kapoor_320 yu_jimin_352
    """,
    "rumateus": """
        alison_brie_224 amber_heard_224 angelina_jolie_224 aubrey_plaza_224 bridget_regan_224 cobie_smulders_224
        deborah_woll_224 dua_lipa_224 emma_stone_224 hailee_steinfeld_224 hilary_duff_224 jessica_alba_224
        jessica_biel_224 john_cena_224 kim_kardashian_224 kristen_bell_224 lucy_liu_224 margot_robbie_224
        megan_fox_224 meghan_markle_224 millie_bobby_brown_224 natalie_portman_224 nicki_minaj_224
        olivia_wilde_224 shay_mitchell_224 sophie_turner_224 taylor_swift_224
    """,
}
DEEP_SWAPPER_MODELS: tuple[str, ...] = tuple(
    f"{maker}/{name}" for maker, names in _DEEP_SWAPPER_MODELS_BY_MAKER.items() for name in names.split()
)
CUSTOM_DEEP_SWAPPER_PREFIX = "custom/"
CUSTOM_DEEP_SWAPPER_NAME = re.compile(r"custom/[A-Za-z0-9][A-Za-z0-9_.-]*")  # one file name: no folders, no ..
DEFAULT_DEEP_SWAPPER_MODEL = "iperov/elon_musk_224"  # FaceFusion's default

# Numbers are strict: "90" and true are refused, not read as 90 and 1. Every one is bounded, well inside int64.
Percent = Annotated[int, Field(strict=True, ge=0, le=100)]
Channel = Annotated[int, Field(strict=True, ge=0, le=255)]
Rgba = tuple[Channel, Channel, Channel, Channel]  # red, green, blue, alpha: FaceFusion's colour options
Slider = Annotated[float, Field(strict=True, ge=-1.0, le=1.0, allow_inf_nan=False)]  # the face editor's, -1..1
MAX_FRAME_NUMBER = 2**31 - 1  # about 2 years of video at 30 fps: any real frame index, far inside int64
DEFAULT_DETECTOR_INTERVAL = 8  # about a quarter of a second at 30 fps before a face coming into view is swapped
MAX_DETECTOR_INTERVAL = 60
MIN_OUTPUT_VIDEO_SCALE, MAX_OUTPUT_VIDEO_SCALE, OUTPUT_VIDEO_SCALE_STEP = 0.25, 8.0, 0.25  # FaceFusion's range
WEIGHT_STEP = 0.05  # FaceFusion's face_swapper_weight and face_enhancer_weight: 0 to 1 in steps of 0.05
MAX_SOURCES = 16  # source faces of one run: their identities are averaged; more only slow prepare down
MAX_AGE = 100  # FaceFusion's face_selector_age range: 0-100
MAX_REFERENCE_FACE_POSITION = 99

# The trigger form's sections (Params' ``section``): options without one are the everyday ones, shown open.
SECTION_FACES: dict[str, Any] = {"section": "Faces: detection and selection"}
SECTION_SWAP: dict[str, Any] = {"section": "Swap, masks and enhancer"}
SECTION_FRAMES: dict[str, Any] = {"section": "Frames and segments"}
SECTION_OUTPUT: dict[str, Any] = {"section": "Output video"}
SECTION_OUTPUT_IMAGE: dict[str, Any] = {"section": "Output image"}
SECTION_EXECUTION: dict[str, Any] = {"section": "Execution"}

# Options that cannot change a single output pixel: they stay out of the work id, so changing them reuses segments.
NON_PIXEL_OPTIONS: frozenset[str] = frozenset({"execution_providers", "execution_thread_count"})
# Options that change which faces are found in the target and where: with the target they name its analysis, which
# every run over that target reads whatever its source face.
ANALYSIS_OPTIONS: frozenset[str] = frozenset(
    {
        "face_detector_model",
        "face_detector_size",
        "face_detector_score",
        "face_landmarker_model",
        "face_selector_mode",
        "reference_frame_number",
        "reference_face_distance",
        "face_tracker_score",
        "face_detector_interval",
        "face_selector_order",
        "face_selector_gender",
        "face_selector_race",
        "face_selector_age_start",
        "face_selector_age_end",
        "reference_face_position",
        "trim_frame_start",
        "trim_frame_end",
        "segment_size",
    }
)
# Detectors FaceFusion runs at 640x640 only (many: its three detectors pooled).
DETECTORS_AT_640: frozenset[str] = frozenset({"yoloface_8n", "yunet_2023_mar", "many"})
# Each model swapper's own crop size (engine.models holds the rest of its facts): its pixel boost is a whole multiple.
SWAPPER_MODEL_SIZES: dict[str, int] = {
    "inswapper_128": 128,
    "inswapper_128_fp16": 128,
    **dict.fromkeys(("hyperswap_1a_256", "hyperswap_1b_256", "hyperswap_1c_256", "simswap_256"), 256),
    **dict.fromkeys(("ghost_1_256", "ghost_2_256", "ghost_3_256", "blendswap_256", "uniface_256"), 256),
    "simswap_unofficial_512": 512,
    "hififace_unofficial_256": 256,
}
DEFAULT_PIXEL_BOOST: FaceSwapperPixelBoost = "128x128"
# Former option names: refused with a message that names the new one (not silently mapped: the work id would differ).
RENAMED_OPTIONS: dict[str, str] = {"chunk_size": "segment_size"}


class _FacesOptions(BaseModel):
    """The chain, and how the faces it works on are found and chosen (the analysis every face processor shares)."""

    processors: list[Processor] = Field(
        default=["face_swapper"],
        description="What is done to each frame, in order: swap the face, sharpen it, upscale the whole frame, colour it, replace its background, draw what was found on each face, bring back the target's expression on the face, edit the face, make each face older or younger, put a DeepFaceLab model's person on it, move the mouth to the voice (an audio file among the sources). None: the video is only re-encoded or trimmed.",
    )
    face_detector_model: FaceDetectorModel = Field(
        json_schema_extra=SECTION_FACES,
        default="retinaface_mnet",
        description="The model that finds faces. The first one comes with the provider; the others are model files "
        "you install. many: retinaface_10g, scrfd_2.5g and yoloface_8n together, as FaceFusion's many.",
    )
    face_detector_size: FaceDetectorSize = Field(
        json_schema_extra=SECTION_FACES,
        default="640x640",
        description="How large each frame is scaled for finding faces: larger finds smaller faces, slower.",
    )
    face_detector_score: float = Field(
        json_schema_extra=SECTION_FACES,
        default=0.5,
        ge=0.0,
        le=1.0,
        strict=True,
        allow_inf_nan=False,
        description="How sure the finder must be that it sees a face: higher skips doubtful faces.",
    )
    face_landmarker_model: FaceLandmarkerModel = Field(
        json_schema_extra=SECTION_FACES,
        default="face_mesh_468",
        description="The model that places eyes, nose and mouth on each face. The first one comes with the provider. "
        "many: 2dfan4 and peppa_wutz, the points of the surer one, as FaceFusion's many.",
    )
    face_selector_mode: FaceSelectorMode = Field(
        default="one",
        description="Which faces in the video to replace: one (the first in Face selector order: the largest by default), many (all of them), reference (only the person shown in the reference frame).",
    )
    reference_frame_number: int = Field(
        json_schema_extra=SECTION_FACES,
        default=0,
        ge=0,
        le=MAX_FRAME_NUMBER,
        strict=True,
        description="Only with Face selector mode reference: the frame number that shows the person to replace.",
    )
    reference_face_distance: float = Field(
        json_schema_extra=SECTION_FACES,
        default=0.6,
        ge=0.0,
        le=2.0,
        strict=True,
        allow_inf_nan=False,
        description="Only with Face selector mode reference: how different a face may look from the reference person and still be replaced.",
    )
    face_tracker_score: float = Field(
        json_schema_extra=SECTION_FACES,
        default=0.0,
        ge=0.0,
        le=0.5,
        strict=True,
        allow_inf_nan=False,
        description="Follow each face from frame to frame when its box overlaps (intersection over union) by more "
        "than this: a person keeps one identity, and a face the finder misses for a few frames is still replaced. "
        "0 turns tracking off.",
    )
    face_detector_interval: int = Field(
        json_schema_extra=SECTION_FACES,
        default=DEFAULT_DETECTOR_INTERVAL,
        ge=1,
        le=MAX_DETECTOR_INTERVAL,
        strict=True,
        description="Where the face mesh places the faces (the classic swapper, the area mask): look for faces at "
        "least every this many frames, and between, let each face's mesh follow it to the next frame. A frame where "
        "the mesh loses a face, or with no face to follow, is searched at once; a further face coming into view is "
        "found at the next search. Each segment starts with a search. 1 searches every frame, as FaceFusion does; so "
        "does the face tracker.",
    )

    @model_validator(mode="after")
    def _detector_size_of_the_model(self) -> _FacesOptions:
        if self.face_detector_model in DETECTORS_AT_640 and self.face_detector_size != "640x640":
            raise ValueError(
                f"face_detector_size {self.face_detector_size} does not fit face_detector_model "
                f"{self.face_detector_model}, which takes 640x640 only"
            )
        return self


class _FaceSelectorOptions(BaseModel):
    """Which of the faces found are chosen, in what order (FaceFusion's face selector): the face classifier (fairface)
    runs only where a gender, race or age filter is set."""

    face_selector_order: FaceSelectorOrder = Field(
        json_schema_extra=SECTION_FACES,
        default="large-small",
        description="The order of the faces found in a frame: by their left edge, their top edge, their size or the "
        "finder's score. Face selector mode one replaces the first face in this order, reference takes the "
        "reference face from the reference frame's faces in this order, many replaces them in this order.",
    )
    face_selector_gender: FaceSelectorGender | None = Field(
        json_schema_extra=SECTION_FACES,
        default=None,
        description="Only faces the face classifier (fairface, a model file you install) takes for this gender "
        "(empty: any). In reference mode it chooses among the reference frame's faces.",
    )
    face_selector_race: FaceSelectorRace | None = Field(
        json_schema_extra=SECTION_FACES,
        default=None,
        description="Only faces the face classifier (fairface, a model file you install) takes for this race "
        "(empty: any). In reference mode it chooses among the reference frame's faces.",
    )
    face_selector_age_start: int | None = Field(
        json_schema_extra=SECTION_FACES,
        default=None,
        ge=0,
        le=MAX_AGE,
        strict=True,
        description="Only faces whose age class (fairface's: 0-2, 3-9, 10-19, ... 70-100) reaches at least this age "
        "(empty: 0).",
    )
    face_selector_age_end: int | None = Field(
        json_schema_extra=SECTION_FACES,
        default=None,
        ge=0,
        le=MAX_AGE,
        strict=True,
        description="Only faces whose age class starts below this age (empty: 100).",
    )
    reference_face_position: int = Field(
        json_schema_extra=SECTION_FACES,
        default=0,
        ge=0,
        le=MAX_REFERENCE_FACE_POSITION,
        strict=True,
        description="Only with Face selector mode reference: which of the reference frame's faces, counted from 0 "
        "in Face selector order (after the filters), is the person to replace; past the last: the last.",
    )

    @model_validator(mode="after")
    def _ages_in_order(self) -> _FaceSelectorOptions:
        start, end = self.face_selector_age_start, self.face_selector_age_end
        if start is not None and end is not None and end <= start:
            raise ValueError(
                f"face_selector_age_end ({end}) must be greater than face_selector_age_start ({start}): the ages "
                "from start up to end are kept"
            )
        return self


class FaceSwapperOptions(BaseModel):
    """The face swapper's own options (``engine/processors/face_swapper.py``)."""

    face_swapper_model: FaceSwapperModel = Field(
        default="classic",
        description="The model that draws the new face. classic comes with the provider; the others are model files you install.",
    )
    face_swapper_pixel_boost: FaceSwapperPixelBoost = Field(
        json_schema_extra=SECTION_SWAP,
        default=DEFAULT_PIXEL_BOOST,
        description="Detail of the swapped face: higher is sharper on large faces, and slower. A whole multiple of "
        "the swapper's own size (128 for inswapper, 512 for simswap_unofficial_512, 256 for the others); 128x128 "
        "means the swapper's own size.",
    )
    face_swapper_blend: Percent = Field(
        default=85, description="How much of the new face replaces the original: 100 is all of it."
    )
    face_swapper_color_correction: bool = Field(
        json_schema_extra=SECTION_SWAP,
        default=True,
        description="The new face takes the skin tone and light of the face it replaces.",
    )
    face_swapper_weight: float = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.5,
        ge=0.0,
        le=1.0,
        multiple_of=WEIGHT_STEP,
        strict=True,
        allow_inf_nan=False,
        description="How strongly the source's identity is put on, in steps of 0.05: 0.5 is the source as it is, "
        "lower keeps some of the replaced face's identity, higher pushes further from it. As in FaceFusion, for the "
        "swappers that take an identity vector (classic, blendswap and uniface ignore it).",
    )

    @model_validator(mode="before")
    @classmethod
    def _pixel_boost_of_the_model(cls, data: Any) -> Any:
        """The default (or no) pixel boost is the swapper's own size, as in FaceFusion: the trigger form always sends it."""
        if isinstance(data, dict) and data.get("face_swapper_pixel_boost") in (None, DEFAULT_PIXEL_BOOST):
            size = SWAPPER_MODEL_SIZES.get(str(data.get("face_swapper_model")))
            if size is not None and size > 128:
                return {**data, "face_swapper_pixel_boost": f"{size}x{size}"}
        return data

    @model_validator(mode="after")
    def _pixel_boost_fits_the_model(self) -> FaceSwapperOptions:
        size = SWAPPER_MODEL_SIZES.get(self.face_swapper_model)
        boost = int(self.face_swapper_pixel_boost.partition("x")[0])
        if size is not None and (boost < size or boost % size):
            allowed = ", ".join(f"{n}x{n}" for n in (128, 256, 384, 512, 768, 1024) if n >= size and n % size == 0)
            raise ValueError(
                f"face_swapper_pixel_boost {self.face_swapper_pixel_boost} does not fit face_swapper_model "
                f"{self.face_swapper_model} (its size is {size}x{size}): choose one of {allowed}"
            )
        return self


class _FaceMaskOptions(BaseModel):
    """Where a swapped face may cover the frame (FaceFusion's face masker: options of no one processor)."""

    face_mask_types: list[FaceMaskType] = Field(
        json_schema_extra=SECTION_SWAP,
        default=["box"],
        description="Which part of the picture the new face may cover: box (the whole face square, softened at its "
        "edges), occlusion (not where something covers the face), area and region (only the parts of the face chosen "
        "below). Several: only where they all overlap.",
    )
    face_mask_areas: list[FaceMaskArea] = Field(
        json_schema_extra=SECTION_SWAP,
        default=["upper-face", "lower-face", "mouth"],
        description="Only with the area mask: the parts of the face the new face covers.",
    )
    face_mask_regions: list[FaceMaskRegion] = Field(
        json_schema_extra=SECTION_SWAP,
        default=list(get_args(FaceMaskRegion)),
        description="Only with the region mask: the parts of the face (found by the face parser) the new face covers.",
    )
    face_occluder_model: FaceOccluderModel = Field(
        json_schema_extra=SECTION_SWAP,
        default="xseg_1",
        description="Only with the occlusion mask: the model that finds what covers the face (hands, hair, "
        "glasses), where the original stays. A model file you install. many: all three, covered where any of "
        "them says so, as FaceFusion's many.",
    )
    face_parser_model: FaceParserModel = Field(
        json_schema_extra=SECTION_SWAP,
        default="bisenet_resnet_34",
        description="Only with the region mask: the model that finds the parts of the face. A model file you install.",
    )
    face_mask_blur: float = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.3,
        ge=0.0,
        le=1.0,
        strict=True,
        allow_inf_nan=False,
        description="How soft the edge of the new face is: 0 is a hard edge.",
    )
    face_mask_padding: tuple[Percent, Percent, Percent, Percent] = Field(
        json_schema_extra=SECTION_SWAP,
        default=(0, 0, 0, 0),
        description="Shrink the box mask from each side, in percent of the face: top, right, bottom, left.",
    )


class FaceEnhancerOptions(BaseModel):
    """The face enhancer's own options (``engine/processors/face_enhancer.py``)."""

    face_enhancer_model: FaceEnhancerModel = Field(
        json_schema_extra=SECTION_SWAP,
        default="gfpgan_1.4",
        description="Only with the face enhancer processor: the model that sharpens faces.",
    )
    face_enhancer_blend: Percent = Field(
        json_schema_extra=SECTION_SWAP,
        default=80,
        description="Only with the face enhancer processor: how much of the sharpened face is kept: 100 is all of it.",
    )
    face_enhancer_weight: float = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.5,
        ge=0.0,
        le=1.0,
        multiple_of=WEIGHT_STEP,
        strict=True,
        allow_inf_nan=False,
        description="Only with the face enhancer processor and codeformer (the other enhancers ignore it): its "
        "fidelity weight, in steps of 0.05; lower restores more freely, higher keeps closer to the face as it is.",
    )


class FrameEnhancerOptions(BaseModel):
    """The frame enhancer's own options (``engine/processors/frame_enhancer.py``)."""

    frame_enhancer_model: FrameEnhancerModel = Field(
        json_schema_extra=SECTION_SWAP,
        default="span_kendata_x4",
        description="Only with the frame enhancer processor: the model that upscales the whole frame, by the factor "
        "in its name (x2, x4, x8). A model file you install. Neither side of the output may pass 8192 pixels.",
    )
    frame_enhancer_blend: Percent = Field(
        json_schema_extra=SECTION_SWAP,
        default=80,
        description="Only with the frame enhancer processor: how much of the upscaled frame is kept over the "
        "original simply resized: 100 is all of it.",
    )


class FrameColorizerOptions(BaseModel):
    """The frame colorizer's own options (``engine/processors/frame_colorizer.py``)."""

    frame_colorizer_model: FrameColorizerModel = Field(
        json_schema_extra=SECTION_SWAP,
        default="ddcolor",
        description="Only with the frame colorizer processor: the model that colours the whole frame, which it "
        "sees in grey. A model file you install.",
    )
    frame_colorizer_size: FrameColorizerSize = Field(
        json_schema_extra=SECTION_SWAP,
        default="256x256",
        description="Only with the frame colorizer processor: the size the model sees the frame at; its colours are "
        "scaled back up over the frame's own lightness.",
    )
    frame_colorizer_blend: Percent = Field(
        json_schema_extra=SECTION_SWAP,
        default=100,
        description="Only with the frame colorizer processor: how much of the coloured frame is kept over the "
        "original: 100 is all of it.",
    )


class BackgroundRemoverOptions(BaseModel):
    """The background remover's own options (``engine/processors/background_remover.py``)."""

    background_remover_model: BackgroundRemoverModel = Field(
        json_schema_extra=SECTION_SWAP,
        default="modnet",
        description="Only with the background remover processor: the model that tells the foreground from the "
        "background. A model file you install.",
    )
    background_remover_fill_color: Rgba = Field(
        json_schema_extra=SECTION_SWAP,
        default=(0, 0, 0, 255),
        description="Only with the background remover processor: the colour the background becomes, red green blue "
        "alpha (0-255 each; in conf, as in FaceFusion, three values are opaque). An alpha below 255 makes the output "
        "transparent where the background was (its alpha is the model's matte, as FaceFusion writes it; the fill's "
        "alpha mixes the fill colour in): it needs a .mov output with output_video_encoder prores_ks (ProRes 4444) "
        "or a .webm with libvpx-vp9 (VP9 with alpha); for an image target, a .png or .webp output.",
    )
    background_remover_despill_color: Rgba = Field(
        json_schema_extra=SECTION_SWAP,
        default=(0, 0, 0, 0),
        description="Only with the background remover processor: a screen colour to take out of the picture (a "
        "green screen's spill), red green blue and strength (0 is none).",
    )

    @field_validator("background_remover_fill_color", "background_remover_despill_color", mode="before")
    @classmethod
    def _facefusion_colour(cls, value: Any) -> Any:
        """FaceFusion's shorter forms: one value is grey, two are (a, b, a), three are opaque (alpha 255)."""
        if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= 3:
            return value
        channels = list(value)
        rgb = {1: channels * 3, 2: [*channels, channels[0]], 3: channels}[len(channels)]
        return (*rgb, 255)


class FaceDebuggerOptions(BaseModel):
    """The face debugger's own options (``engine/processors/face_debugger.py``)."""

    face_debugger_items: list[FaceDebuggerItem] = Field(
        json_schema_extra=SECTION_SWAP,
        default=["face-landmark-5/68", "face-mask"],
        description="Only with the face debugger processor: what is drawn on each face found: its box, its five "
        "points as detected (5) or read off the 68 (5/68), its 68 points (68, or 68/5: as placed from the five), "
        "the outline of its paste-back mask.",
    )


class ExpressionRestorerOptions(BaseModel):
    """The expression restorer's own options (``engine/processors/expression_restorer.py``)."""

    expression_restorer_model: LivePortraitModel = Field(
        json_schema_extra=SECTION_SWAP,
        default="live_portrait",
        description="Only with the expression restorer processor: the LivePortrait model files (feature extractor, "
        "motion extractor, generator) that redraw the face with the target's expression. Model files you install.",
    )
    expression_restorer_factor: Percent = Field(
        json_schema_extra=SECTION_SWAP,
        default=80,
        description="Only with the expression restorer processor: how much of the target's own expression comes "
        "back on the face (0 keeps the face's expression, 100 a little more than the target's).",
    )
    expression_restorer_areas: list[ExpressionRestorerArea] = Field(
        json_schema_extra=SECTION_SWAP,
        default=["upper-face", "lower-face"],
        description="Only with the expression restorer processor: where the target's expression comes back: the "
        "eyes and brows (upper-face), the mouth and chin (lower-face).",
    )

    @field_validator("expression_restorer_areas")
    @classmethod
    def _some_areas_once_each(cls, value: list[str]) -> list[str]:
        if not value or len(set(value)) != len(value):
            raise ValueError("name at least one area, each once")
        return value


class FaceEditorOptions(BaseModel):
    """The face editor's own options (``engine/processors/face_editor.py``): FaceFusion's sliders, -1 to 1, 0 leaves
    that part as it is."""

    face_editor_model: LivePortraitModel = Field(
        json_schema_extra=SECTION_SWAP,
        default="live_portrait",
        description="Only with the face editor processor: the LivePortrait model files (feature and motion "
        "extractors, generator, stitcher, eye and lip retargeters) that redraw the edited face. Model files you "
        "install.",
    )
    face_editor_eyebrow_direction: Slider = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.0,
        description="Only with the face editor: moves the brows, one way (-1) or the other (1); 0 leaves them.",
    )
    face_editor_eye_gaze_horizontal: Slider = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.0,
        description="Only with the face editor: turns the eyes' gaze sideways, either way.",
    )
    face_editor_eye_gaze_vertical: Slider = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.0,
        description="Only with the face editor: turns the eyes' gaze up or down, either way.",
    )
    face_editor_eye_open_ratio: Slider = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.0,
        description="Only with the face editor: closes (-1) or opens (1) the eyes; reads the eyes' landmarks.",
    )
    face_editor_lip_open_ratio: Slider = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.0,
        description="Only with the face editor: closes (-1) or opens (1) the lips; reads the lips' landmarks.",
    )
    face_editor_mouth_grim: Slider = Field(
        json_schema_extra=SECTION_SWAP, default=0.0, description="Only with the face editor: a grimace, either way."
    )
    face_editor_mouth_pout: Slider = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.0,
        description="Only with the face editor: pouts the lips, either way.",
    )
    face_editor_mouth_purse: Slider = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.0,
        description="Only with the face editor: purses the lips, either way.",
    )
    face_editor_mouth_smile: Slider = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.0,
        description="Only with the face editor: a smile (1) or its opposite (-1).",
    )
    face_editor_mouth_position_horizontal: Slider = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.0,
        description="Only with the face editor: moves the mouth sideways, either way.",
    )
    face_editor_mouth_position_vertical: Slider = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.0,
        description="Only with the face editor: moves the mouth up or down, either way.",
    )
    face_editor_head_pitch: Slider = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.0,
        description="Only with the face editor: tilts the head up or down, up to 20 degrees either way.",
    )
    face_editor_head_yaw: Slider = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.0,
        description="Only with the face editor: turns the head sideways, up to 60 degrees either way.",
    )
    face_editor_head_roll: Slider = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.0,
        description="Only with the face editor: leans the head sideways, up to 15 degrees either way.",
    )


class AgeModifierOptions(BaseModel):
    """The age modifier's own options (``engine/processors/age_modifier.py``)."""

    age_modifier_model: AgeModifierModel = Field(
        json_schema_extra=SECTION_SWAP,
        default="fran",
        description="Only with the age modifier processor: the model that makes each face older or younger. A model "
        "file you install; fran also reads each face's age with the face classifier (fairface, a model file you "
        "install).",
    )
    age_modifier_direction: int = Field(
        json_schema_extra=SECTION_SWAP,
        default=0,
        ge=-100,
        le=100,
        strict=True,
        description="Only with the age modifier processor: how much older (up to 100) or younger (down to -100) each "
        "face is made; 0 leaves its age.",
    )


class DeepSwapperOptions(BaseModel):
    """The deep swapper's own options (``engine/processors/deep_swapper.py``)."""

    deep_swapper_model: str = Field(
        json_schema_extra={**SECTION_SWAP, "examples": list(DEEP_SWAPPER_MODELS)},
        default=DEFAULT_DEEP_SWAPPER_MODEL,
        description="Only with the deep swapper processor: the DeepFaceLab model whose one person replaces each face: "
        "one of FaceFusion's 157 (maker/name_size, e.g. iperov/elon_musk_224; the README lists them), a model file "
        "you install, or custom/<name> for your own <name>.dfm in the models folder's custom folder.",
    )
    deep_swapper_morph: Percent = Field(
        json_schema_extra=SECTION_SWAP,
        default=100,
        description="Only with the deep swapper processor: how far the face is morphed into the model's person, for "
        "models that can morph (100 is all the way); others ignore it.",
    )

    @field_validator("deep_swapper_model")
    @classmethod
    def _known_or_custom(cls, value: str) -> str:
        if value in DEEP_SWAPPER_MODELS or CUSTOM_DEEP_SWAPPER_NAME.fullmatch(value):
            return value
        raise ValueError(
            f"not one of FaceFusion's deep swapper models (maker/name_size, e.g. {DEFAULT_DEEP_SWAPPER_MODEL}) nor "
            "custom/<name> naming your own <name>.dfm in the models folder's custom folder (letters, digits, _ . -)"
        )


class LipSyncerOptions(BaseModel):
    """The lip syncer's own options (``engine/processors/lip_syncer.py``): the voice is an audio file among the sources."""

    lip_syncer_model: LipSyncerModel = Field(
        json_schema_extra=SECTION_SWAP,
        default="wav2lip_gan_96",
        description="Only with the lip syncer processor: the model that moves each face's mouth to the voice (an "
        "audio file among the sources). A model file you install.",
    )
    lip_syncer_weight: float = Field(
        json_schema_extra=SECTION_SWAP,
        default=0.5,
        ge=0.0,
        le=1.0,
        multiple_of=0.05,
        strict=True,
        allow_inf_nan=False,
        description="Only with the lip syncer processor: how strongly the voice moves the mouth (0-1, in steps of "
        "0.05): wav2lip scales the voice by twice this, edtalk takes it as its weight.",
    )


class _VoiceExtractorOptions(BaseModel):
    """FaceFusion's voice extractor (options of no one processor; the lip syncer's voice goes through it)."""

    voice_extractor_model: VoiceExtractorModel = Field(
        json_schema_extra=SECTION_SWAP,
        default="kim_vocal_2",
        description="Only with the lip syncer processor: the model that separates the voice from music and noise "
        "before the mouth follows it (once per work). A model file you install.",
    )


class _RunOptions(BaseModel):
    """Frames, segments, the output video and where the models run."""

    trim_frame_start: int | None = Field(
        json_schema_extra=SECTION_FRAMES,
        default=None,
        ge=0,
        le=MAX_FRAME_NUMBER - 1,
        strict=True,
        description="Start the output at this frame number (empty: the first frame).",
    )
    trim_frame_end: int | None = Field(
        json_schema_extra=SECTION_FRAMES,
        default=None,
        ge=1,
        le=MAX_FRAME_NUMBER,
        strict=True,
        description="End the output before this frame number (empty: to the last frame).",
    )
    segment_size: int | None = Field(
        json_schema_extra=SECTION_FRAMES,
        default=None,
        ge=1,
        le=100_000,
        strict=True,
        description="Frames saved together as one segment (empty: 256); a last part shorter than a quarter of a "
        "segment joins the segment before it (300 frames make one segment of 300). An interrupted run starts again "
        "at the first segment not saved.",
    )
    output_video_encoder: OutputVideoEncoder = Field(
        json_schema_extra=SECTION_OUTPUT,
        default="libx264",
        description="The codec of the finished video. A transparent background needs prores_ks (ProRes 4444, "
        ".mov only) or libvpx-vp9 (in a .webm). ProRes's profile sets its quality: output_video_quality and "
        "output_video_preset do not apply to it.",
    )
    output_video_preset: OutputVideoPreset = Field(
        json_schema_extra=SECTION_OUTPUT,
        default="veryfast",
        description="Faster presets make larger files at the same quality.",
    )
    output_video_quality: Percent = Field(
        json_schema_extra=SECTION_OUTPUT,
        default=80,
        description="Picture quality of the finished video: 100 is lossless where the codec allows it.",
    )
    execution_providers: list[ExecutionProvider] = Field(
        json_schema_extra=SECTION_EXECUTION,
        default=["cpu"],
        description="Where the models run, tried in order (GPU first); the first one available is used.",
    )
    execution_thread_count: int = Field(
        json_schema_extra=SECTION_EXECUTION,
        default=4,
        ge=1,
        le=128,
        strict=True,
        description="On a CPU: threads per model. On a GPU: frames worked on side by side.",
    )


class OutputOptions(BaseModel):
    """The output video's size and rate (FaceFusion's output options of the same names)."""

    output_video_scale: float = Field(
        json_schema_extra=SECTION_OUTPUT,
        default=1.0,
        ge=MIN_OUTPUT_VIDEO_SCALE,
        le=MAX_OUTPUT_VIDEO_SCALE,
        multiple_of=OUTPUT_VIDEO_SCALE_STEP,
        strict=True,
        allow_inf_nan=False,
        description="Scale the finished frames by this factor (in steps of 0.25), after the processors: with the "
        "frame enhancer the two multiply (x4 and 0.5 give twice the target's size). Sides are rounded to even "
        "numbers; neither side may pass 8192 pixels.",
    )
    output_video_fps: float | None = Field(
        json_schema_extra=SECTION_OUTPUT,
        default=None,
        ge=1.0,
        le=60.0,
        strict=True,
        allow_inf_nan=False,
        description="Frames per second of the finished video (empty: the target's). Only the target's own rate is "
        "accepted so far: another rate would drop or repeat frames, which segments cut on the target's frames do "
        "not yet do frame-exact.",
    )


class ImageOutputOptions(BaseModel):
    """The output image's quality and size, for a target that is an image (FaceFusion's output options of the same
    names); a video target's output ignores them, as an image target's ignores the output video options."""

    output_image_quality: Percent = Field(
        json_schema_extra=SECTION_OUTPUT_IMAGE,
        default=80,
        description="Only for an image target: the output image's quality. JPEG: its quality (FaceFusion's "
        "qscale 31 - 0.31 x quality); WebP: its quality; PNG (lossless whatever the value): higher compresses less, "
        "faster.",
    )
    output_image_scale: float = Field(
        json_schema_extra=SECTION_OUTPUT_IMAGE,
        default=1.0,
        ge=MIN_OUTPUT_VIDEO_SCALE,
        le=MAX_OUTPUT_VIDEO_SCALE,
        multiple_of=OUTPUT_VIDEO_SCALE_STEP,
        strict=True,
        allow_inf_nan=False,
        description="Only for an image target: scale the finished image by this factor (in steps of 0.25), after "
        "the processors, as output_video_scale does a video's frames.",
    )


def frame_options(options: Options, *, still_image: bool) -> Options:
    """The options the output frames are made with: for an image target, ``output_image_scale`` is the scale the chain
    and the output size read (``output_video_scale`` is the video's)."""
    if not still_image:
        return options
    return options.model_copy(update={"output_video_scale": options.output_image_scale})


class OutputAudioOptions(BaseModel):
    """The output's sound (FaceFusion's output audio options of the same names): encoded once per work, where it is
    the voice (lip sync) or these options change the target's."""

    output_audio_encoder: OutputAudioEncoder | None = Field(
        json_schema_extra=SECTION_OUTPUT,
        default=None,
        description="The codec of the finished video's sound (empty: the target's sound copied as it is, or with lip "
        "sync the voice as aac). Given, the sound is encoded once with it; the output's container must hold it.",
    )
    output_audio_quality: Percent = Field(
        json_schema_extra=SECTION_OUTPUT,
        default=80,
        description="Sound quality where the sound is encoded: 100 is the best the codec gives (aac, mp3, opus; "
        "flac and PCM are lossless).",
    )
    output_audio_volume: Percent = Field(
        json_schema_extra=SECTION_OUTPUT,
        default=100,
        description="Loudness of the finished video's sound in percent: 0 leaves the sound out, below 100 the "
        "sound is encoded once, quieter.",
    )


# A processor's options: its own fields, one class each; ``engine.processors`` maps each name to its module.
PROCESSOR_OPTIONS: dict[str, type[BaseModel]] = {
    "face_swapper": FaceSwapperOptions,
    "face_enhancer": FaceEnhancerOptions,
    "frame_enhancer": FrameEnhancerOptions,
    "frame_colorizer": FrameColorizerOptions,
    "background_remover": BackgroundRemoverOptions,
    "face_debugger": FaceDebuggerOptions,
    "expression_restorer": ExpressionRestorerOptions,
    "face_editor": FaceEditorOptions,
    "age_modifier": AgeModifierOptions,
    "deep_swapper": DeepSwapperOptions,
    "lip_syncer": LipSyncerOptions,
}


# pydantic lists a model's fields from its last base to its first: the form, the flags and the README table show the
# groups in the order faces, swapper, masks, face enhancer, frame enhancer, run, output.
class Options(  # fields come in the reverse order of the bases: the form's sections follow them
    ImageOutputOptions,
    OutputAudioOptions,
    OutputOptions,
    _RunOptions,
    _VoiceExtractorOptions,
    LipSyncerOptions,
    DeepSwapperOptions,
    AgeModifierOptions,
    FaceEditorOptions,
    ExpressionRestorerOptions,
    FaceDebuggerOptions,
    BackgroundRemoverOptions,
    FrameColorizerOptions,
    FrameEnhancerOptions,
    FaceEnhancerOptions,
    _FaceMaskOptions,
    FaceSwapperOptions,
    _FaceSelectorOptions,
    _FacesOptions,
):
    """Everything a user may set for one swap run."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=True)

    @field_validator(
        "processors",
        "execution_providers",
        "face_mask_types",
        "face_mask_areas",
        "face_mask_regions",
        "face_debugger_items",
    )
    @classmethod
    def _no_repeats(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("each value may appear only once")
        return value

    @field_validator("execution_providers", "face_mask_types", "face_mask_areas", "face_mask_regions")
    @classmethod
    def _at_least_one(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("name at least one value")
        return value

    @model_validator(mode="after")
    def _trim_in_order(self) -> Options:
        start, end = self.trim_frame_start, self.trim_frame_end
        if start is not None and end is not None and end <= start:
            raise ValueError(
                f"trim_frame_end ({self.trim_frame_end}) must be greater than trim_frame_start ({self.trim_frame_start})"
            )
        return self

    @model_validator(mode="after")
    def _model_masks_need_a_model_swapper(self) -> Options:
        chosen = [kind for kind in ("occlusion", "region") if kind in self.face_mask_types]
        if chosen and "face_swapper" in self.processors and self.face_swapper_model == "classic":
            raise ValueError(
                f"face_mask_types: {' and '.join(chosen)} masks are drawn on a swapper model's face crop, which "
                "face_swapper_model classic has not: choose another face_swapper_model, or leave them out"
            )
        return self

    def transparent_background(self) -> bool:
        """Whether the output carries alpha: the background remover runs and its fill colour is not opaque."""
        return "background_remover" in self.processors and self.background_remover_fill_color[3] < 255

    def pixel_options(self) -> dict[str, Any]:
        """The options that change output pixels: they take part in the work id."""
        return {k: v for k, v in self.model_dump(mode="json").items() if k not in NON_PIXEL_OPTIONS}


def encodes_sound(options: Options) -> bool:
    """Whether the output's sound is encoded once per work (the voice of lip sync, or the target's sound with another
    encoder or volume) rather than the target's copied as it is; volume 0 leaves the sound out."""
    changed = options.output_audio_encoder is not None or options.output_audio_volume < 100
    return options.output_audio_volume > 0 and ("lip_syncer" in options.processors or changed)


def sound_encoder(options: Options) -> OutputAudioEncoder:
    """The encoder of an encoded sound: the one chosen, else aac."""
    return options.output_audio_encoder or "aac"


def parse_options(values: dict[str, Any], *, where: str = "options") -> Options:
    """Validate a dict of options; any problem becomes an ``InvalidOptionError`` that names the field and what is allowed."""
    try:
        return Options.model_validate(values)
    except ValidationError as error:
        raise InvalidOptionError(describe_validation_error(error, where=where)) from None


def renamed_option_message(name: str) -> str:
    return f"no longer an option: it is called {RENAMED_OPTIONS[name]} now; give {RENAMED_OPTIONS[name]} instead"


def _shortened(value: Any, limit: int = 80) -> str:
    """A value for a message, cut short: a conf may carry megabytes in one field."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def describe_validation_error(error: ValidationError, *, where: str) -> str:
    problems = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(root)"
        message = item["msg"]
        if item["type"] == "extra_forbidden" and field in RENAMED_OPTIONS:
            message = renamed_option_message(field)
        elif item["type"] == "extra_forbidden":
            message = f"unknown option; allowed: {', '.join(sorted(Options.model_fields))}"
        problems.append(f"{where}.{field}: {message} (got {_shortened(item.get('input'))})")
    return "invalid " + where + ": " + "; ".join(problems)


# --- the three faces of the model -------------------------------------------------------------------------------------


def options_json_schema() -> dict[str, Any]:
    """JSON schema of ``options``, used for the DAG's Params (the UI form) and for documentation."""
    schema = Options.model_json_schema()
    schema.pop("title", None)
    schema["additionalProperties"] = False
    return schema


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _unwrap_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (typing.Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _choices(annotation: Any) -> list[Any] | None:
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    return None


def add_option_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one CLI flag per option. Flags left out keep the model's default (argparse default is SUPPRESS)."""
    group = parser.add_argument_group("options")
    for name, field in Options.model_fields.items():
        annotation = _unwrap_optional(field.annotation)
        kwargs: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": field.description}
        origin = get_origin(annotation)
        if origin is list:
            (item,) = get_args(annotation)
            kwargs["nargs"] = "*"
            kwargs["metavar"] = _metavar(item)
        elif origin is tuple:
            kwargs["nargs"] = len(get_args(annotation))
            kwargs["type"] = int
            kwargs["metavar"] = "N"
        elif _choices(annotation) is not None:
            kwargs["metavar"] = _metavar(annotation)
        elif annotation is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            base = get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation
            kwargs["type"] = base
        # Choices are validated by the model so the error names the option and lists what is allowed in one style.
        group.add_argument(_flag(name), **kwargs)
    for name in RENAMED_OPTIONS:
        group.add_argument(
            _flag(name), action=_RenamedFlag, nargs="*", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )


class _RenamedFlag(argparse.Action):
    """A former option's flag: an error naming the new flag, not argparse's bare 'unrecognized arguments'."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        name = self.dest
        raise argparse.ArgumentError(self, f"{name}: {renamed_option_message(name)} ({_flag(RENAMED_OPTIONS[name])})")


def _metavar(annotation: Any) -> str:
    choices = _choices(annotation)
    return "{" + ",".join(str(c) for c in choices) + "}" if choices else "VALUE"


def options_from_namespace(namespace: argparse.Namespace) -> Options:
    values = {name: getattr(namespace, name) for name in Options.model_fields if hasattr(namespace, name)}
    return parse_options(values, where="options")


def options_to_argv(options: Options) -> list[str]:
    """The CLI flags that reproduce ``options`` (only the values that differ from the defaults)."""
    argv: list[str] = []
    defaults = Options()
    for name in Options.model_fields:
        value = getattr(options, name)
        if value == getattr(defaults, name) or value is None:
            continue
        if isinstance(value, bool):
            argv.append(_flag(name) if value else _flag("no_" + name))
            continue
        argv.append(_flag(name))
        if isinstance(value, (list, tuple)):
            argv.extend(str(v) for v in value)
        else:
            argv.append(str(value))
    return argv


def options_markdown_table() -> str:
    """The README's options table, generated so that it cannot drift from the model."""
    rows = ["| option (conf key / CLI flag) | default | allowed | what it does |", "| --- | --- | --- | --- |"]
    schema = options_json_schema()["properties"]
    for name, field in Options.model_fields.items():
        prop = schema[name]
        default = json.dumps(field.default)
        flags = f"`{_flag(name)}` / `{_flag('no_' + name)}`" if field.annotation is bool else f"`{_flag(name)}`"
        rows.append(f"| `{name}` / {flags} | `{default}` | {_allowed(prop)} | {field.description} |")
    return "\n".join(rows)


def _allowed(prop: dict[str, Any]) -> str:
    if "enum" in prop or "const" in prop:
        return ", ".join(f"`{v}`" for v in prop.get("enum", [prop.get("const")]))
    choice = next((p for p in prop.get("anyOf", []) if "enum" in p), None)
    if choice is not None:  # a choice that may be left empty
        return ", ".join(f"`{v}`" for v in choice["enum"]) + " or unset"
    if prop.get("type") == "array" and "enum" in prop.get("items", {}):
        return "list of " + ", ".join(f"`{v}`" for v in prop["items"]["enum"])
    if prop.get("type") == "array" and "prefixItems" in prop:
        first = prop["prefixItems"][0]
        return f"{len(prop['prefixItems'])} integers {first.get('minimum')}-{first.get('maximum')}"
    numeric = next((p for p in prop.get("anyOf", [prop]) if p.get("type") in ("integer", "number")), None)
    if numeric is not None:
        low, high = numeric.get("minimum"), numeric.get("maximum")
        bounds = f"{low}-{high}" if high is not None else f">= {low}" if low is not None else ""
        return f"{numeric['type']} {bounds}".strip() + (" or unset" if "anyOf" in prop else "")
    return str(prop.get("type", ""))


if __name__ == "__main__":
    print(options_markdown_table())
