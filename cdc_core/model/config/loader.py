"""Reading the pipelines file: YAML without duplicate keys, no secrets in it, the defaults merged into each
pipeline, pydantic's validation, and every problem as one `ConfigError` line that names the file, the
pipeline, the key path and what is wrong."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from typing_extensions import is_typeddict

from cdc_core.model.config.checks import URL_CREDENTIALS_RE, display_path
from cdc_core.model.config.pipelines import CdcConfig, PipelineConfig, PipelineSettings
from cdc_core.model.errors import ConfigError
from cdc_core.model.layout import PROJECT_ROOT

# Relative to the current directory, not to the package: an installed `cdc` has no checkout around it.
DEFAULT_CONFIG = Path("config") / "pipelines.yaml"
LOCAL_CONFIG = PROJECT_ROOT / "config" / "pipelines.local.yaml"  # the local services' file (a checkout only)
CONFIG_ENV = "CDC_CONFIG"
# Keys that look like they hold a secret. Secrets live in Airflow connections or environment variables.
_SECRET_KEY_RE = re.compile(r"pass(word|wd)|secret|private[_.-]?key|credential", re.IGNORECASE)


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; in a config file that hides a mistake, so refuse it."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
            )
        seen[key] = True
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def config_path(path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The file to read: the argument (`--config`), else $CDC_CONFIG, else ./config/pipelines.yaml (the
    current directory's). Whether it exists is `_read_yaml`'s question, which names all three ways."""
    if path is not None and str(path) != "":
        return Path(path).expanduser()
    env = (os.environ if environ is None else environ).get(CONFIG_ENV)
    return Path(env).expanduser() if env else Path.cwd() / DEFAULT_CONFIG


def missing_config_message(path: Path, environ: Mapping[str, str] | None = None) -> str:
    """What to do when the configuration file is not there: where the path came from and the other ways."""
    env = (os.environ if environ is None else environ).get(CONFIG_ENV)
    came_from = (
        f"${CONFIG_ENV}" if env and Path(env).expanduser() == path
        else "the default, ./config/pipelines.yaml in the current directory" if path == Path.cwd() / DEFAULT_CONFIG
        else "--config"
    )
    local = (
        f" (for the local services of a checkout: {CONFIG_ENV}={display_path(LOCAL_CONFIG)}, as "
        "scripts/airflow_env.sh sets)" if LOCAL_CONFIG.is_file() else ""
    )
    return (
        f"{display_path(path)}: configuration file not found (the path is {came_from}). Give the pipelines file "
        f"with --config FILE or {CONFIG_ENV}=FILE{local}, or run from a directory that holds config/pipelines.yaml"
    )


def _read_yaml(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(missing_config_message(path))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{display_path(path)}: cannot read the configuration file: {e}") from e
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        where = ""
        mark = getattr(e, "problem_mark", None)
        if mark is not None:
            where = f" line {mark.line + 1} column {mark.column + 1}:"
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{display_path(path)}:{where} invalid YAML: {problem}") from None


def _fmt_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not re.fullmatch(r"[A-Za-z0-9_\-]+", part):  # dots, spaces, newlines, ...: one line, unambiguous
            out += f"[{part!r}]"
        else:
            out += ("." if out else "") + part
    return out


def _allowed_keys(loc: tuple[int | str, ...], model: type[BaseModel]) -> list[str] | None:
    """The keys the model at `loc` accepts (for 'unknown key' messages), or None when unknown."""
    current: Any = model
    for part in loc:
        if get_origin(current) in (Union, UnionType):  # `X | None`: the model side
            models = [a for a in get_args(current) if a is not type(None)]
            current = models[0] if len(models) == 1 else current
        if get_origin(current) is list and isinstance(part, int):
            current = get_args(current)[0]
            continue
        if get_origin(current) is dict:
            current = get_args(current)[1]  # `part` is a free-form key (e.g. a table name)
        elif isinstance(current, type) and issubclass(current, BaseModel) and isinstance(part, str):
            field = current.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
        elif is_typeddict(current) and isinstance(part, str):
            current = current.__annotations__.get(part)
        else:
            return None
    if get_origin(current) in (Union, UnionType):
        models = [a for a in get_args(current) if a is not type(None)]
        current = models[0] if len(models) == 1 else current
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    if is_typeddict(current):
        return list(current.__annotations__)
    return None


def _describe_error(err: Mapping[str, Any], model: type[BaseModel] | None = None) -> str:
    """One pydantic error as 'what is wrong (got x)'."""
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    got = True
    if kind == "missing":
        msg, got = "required key is missing", False
    elif kind == "extra_forbidden":
        got = False
        key = str(err["loc"][-1]) if err["loc"] else ""
        allowed = _allowed_keys(tuple(err["loc"][:-1]), model) if model else None
        msg = "unknown key"
        if allowed:
            hint = difflib.get_close_matches(key, allowed, n=1)
            msg += (f" (did you mean {hint[0]!r}?)" if hint else "") + f"; allowed here: {', '.join(allowed)}"
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[kind]
        bound = next(iter(ctx.values()), "?")
        msg = f"must be {op} {bound}"
    elif kind in ("int_type", "int_parsing", "int_from_float"):
        msg = "must be an integer"
    elif kind in ("string_type", "string_sub_type"):
        msg = "must be a string"
    elif kind == "bool_type":
        msg = "must be true or false"
    elif kind == "literal_error":
        msg = f"must be one of {ctx.get('expected', '?')}"
    elif kind in ("list_type", "tuple_type"):
        msg = "must be a list"
    elif kind in ("dict_type", "model_type", "model_attributes_type"):
        msg, got = "must be a mapping (key: value)", not isinstance(value, Mapping)
    elif kind == "too_short" and ctx.get("min_length") == 1:
        msg = "must not be empty"
    elif kind == "value_error":
        msg = str(ctx.get("error") or err["msg"]).removeprefix("Value error, ")
        got = not isinstance(value, Mapping | list) and repr(value) not in msg
    else:
        msg = err["msg"]
    if _may_be_secret(err):
        got = False  # an error message ends up in logs and task output: never echo a credential
    if got and (value is None or isinstance(value, str | int | float | bool | datetime | date)):
        msg += f" (got {value!r})" if not isinstance(value, datetime | date) else f" (got {value.isoformat()})"
    return msg


def _may_be_secret(err: Mapping[str, Any]) -> bool:
    """A value that may be a credential: whatever sits in auth_env, or a URL with user:password@."""
    loc = err.get("loc") or ()
    value = err.get("input")
    return bool(loc and loc[-1] == "auth_env") or (isinstance(value, str) and bool(URL_CREDENTIALS_RE.match(value)))


def _error_lines(e: ValidationError, model: type[BaseModel]) -> list[str]:
    lines = []
    for err in e.errors():
        loc = _fmt_loc(tuple(err["loc"]))
        lines.append(f"{loc}: {_describe_error(err, model)}" if loc else _describe_error(err, model))
    return lines


def _find_secrets(node: Any, loc: tuple[int | str, ...] = ()) -> list[tuple[int | str, ...]]:
    found: list[tuple[int | str, ...]] = []
    if isinstance(node, Mapping):
        for k, v in node.items():
            here = (*loc, str(k))
            if isinstance(k, str) and k not in ("auth_env",) and _SECRET_KEY_RE.search(k):
                found.append(here)
            found.extend(_find_secrets(v, here))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found.extend(_find_secrets(v, (*loc, i)))
    return found


_WHERE_CREDENTIALS_GO = (
    "secrets do not belong in the configuration file; put the source's credentials in the Airflow "
    "connection named by source.conn_id (env AIRFLOW_CONN_<ID> or the Airflow UI), and ZooKeeper's in the "
    "environment variable named by zookeeper.auth_env"
)


def _without(node: Any, locs: list[tuple[int | str, ...]]) -> Any:
    """A copy of `node` without the keys at `locs` (so the rest can still be validated)."""
    if isinstance(node, Mapping):
        return {
            k: _without(v, [loc[1:] for loc in locs if loc[0] == str(k) and len(loc) > 1])
            for k, v in node.items()
            if (str(k),) not in locs
        }
    if isinstance(node, list):
        return [_without(v, [loc[1:] for loc in locs if loc[0] == i and len(loc) > 1]) for i, v in enumerate(node)]
    return node


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; anything else in `override` replaces."""
    out = dict(base)
    for k, v in override.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def load_config(path: str | os.PathLike[str] | None = None) -> CdcConfig:
    """Read, merge and validate the pipelines file; raise one ConfigError listing every problem."""
    p = config_path(path)
    shown = display_path(p)
    raw = _read_yaml(p)
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{shown}: the top level must be a mapping with 'defaults' and 'pipelines'")
    problems: list[str] = []
    for key in raw:
        if key not in ("defaults", "pipelines"):
            hint = difflib.get_close_matches(str(key), ["defaults", "pipelines"], n=1)
            problems.append(
                f"{shown}: {key}: unknown top-level key"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + "; the file has 'defaults' and 'pipelines'"
            )

    defaults_raw = raw.get("defaults") or {}
    pipelines_raw = raw.get("pipelines")
    if not isinstance(defaults_raw, Mapping):
        problems.append(f"{shown}: defaults: must be a mapping (key: value)")
        defaults_raw = {}
    secrets = _find_secrets(defaults_raw)
    for loc in secrets:
        problems.append(f"{shown}: defaults: {_fmt_loc(loc)}: {_WHERE_CREDENTIALS_GO}")
    defaults_raw = _without(defaults_raw, secrets)

    context = {"base_dir": p.resolve().parent}
    defaults: PipelineSettings | None = None
    try:
        defaults = PipelineSettings.model_validate(defaults_raw, context=context)
    except ValidationError as e:
        problems.extend(f"{shown}: defaults: {line}" for line in _error_lines(e, PipelineSettings))

    if not isinstance(pipelines_raw, list) or not pipelines_raw:
        problems.append(
            f"{shown}: pipelines: must be a non-empty list of pipelines "
            "(each with name, source.conn_id and tables.include)"
        )
        pipelines_raw = []

    pipelines: list[PipelineConfig] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(pipelines_raw):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        label = f"pipeline {name!r}" if isinstance(name, str) else f"pipelines[{i}]"
        if not isinstance(entry, Mapping):
            problems.append(f"{shown}: {label}: must be a mapping with name, source, tables (and optional overrides)")
            continue
        if isinstance(name, str):
            if name in seen:
                problems.append(
                    f"{shown}: {label}: duplicate pipeline name (also pipelines[{seen[name]}]); names must be unique"
                )
                continue
            seen[name] = i
        secrets = _find_secrets(entry)
        for loc in secrets:
            problems.append(f"{shown}: {label}: {_fmt_loc(loc)}: {_WHERE_CREDENTIALS_GO}")
        if defaults is None:
            continue  # defaults errors were reported once above, not again per pipeline
        try:
            merged = _deep_merge(defaults_raw, _without(entry, secrets))
            pipelines.append(PipelineConfig.model_validate(merged, context=context))
        except ValidationError as e:
            problems.extend(f"{shown}: {label}: {line}" for line in _error_lines(e, PipelineConfig))

    if problems:
        raise ConfigError("\n".join(problems))
    assert defaults is not None
    return CdcConfig(path=p.resolve(), defaults=defaults, pipelines=tuple(pipelines))
