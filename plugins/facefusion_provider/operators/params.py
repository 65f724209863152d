"""The trigger form of ``facefusion_swap``: one typed ``Param`` per option, generated from the options model.

Each option becomes its own field: title, help text, type, a dropdown for an enum, a multi-select for a list of
choices, default. The everyday options sit in the form's open first section; the rest are grouped by their ``section``
into sections the form shows collapsed. The conf these fields make is flat (``{"source_uris": [...], "target_uri":
..., "face_swapper_blend": 90}``): the canonical shape. The older shape with the options nested under ``"options"`` is
accepted too (``validate`` merges both).

What Airflow 3.3's form does with a schema, and so what each field's schema holds (docs/ui.md):
- a type without ``null`` stars the field as required, and one whose value is null shows "This field is required" as
  the form opens, and a starred field that is empty (null or "") turns its section red and disables Trigger: so every
  type is nullable. An option's emptied field sends null, which ``validate`` reads as the default; the run's three
  inputs say "Required" in their help instead of a star, and a trigger that leaves one empty is refused at once,
  naming it (``airflow_plugin/conf_limits.py``);
- ``minimum``/``maximum`` make a number field clamp an out-of-range value silently when it loses focus: the bounds sit
  in ``allOf`` instead, which the form does not read and the API checks, so 150 is refused naming the field;
- ``description_md`` is rendered as markdown (``description`` as plain text on one line): plain words, then the key,
  the range or the choices on a second line, as plain text: an inline code chip is taller than the help's line, so a
  chip on the second line covered the last line of wrapped help above it.
"""

from __future__ import annotations

import re
from typing import Any

from airflow.sdk import Param

from facefusion_provider.options import Options, options_json_schema

_ACRONYMS = {"uris": "URIs", "uri": "URI"}
INPUT_TITLES = {"source_uris": "Source faces", "target_uri": "Target video", "output_uri": "Output video"}
_BOUNDS = ("minimum", "maximum")


def swap_params() -> dict[str, Param]:
    """The DAG's ``Params``: the run's inputs and output, then every option (see the module's docstring)."""
    inputs: dict[str, tuple[dict[str, Any], Any, str]] = {
        "source_uris": (
            {"type": ["array", "null"], "items": {"type": "string", "minLength": 1}},
            None,
            "Required: pictures of the face to put into the video, one per line; several pictures of one person are "
            "averaged. For lip sync, also the voice: an audio file (.wav, .mp3, .m4a, .aac, .opus, .ogg, .flac).",
        ),
        "target_uri": ({"type": ["string", "null"]}, None, "Required: the video whose faces are replaced."),
        "output_uri": (
            {"type": ["string", "null"]},
            None,
            "Required: where the finished video is written (.mp4, .mov, .mkv, .m4v, .webm); a preview picture goes "
            "beside it.",
        ),
    }
    params = {
        name: Param(
            default,
            **schema,
            title=INPUT_TITLES[name],
            description_md=help_text(plain, name, "an absolute path, file:// or s3:// URI"),
        )
        for name, (schema, default, plain) in inputs.items()
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
    """A field's JSON schema as the trigger form reads it (see the module's docstring): a nullable type, ``anyOf``
    with null and a tuple flattened, a list of choices a multi-select (``examples``), the bounds in ``allOf``, the
    title in sentence case, the help in ``description_md``. Nothing else: Airflow prints this schema in its errors."""
    schema = {key: value for key, value in prop.items() if key not in ("anyOf", "prefixItems", "title", "description")}
    variants = [variant for variant in prop.get("anyOf", []) if variant.get("type") != "null"]
    if len(variants) == 1:
        schema.update(variants[0])
        if "enum" in schema:  # a choice that may be left empty (face_selector_gender): empty is one of its values
            schema["enum"] = [*schema["enum"], None]
    if "prefixItems" in prop:  # a fixed-length tuple of like items (face_mask_padding)
        schema["items"] = prop["prefixItems"][0]
    if "const" in schema:  # a choice of one (a single enum value): still a dropdown
        schema["enum"] = [schema.pop("const")]
    if "enum" in schema and "default" in prop and prop["default"] is None:  # unset is a choice: null passes the enum
        schema["enum"] = [*schema["enum"], None]
    items = schema.get("items", {})
    if schema.get("type") == "array" and "enum" in items:
        schema["examples"] = list(items["enum"])
    schema["type"] = [schema["type"], "null"]  # every option has a default: never starred, empty means the default
    bounds = {key: schema.pop(key) for key in _BOUNDS if key in schema}
    if bounds:
        schema["allOf"] = [bounds]
    if items and any(key in items for key in _BOUNDS):  # the padding's four numbers: the same, item by item
        schema["items"] = {key: value for key, value in items.items() if key not in _BOUNDS}
        schema.setdefault("allOf", []).append({"items": {key: items[key] for key in _BOUNDS if key in items}})
    default = schema.pop("default", None)
    schema["title"] = title_of(name)
    schema["description_md"] = help_text(str(prop.get("description", "")), name, technical_line(name, prop))
    return {"default": default, **schema}


def technical_line(name: str, prop: dict[str, Any]) -> str:
    """What an expert looks for: the range or the choices (model names) of an option."""
    numeric = next((p for p in [prop, *prop.get("anyOf", [])] if p.get("type") in ("integer", "number")), prop)
    items = prop.get("prefixItems", [prop.get("items", {})])[0]
    low, high = numeric.get("minimum", items.get("minimum")), numeric.get("maximum", items.get("maximum"))
    variant: dict[str, Any] = next((p for p in prop.get("anyOf", []) if "enum" in p), {})
    choices = (
        prop.get("enum") or variant.get("enum") or items.get("enum") or ([prop["const"]] if "const" in prop else [])
    )
    if choices:
        return "choices: " + ", ".join(str(choice) for choice in choices)
    if low is not None and high is not None:
        return f"from {low} to {high}; anything outside is refused"
    return ""


def help_text(plain: str, key: str, technical: str) -> str:
    """Markdown: the plain sentence, then (a line break) the key and the technical detail, in plain text (no code
    chip: it is taller than the line and covered the wrapped help above it)."""
    second = key + (f" · {technical}" if technical else "")
    return f"{plain}  \n{second}"


def title_of(name: str) -> str:
    words = [_ACRONYMS.get(word, word) for word in name.split("_")]
    return " ".join([words[0].capitalize(), *words[1:]])


def field_label(key: str) -> str:
    """``Face swapper blend (face_swapper_blend)``: a conf key as the form shows it, and the key itself."""
    name = key.removeprefix("options.")
    if name in INPUT_TITLES:
        return f"{INPUT_TITLES[name]} ({key})"
    return f"{title_of(name)} ({key})" if name in Options.model_fields else key


# "output_uri: ...", "source_uris[1]: ...", "invalid options: options.face_swapper_blend: ... (got 150)"
_FIELD_FIRST = re.compile(r"^(?:invalid options: )?(?P<key>[\w.]+)(?P<index>\[\d+\])?: ")


def titled_reason(message: str) -> str:
    """A bad-input message with its field named as the form shows it: ``Output video (output_uri): ...``."""
    first_line = message.strip().splitlines()[0] if message.strip() else message
    match = _FIELD_FIRST.match(first_line)
    if match is None:
        return first_line
    key = match.group("key").removeprefix("options.")
    label = field_label(key)
    if label == key:
        return first_line
    return f"{label}{match.group('index') or ''}: {first_line[match.end() :]}"
