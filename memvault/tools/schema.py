"""Lean tool schemas: what pydantic generates, without what a client never needs to read."""

from __future__ import annotations

from typing import Any

# Keywords whose value is one schema, a list of schemas, or a mapping of names to schemas.
ONE = ("items", "additionalProperties", "not")
MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
NAMED = ("properties", "$defs")


def compact(schema: dict[str, Any], *, optional_null: bool = True, described: bool = True) -> dict[str, Any]:
    """The same schema without titles, null defaults and, for inputs, `X or null` spelled out.

    pydantic gives every property a title (its name, capitalised) and writes an optional
    argument as `anyOf: [X, null], default: null`: about a third of tools/list, which every
    session pays for. An input left out is None to the tool, so `X` says the same thing to a
    client. Output schemas keep their nulls (`optional_null=False`): a client validates
    structured results against them, and lose their descriptions (`described=False`): the
    tool's input schema already describes the same fields.
    """
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "default" and value is None:
            continue
        if key == "description" and not described and isinstance(value, str):
            continue
        if key in ONE and isinstance(value, dict):
            out[key] = compact(value, optional_null=optional_null, described=described)
        elif key in MANY and isinstance(value, list):
            out[key] = [compact(item, optional_null=optional_null, described=described) for item in value]
        elif key in NAMED and isinstance(value, dict):
            out[key] = {
                name: compact(item, optional_null=optional_null, described=described)
                for name, item in value.items()
            }
        else:
            out[key] = value
    if optional_null:
        options = out.get("anyOf")
        if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
            del out["anyOf"]
            kept = next(option for option in options if option != {"type": "null"})
            out = {**kept, **out}
    return out
