"""The trigger form of ``facefusion_swap``: one typed ``Param`` per option, generated from the options model.

Each option becomes its own field: title, description, type, a dropdown for an enum, a multi-select for a list of
choices, minimum and maximum, default. The everyday options sit in the form's open first section; the rest are
grouped by their ``section`` into sections the form shows collapsed. The conf these fields make is flat
(``{"source_uris": [...], "target_uri": ..., "face_swapper_blend": 90}``): the canonical shape. The older shape with
the options nested under ``"options"`` is accepted too (``validate`` merges both).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param

from facefusion_provider.job.inputs import EMPTY_LIST_OPTIONS
from facefusion_provider.options import Options, options_json_schema

_ACRONYMS = {"uris": "URIs", "uri": "URI"}


def swap_params() -> dict[str, Param]:
    """The DAG's ``Params``: the run's inputs and output, then every option (see the module's docstring)."""
    params = {
        "source_uris": Param(
            type="array",
            items={"type": "string", "minLength": 1},
            minItems=1,
            title="Source faces",
            description="Images of the face to swap in, one per line (absolute paths, file:// or s3:// URIs); several "
            "images of one person are averaged into one identity.",
        ),
        "target_uri": Param(
            type="string",
            minLength=1,
            title="Target video",
            description="The video whose faces are replaced (an absolute path, file:// or s3:// URI).",
        ),
        "output_uri": Param(
            type="string",
            minLength=1,
            title="Output video",
            description="Where the swapped video is written, atomically (.mp4, .mov, .mkv, .m4v, .webm); its preview "
            "image and marker go beside it.",
        ),
    }
    return {**params, **option_params()}


def option_params(*, section: str | None = None, defaults: Options | None = None) -> dict[str, Param]:
    """One Param per option; ``section`` puts them all in one section, ``defaults`` replaces the model's defaults."""
    properties = options_json_schema()["properties"]
    values = (defaults or Options()).model_dump(mode="json")
    params = {}
    for name in Options.model_fields:
        schema = {**param_schema(name, properties[name]), "default": values[name]}
        if section:
            schema["section"] = section
        params[name] = Param(**schema)
    return params


def param_schema(name: str, prop: dict[str, Any]) -> dict[str, Any]:
    """A field's JSON schema as the trigger form reads it: ``anyOf`` with null becomes a nullable type, a tuple an
    array of items (a JSON list editor), a list of choices a multi-select (``examples``), nullable where none selected
    is a choice; title in sentence case. Nothing else: Airflow prints this schema in every error about the field."""
    schema = {key: value for key, value in prop.items() if key not in ("anyOf", "prefixItems", "title")}
    variants = [variant for variant in prop.get("anyOf", []) if variant.get("type") != "null"]
    if len(variants) == 1:
        schema.update(variants[0])
        schema["type"] = [variants[0]["type"], "null"]
    if "prefixItems" in prop:  # a fixed-length tuple of like items (face_mask_padding)
        schema["items"] = prop["prefixItems"][0]
    if "const" in schema:  # a choice of one (a single enum value): still a dropdown
        schema["enum"] = [schema.pop("const")]
    items = schema.get("items", {})
    if schema.get("type") == "array" and "enum" in items:
        schema["examples"] = list(items["enum"])
    if name in EMPTY_LIST_OPTIONS:  # not required in the form: none selected is a choice
        schema["type"] = [schema["type"], "null"]
    default = schema.pop("default", None)
    schema["title"] = title_of(name)
    return {"default": default, **schema}


def title_of(name: str) -> str:
    words = [_ACRONYMS.get(word, word) for word in name.split("_")]
    return " ".join([words[0].capitalize(), *words[1:]])
