"""Reading the service settings: the YAML file, the environment, overrides; one error line."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from ..config import format_validation_error
from ..errors import ConfigError
from .models import YAML_FILE, ServiceSettings

__all__ = ["load_service_settings", "validate_settings"]

#: Wrong-type errors of strict validation: a quoted number or boolean in the YAML file.
_STRICT_TYPES = {"float_type", "int_type", "bool_type"}


def _check_yaml_types(path) -> None:
    """Refuse a number or boolean written as a string in the YAML file (``reward: "1.5"``,
    ``enabled: "no"``): lax validation would convert it silently, and a quoted value is more
    often a mistake than a wish. Environment variables are strings by nature: not checked.
    Any other problem is left to the full validation (one error line per problem)."""
    import json

    import yaml

    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (yaml.YAMLError, OSError, UnicodeDecodeError):
        return  # reported by the full validation
    if not isinstance(raw, dict):
        return
    from pydantic import TypeAdapter

    parts = []
    for key, value in raw.items():
        field = ServiceSettings.model_fields.get(key)
        if field is None or field.annotation is None:
            continue  # reported by the full validation
        try:  # JSON mode: str → Path and list → tuple stay allowed; "1.5" → float does not
            TypeAdapter(field.annotation).validate_json(
                json.dumps(value, default=str), strict=True, context={"strict": True}
            )
        except ValidationError as err:
            for e in err.errors():
                if e["type"] not in _STRICT_TYPES or not isinstance(e["input"], str):
                    continue
                loc = ".".join(str(x) for x in (key, *e["loc"]) if x != "function-after")
                kind = {"float_type": "a number", "int_type": "an integer"}.get(
                    e["type"], "true or false"
                )
                parts.append(f"{loc}: {kind}, not the string {e['input']!r} (drop the quotes)")
        except ValueError:
            continue
    if parts:
        raise ConfigError(f"invalid configuration in {path}: " + "; ".join(parts))


def _check_yaml_top_level(path: str) -> None:
    """One clear line for a YAML file whose top level is not a mapping of settings."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, OSError):
        return  # reported, with its position, by the settings source below
    if data is not None and not isinstance(data, dict):
        kinds = {list: "a list", str: "a string", int: "a number", float: "a number"}
        kind = kinds.get(type(data), f"a {type(data).__name__}")
        raise ConfigError(
            f"{path}: the top level must be a mapping of settings (e.g. 'bandits:'), not {kind}"
        )


def load_service_settings(path: str | None = None, **overrides) -> ServiceSettings:
    """Build :class:`ServiceSettings` from an optional YAML file, the environment and overrides.

    Raises :class:`ConfigError` with one line per problem.
    """
    if path is not None and not Path(path).is_file():
        raise ConfigError(f"no configuration file at {path}")
    if path is not None:
        _check_yaml_top_level(path)
        _check_yaml_types(path)
    YAML_FILE["path"] = path
    try:
        return ServiceSettings(**overrides)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, "invalid configuration: ")) from None
    except ConfigError:
        raise
    except (ValueError, OSError) as err:
        raise ConfigError(f"invalid configuration: {err}") from None
    except Exception as err:  # YAML syntax errors
        import yaml

        if isinstance(err, yaml.YAMLError):
            mark = getattr(err, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise ConfigError(f"invalid YAML in {path}{where}: {problem}") from None
        raise
    finally:
        YAML_FILE.pop("path", None)


def validate_settings(data: dict) -> ServiceSettings:
    """:class:`ServiceSettings` from a plain dict; raise :class:`ConfigError` with one line."""
    try:
        return ServiceSettings.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, "invalid configuration: ")) from None
