"""Argument validation against a tool's JSON Schema: the subset tool schemas use, no dependency.

Supported: type (one or a list), properties, required, additionalProperties (false or a schema),
items, minItems/maxItems, enum, const, minimum/maximum, minLength/maxLength, anyOf/oneOf/allOf.
Other keywords are accepted without a check (the engine validates built-in tools again).
"""

from __future__ import annotations

from typing import Any

_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool)
    or isinstance(v, float) and v.is_integer(),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "null": lambda v: v is None,
}


def validate(value: Any, schema: dict | bool, where: str = "arguments") -> list[str]:
    """Every way `value` breaks `schema`, each naming where (`arguments.path`) and what to send."""
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [f"{where} is not allowed here"]
    errors: list[str] = []
    t = schema.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        if not any(_TYPES.get(x, lambda v: True)(value) for x in types):
            return [f"{where} must be {' or '.join(types)}, got {_kind(value)}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where} must be one of {schema['enum']}, got {value!r}")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where} must be {schema['const']!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where} must be at least {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where} must be at most {schema['maximum']}, got {value}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{where} must be at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{where} must be at most {schema['maxLength']} characters")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{where} needs at least {schema['minItems']} items, got {len(value)}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{where} takes at most {schema['maxItems']} items, got {len(value)}")
        items = schema.get("items")
        if isinstance(items, (dict, bool)):
            for i, item in enumerate(value):
                errors += validate(item, items, f"{where}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                errors.append(f"{where}.{name} is required")
        extra = schema.get("additionalProperties", True)
        for name, v in value.items():
            if name in props:
                errors += validate(v, props[name], f"{where}.{name}")
            elif extra is False:
                known = ", ".join(sorted(props)) or "none"
                errors.append(f"{where}.{name} is not a parameter (known: {known})")
            elif isinstance(extra, dict):
                errors += validate(v, extra, f"{where}.{name}")
    for sub in schema.get("allOf") or []:
        errors += validate(value, sub, where)
    for key in ("anyOf", "oneOf"):
        subs = schema.get(key)
        if subs:
            results = [validate(value, s, where) for s in subs]
            ok = sum(1 for r in results if not r)
            if ok == 0:
                errors.append(f"{where} matches none of the allowed forms: "
                              + "; ".join(r[0] for r in results if r))
            elif key == "oneOf" and ok > 1:
                errors.append(f"{where} matches more than one of the allowed forms")
    return errors


def _kind(v: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPES[name](v):
            return name
    return type(v).__name__
