"""Loading: defaults, then the TOML file, then ``OCRWATCH_*`` variables, then flags, each
value coerced to its type and remembered with where it came from.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ocrwatch.config import trust
from ocrwatch.config.check import validate
from ocrwatch.config.schema import (
    _INTERNAL,
    _SECTIONS,
    BENCHMARK_KEYS,
    TESTING_VARIABLE,
    Config,
)
from ocrwatch.core.errors import ConfigError
from ocrwatch.fs import paths


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is list:
        (inner,) = typing.get_args(tp)
        return f"a list of {_type_name(inner)}s"
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return f"{_type_name(inner[0])} or empty"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            Path: "a path"}.get(tp, str(tp))


def _coerce(key: str, where: str, tp: Any, value: Any, *, from_text: bool) -> Any:
    """Turn ``value`` into ``tp`` or raise a ConfigError naming key and place."""

    def bad(expected: str = "") -> ConfigError:
        return ConfigError(
            f"{where}: {key} = {value!r} is not valid: expected {expected or _type_name(tp)}."
        )

    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = next(a for a in typing.get_args(tp) if a is not type(None))
        if value is None or value == "":
            return None
        return _coerce(key, where, inner, value, from_text=from_text)
    if origin is list:
        (inner,) = typing.get_args(tp)
        if from_text and isinstance(value, str):
            if inner is Path:  # a PATH-like list; URLs and words hold colons of their own
                value = value.replace(os.pathsep, ",")
            value = [v for v in (p.strip() for p in value.split(",")) if v]
        if isinstance(value, str | Path):
            value = [value]
        if not isinstance(value, list):
            raise bad()
        return [_coerce(key, where, inner, v, from_text=from_text) for v in value]
    if tp is bool:
        if isinstance(value, bool):
            return value
        if from_text and isinstance(value, str):
            low = value.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
        raise bad()
    if tp is int:
        if isinstance(value, bool):
            raise bad()
        if isinstance(value, int):
            return value
        if from_text and isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                raise bad() from None
        raise bad()
    if tp is float:
        if isinstance(value, bool):
            raise bad()
        if isinstance(value, int | float):
            number = float(value)
        elif from_text and isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                raise bad() from None
        else:
            raise bad()
        if not math.isfinite(number):  # nan and inf pass float() but mean nothing here
            raise bad("a finite number (nan and inf are not numbers of anything)")
        return number
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad()
    if tp is Path:
        if isinstance(value, str | Path) and str(value):
            return Path(os.path.expandvars(str(value))).expanduser()
        raise bad()
    raise bad()


def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _apply(target: Any, data: Mapping[str, Any], where: str, origins: dict[str, str],
           prefix: str = "") -> None:
    hints = _hints(type(target))
    known = [f.name for f in dataclasses.fields(target) if f.name not in _INTERNAL]
    for key, value in data.items():
        full = f"{prefix}{key}"
        if key not in known:
            raise ConfigError(
                f"{where}: unknown key {full!r}. Known keys here: {', '.join(sorted(known))}."
            )
        if full in BENCHMARK_KEYS and os.environ.get(TESTING_VARIABLE) != "1":
            raise ConfigError(
                f"{where}: {full} is a benchmark switch (every page runs to max_tokens) and "
                f"is read only with {TESTING_VARIABLE}=1 in the environment; remove it.")
        if key in _SECTIONS and not prefix:
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where}: [{key}] must be a table of settings.")
            _apply(getattr(target, key), value, where, origins, prefix=f"{key}.")
            continue
        if value == "" and hints[key] is Path:
            value = _default(target, key)  # an empty path means "the default place"
        setattr(target, key, _coerce(full, where, hints[key], value, from_text=False))
        origins[full] = f"the file {where}"


def _default(target: Any, key: str) -> Any:
    for f in dataclasses.fields(target):
        if f.name == key:
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            return f.default
    raise KeyError(key)


def _env_overrides(config: Config, environ: Mapping[str, str]) -> None:
    """``OCRWATCH_KEY`` sets ``key``; ``OCRWATCH_VLLM_MODEL`` sets ``vllm.model``."""
    hints = _hints(Config)
    for f in dataclasses.fields(config):
        if f.name in _INTERNAL:
            continue
        if f.name in _SECTIONS:
            section = getattr(config, f.name)
            sub_hints = _hints(type(section))
            for sf in dataclasses.fields(section):
                var = f"OCRWATCH_{f.name}_{sf.name}".upper()
                if var in environ:
                    setattr(section, sf.name, _coerce(
                        f"{f.name}.{sf.name}", f"environment variable {var}",
                        sub_hints[sf.name], environ[var], from_text=True))
                    config.origins[f"{f.name}.{sf.name}"] = f"the environment variable {var}"
            continue
        var = f"OCRWATCH_{f.name}".upper()
        if var in environ:
            setattr(config, f.name, _coerce(f.name, f"environment variable {var}",
                                            hints[f.name], environ[var], from_text=True))
            config.origins[f.name] = f"the environment variable {var}"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            # Judged on the open file: the file read is the file checked.
            trust.refuse(path, os.fstat(handle.fileno()))
            raw = handle.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}. Make it readable for your "
                          "user, or name another file with --config.") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line} is not UTF-8 text (byte {raw[exc.start]:#04x}). "
                          "TOML files must be UTF-8: save it as UTF-8 and start again.") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}. Fix the file or remove it.") from None
    except RecursionError:
        # Arrays or tables nested thousands deep: no setting needs more than a few.
        raise ConfigError(f"{path}: not valid for ocrwatch: its arrays or tables are nested "
                          "too deep to read. Fix the file or remove it.") from None


def load(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Read defaults, then the TOML file, then the environment, then ``overrides``.

    ``path`` None means the default file in the platform's config folder, which may be
    absent; a path given explicitly must exist.
    """
    environ = os.environ if environ is None else environ
    named_by = "--config"
    if path is None and environ.get("OCRWATCH_CONFIG"):
        path = Path(environ["OCRWATCH_CONFIG"]).expanduser()
        named_by = "the environment variable OCRWATCH_CONFIG"
        explicit = True
    else:
        explicit = path is not None
    if path is None:
        path = paths.config_file()
    config = Config()
    sources = ["defaults"]
    if path.exists():
        _apply(config, _read_toml(path), str(path), config.origins)
        sources.append(str(path))
        config.file = path.absolute()
    elif explicit:
        raise ConfigError(f"config file {path} (named by {named_by}) does not exist. "
                          "Copy config.example.toml there.")
    _env_overrides(config, environ)
    if overrides:
        hints = _hints(Config)
        for key, value in overrides.items():
            if value is None:
                continue
            if "." in key:
                section, sub = key.split(".", 1)
                target = getattr(config, section)
                setattr(target, sub, _coerce(key, "command line", _hints(type(target))[sub],
                                             value, from_text=True))
            else:
                flag = "--" + key.replace("_", "-")
                setattr(config, key, _coerce(key, f"the command-line flag {flag}", hints[key],
                                             value, from_text=True))
            config.origins[key] = f"the command-line flag --{key.replace('_', '-')}"
    config.source = " + ".join(sources)
    validate(config)
    return config
