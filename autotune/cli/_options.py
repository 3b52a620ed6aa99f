"""Command-line options made from an options record (`autotune.study.options`): one typer
option per field, so that a command declares only what is not an option of its record."""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import typer
from pydantic.fields import FieldInfo

from autotune.study.options import Options


def option_parameters(model: type[Options]) -> list[inspect.Parameter]:
    """A typer option for each field of `model`: `--NAME` (or the field's `option`),
    the field's type, default and description, its bounds as the option's."""
    return [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                              default=inspect.Parameter.empty if info.is_required()
                              else info.default,
                              annotation=Annotated[info.annotation, _option(info)])
            for name, info in model.model_fields.items()]


def _option(info: FieldInfo) -> Any:
    """The typer option of one field: its bounds, and a field's `choices` (in its
    `json_schema_extra`) as the option's metavar and shell completion."""
    bounds: dict[str, Any] = {}
    # annotated_types' Ge, Gt, Le, Lt. typer has no open bounds: a Gt or Lt bound shows as
    # inclusive here, and the record itself refuses the bound (StudyOptions.of, exit 2).
    for rule in info.metadata:
        for key, word in (("ge", "min"), ("gt", "min"), ("le", "max"), ("lt", "max")):
            if hasattr(rule, key):
                bounds[word] = getattr(rule, key)
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    names = (str(extra["option"]),) if "option" in extra else ()
    choices = extra.get("choices")
    if isinstance(choices, list | tuple):  # shown in --help, completed by the shell; the
        # record still judges the value (its message names what is known)
        known = [str(c) for c in choices]
        bounds["metavar"] = "[" + "|".join(known) + "]"
        bounds["autocompletion"] = lambda incomplete: [c for c in known
                                                       if c.startswith(incomplete)]
    return typer.Option(*names, help=info.description, **bounds)
