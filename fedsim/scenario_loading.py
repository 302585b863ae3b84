"""Loading a scenario: a mapping or YAML file (or a built-in's name) into a validated :class:`Scenario`,
``key=value`` overrides on the raw mapping, paths resolved beside the scenario file, and the resolved
scenario written back as YAML.  The sections themselves are :mod:`fedsim.scenario_sections`."""
from __future__ import annotations

import copy
import dataclasses
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml

from fedsim.components import find, module_records, recorded_dirs, reference_of
from fedsim.system.channel import PATHLOSS_MODELS, channel_model
from fedsim.config import check_domain, coerce, shown, from_mapping, positive
from fedsim.errors import ConfigError
from fedsim.inputfiles import LIMIT_SCENARIO, LIMIT_TABLE, check_given_path, read_input, shown_path
from fedsim.scenario_sections import (SECTIONS, TOP_LEVEL, AlgorithmResolver, AlgorithmSpec, LinkConfig, Scenario,
                                      check_label, check_link_effect)
from fedsim.yamlio import parse_yaml


def _algorithm_spec(data: Any, field_name: str, resolve: AlgorithmResolver, base_dirs: tuple) -> AlgorithmSpec:
    if isinstance(data, (str, type)):
        data = {"name": data}
    if not isinstance(data, Mapping):
        raise ConfigError(field_name, f"must be an algorithm name or mapping, got {shown(data)}")
    data = dict(data)
    name = data.pop("name", "fedavg")
    if not isinstance(name, (str, type)):
        raise ConfigError(f"{field_name}.name", f"must be an algorithm name (a string), got {shown(name)}")
    cls = resolve(name, f"{field_name}.name", base_dirs)
    if not isinstance(name, str):  # a class given to the Python API: its built-in name, else its module:qualname
        try:
            found = resolve(cls.name, f"{field_name}.name", base_dirs)
            builtin = getattr(found, "load", lambda: found)() is cls
        except ConfigError:
            builtin = False
        name = cls.name if builtin else reference_of(cls)
    label = data.pop("label", cls.name if ":" in name else name)
    if isinstance(label, int) and not isinstance(label, bool):  # `label: 1` reads as a number; it names a folder
        label = str(label)
    check_label(label, f"{field_name}.label")
    if field_name != "algorithm":  # typeable: algorithm.<label>.field=...
        field_name = f"algorithm.{label}"
    params = from_mapping(cls.Config, data, field_name)
    return AlgorithmSpec(name=name, params=params, label=str(label), source=cls)


def _with_preset(channel: Any) -> Any:
    """A direction given next to a preset starts from the preset's settings: its keys override them."""
    if not isinstance(channel, Mapping) or not isinstance(channel.get("preset"), str):
        return channel
    from fedsim.system.channel import CHANNEL_PRESETS

    preset = CHANNEL_PRESETS.get(channel["preset"])
    if preset is None:
        return channel  # validation names the unknown preset
    out = dict(channel)
    names = {f.name for f in dataclasses.fields(LinkConfig)}
    for direction in ("uplink", "downlink"):
        given = out.get(direction)
        if not isinstance(given, Mapping):
            continue
        cfg = getattr(preset, direction)
        base = {k: v for k, v in dataclasses.asdict(cfg).items() if k in names}
        if cfg.rate_bps is not None:
            base["mbps"] = cfg.rate_bps / 1e6
        if cfg.rate_range_bps is not None:
            base["mbps"] = [cfg.rate_range_bps[0] / 1e6, cfg.rate_range_bps[1] / 1e6]
        out[direction] = {**base, **given}
    return out


def _check_channel_effect(channel: Mapping[str, Any]) -> None:
    """Link fields the user gave that the direction's model (given, the preset's, or ``fixed``) ignores."""
    from fedsim.system.channel import CHANNEL_PRESETS

    preset = CHANNEL_PRESETS.get(channel.get("preset")) if isinstance(channel.get("preset"), str) else None
    for direction in ("uplink", "downlink"):
        given = channel.get(direction)
        if not isinstance(given, Mapping):
            continue
        model = given.get("model")
        if model is None:
            model = getattr(getattr(preset, direction), "model", "fixed") if preset is not None else "fixed"
        if isinstance(model, str):
            check_link_effect(given, model, f"channel.{direction}")


def _named_objects(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A model factory or dataset loader given to the Python API as an object is named by its
    ``module:qualname`` (and remembered), so the resolved scenario stays plain YAML."""
    out = dict(data)
    for section in ("model", "data"):
        sec = out.get(section)
        if isinstance(sec, Mapping) and callable(sec.get("name")):
            out[section] = {**sec, "name": reference_of(sec["name"])}
    return out


def _beside(value: Any, base: Path, looks_like_path: bool = False) -> Any:
    """``value`` made absolute when it is a relative path naming a file or folder in ``base`` (the scenario
    file's folder), else ``value`` unchanged (then the working directory's, as before).  With
    ``looks_like_path``, only a string with a ``/`` or a file extension counts, so an option's plain word
    (``split: train``) stays a word even beside a folder of that name."""
    if not isinstance(value, str) or not value.strip() or len(value) > 4096 or "\x00" in value:
        return value
    path = Path(value)
    if path.is_absolute() or looks_like_path and "/" not in value and "\\" not in value and not path.suffix:
        return value
    try:
        return str((base / path).resolve()) if (base / path).exists() else value
    except (OSError, ValueError):  # a name too long for the file system: not a file beside the scenario
        return value


def _paths_beside(scenario: Scenario, base: Path) -> None:
    """Relative file paths of a scenario file are looked up beside it first, like its ``module:attribute``
    references and device profiles: ``data.root``, ``channel.positions.path``, ``availability.path`` and
    every string of ``data.options`` that looks like a path (a ``/`` or an extension: ``sites.csv``,
    ``data/x.npz``).  One found there is written as its absolute path, so the resolved scenario (a run's
    scenario.yaml) names the same file from any working directory; one not found there is kept, relative to
    the working directory."""
    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return _beside(value, base, looks_like_path=True)

    scenario.data.root = _beside(scenario.data.root, base)
    scenario.data.options = walk(scenario.data.options)
    scenario.channel.positions.path = _beside(scenario.channel.positions.path, base)
    scenario.availability.path = _beside(scenario.availability.path, base)


def scenario_from_mapping(data: Mapping[str, Any], *, algorithms: AlgorithmResolver,
                          source_dir: Path | None = None) -> Scenario:
    """Validate a plain mapping into a Scenario (one clear ConfigError for the first problem).

    ``algorithms`` resolves algorithm names to classes (``fedsim.algorithms.resolve``); ``source_dir`` is the
    scenario file's folder, where ``module:attribute`` references are looked up first."""
    if not isinstance(data, Mapping):
        raise ConfigError("scenario", f"must be a mapping of sections, got {type(data).__name__}")
    data = _named_objects(data)
    if isinstance(data.get("channel"), Mapping):
        _check_channel_effect(data["channel"])
        data = {**data, "channel": _with_preset(data["channel"])}
    search = (*recorded_dirs(data["modules"]), source_dir) if data.get("modules") is not None else (source_dir,)
    for key in data:
        if key not in TOP_LEVEL:
            raise ConfigError(str(key), f"unknown scenario key (allowed: {', '.join(TOP_LEVEL)})")
    kwargs: dict[str, Any] = {}
    if "name" in data:
        kwargs["name"] = coerce(data["name"], str, "name")
    if "seed" in data:
        kwargs["seed"] = coerce(data["seed"], int, "seed")
        check_domain(kwargs["seed"], None, "seed")
        positive(kwargs["seed"], "seed", allow_zero=True)
    for key, cls in SECTIONS.items():
        if key in data and data[key] is not None:
            kwargs[key] = coerce(data[key], cls, key)
    if "stop" not in kwargs:  # no hidden stop default: the scenario says when the run ends
        raise ConfigError("stop", "missing: set stop.max_versions, stop.max_time_s or stop.max_updates so the run ends")
    raw_alg = data.get("algorithm", "fedavg")
    if isinstance(raw_alg, list):
        if not raw_alg:
            raise ConfigError("algorithm", "an empty list runs nothing; give at least one algorithm")
        specs = [_algorithm_spec(a, f"algorithm[{i}]", algorithms, search) for i, a in enumerate(raw_alg)]
    else:
        specs = [_algorithm_spec(raw_alg, "algorithm", algorithms, search)]
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise ConfigError("algorithm", f"variants need distinct labels, got {labels} (add label: ...)")
    kwargs["algorithms"] = specs
    scenario = Scenario(**kwargs, source_dir=source_dir)
    from fedsim.system.devices import profile_at

    for i, group in enumerate(scenario.devices.mix):  # a bad profile is named where it was given
        profile_at(group.profile, f"devices.mix[{i}].profile", source_dir)
    profile_at(scenario.server.profile, "server.profile", source_dir)
    for kind, section in (("model", scenario.model), ("dataset", scenario.data)):  # a bad reference fails here
        find(kind, section.name, f"{'data' if kind == 'dataset' else kind}.name", search)
    links = [(d, getattr(scenario.channel, d, None)) for d in ("uplink", "downlink")]
    links = [(d, link.model) for d, link in links if link is not None and link.model not in PATHLOSS_MODELS]
    for direction, name in links:  # a path-loss model of the user's: a bad reference fails here
        channel_model(name, f"channel.{direction}.model", search)
    # where each user module was found, saved with the run: it repeats from any folder
    scenario.modules = module_records([*(s.name for s in specs), scenario.model.name, scenario.data.name,
                                       *(name for _, name in links)])
    if source_dir is not None:
        _paths_beside(scenario, source_dir)
    # a device, FIFO or oversized file named as an input is refused here, before any work (a missing one
    # is said when the run reads it)
    check_given_path(scenario.availability.path, "availability.path", "CSV file (client,start,end)", LIMIT_TABLE)
    check_given_path(scenario.channel.positions.path, "channel.positions.path", "CSV file (x,y)", LIMIT_TABLE)
    for i, spec in enumerate(specs):  # settings that depend on other sections (e.g. per device class)
        check = getattr(spec.params, "validate_scenario", None)
        if callable(check):
            check(scenario, f"algorithm[{i}]" if isinstance(raw_alg, list) else "algorithm")
    return scenario


def builtin_scenarios() -> dict[str, str]:
    """Built-in scenario names mapped to their descriptions: the file's first comment paragraph (the
    comment lines at its top, up to an empty ``#`` line), whole, so no description stops mid-phrase."""
    out = {}
    for entry in sorted(resources.files("fedsim.scenarios").iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            text = entry.read_text(encoding="utf-8")
            para: list[str] = []
            for ln in text.splitlines():
                if not ln.startswith("#") or not ln[1:].strip():
                    break
                para.append(ln[1:].strip())
            out[entry.name[: -len(".yaml")]] = " ".join(para)
    return out


def load_raw(source: str | Path | None) -> dict[str, Any]:
    """The mapping of a built-in scenario name or a YAML file (``None`` → the default scenario)."""
    if source is None:
        source = "default"
    path = Path(source)
    names = builtin_scenarios()
    # a built-in name wins over a folder of the same name in the working directory (a run's output)
    if path.suffix in (".yaml", ".yml") or path.is_file() or (path.exists() and str(source) not in names):
        if not path.exists():
            raise ConfigError("scenario", f"file '{source}' not found")
        if path.is_dir():
            raise ConfigError("scenario", f"'{source}' is a folder, not a scenario file (built-in: {', '.join(names)}; "
                              "or a path to a .yaml file)")
        # a regular file or a pipe (``fedsim run <(...)``), read at most LIMIT_SCENARIO bytes; a device is refused
        raw = read_input(path, "scenario", "scenario file", LIMIT_SCENARIO, pipe_ok=True)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError("scenario", f"cannot read {shown_path(source)}: not UTF-8 text") from None
    else:
        if str(source) not in names:
            raise ConfigError("scenario", f"unknown scenario '{source}' (built-in: {', '.join(names)}; or a path to a .yaml file)")
        text = resources.files("fedsim.scenarios").joinpath(f"{source}.yaml").read_text(encoding="utf-8")
    if "\x00" in text:
        raise ConfigError("scenario", f"'{source}' holds NUL bytes (first at character {text.index(chr(0))}); "
                          "a scenario is a YAML text file")
    data = parse_yaml(text, "scenario", f"'{source}'")
    if data is None:
        raise ConfigError("scenario", f"'{source}' is empty (a scenario needs at least a stop rule; see "
                          "`fedsim show default` for a complete one)")
    if not isinstance(data, dict):
        raise ConfigError("scenario", f"'{source}' must hold a mapping of sections")
    return data


def _shown_label(entry: Any, resolve: AlgorithmResolver | None, base_dirs: tuple) -> str:
    """The label an algorithm entry runs (and ``fedsim show`` shows it) with: its ``label``, else its name;
    a ``module:Class`` without a label is labelled with the class's ``name`` (as :func:`_algorithm_spec`
    does), which needs ``resolve``; without it, or when the class cannot be found yet, the name itself."""
    if not isinstance(entry, Mapping):
        return str(entry)
    if "label" in entry:
        return str(entry["label"])
    name = entry.get("name", "fedavg")
    if isinstance(name, str) and ":" in name and resolve is not None:
        try:
            return str(resolve(name, "algorithm.name", base_dirs).name)
        except (ConfigError, AttributeError):
            pass  # named where the scenario is validated
    return str(name)


def _algorithm_entry(data: dict[str, Any], key: str, source: str | Path | None,
                     resolve: AlgorithmResolver | None = None) -> tuple[dict[str, Any], list[str]]:
    """The mapping of the variant of a list-valued ``algorithm`` that ``key`` (``algorithm.<label>.field``
    or ``algorithm.<index>.field``) addresses, and the rest of the key's path.  A label is matched whole,
    dots included, the longest first; it is the label ``fedsim show`` shows."""
    entries = data["algorithm"]
    labels = [_shown_label(e, resolve, (source_dir_of(source),)) for e in entries]
    rest = key[len("algorithm."):]
    found = None
    for i, label in sorted(enumerate(labels), key=lambda il: -len(il[1])):
        if rest == label or rest.startswith(label + "."):
            found, rest = i, rest[len(label) + 1:]
            break
    if found is None:
        which, _, after = rest.partition(".")
        if which.isdigit() and int(which) < len(entries):
            found, rest = int(which), after
    if found is None:
        where = f" (defined in {_source_text(source)})" if source is not None else ""
        field = key.split(".")[-1]
        raise ConfigError(key, f"this scenario has several algorithms ({', '.join(labels)}){where}; address one by "
                          f"label or index, e.g. algorithm.{labels[-1]}.{field}=... or "
                          f"algorithm.{len(labels) - 1}.{field}=...")
    if not isinstance(entries[found], dict):
        entries[found] = {"name": str(entries[found])}
    return entries[found], rest.split(".") if rest else []


def _kept_settings(current: Any, names: str | list[str], resolve: AlgorithmResolver | None = None,
                   base_dirs: tuple = ()) -> Any:
    """``algorithm=a,b`` (or ``algorithm=a``) on a scenario: each name that is the label, else the name, of
    one of the scenario's algorithms keeps that algorithm's settings (a copy of its entry); a name the
    scenario does not have is that algorithm with its defaults.  So ``fedsim run cos2p 'algorithm=cos2p,fedavg'``
    runs the scenario's Co-S²P beside FedAvg, not Co-S²P's class defaults."""
    entries = current if isinstance(current, list) else [] if current is None else [current]
    entries = [e if isinstance(e, Mapping) else {"name": e} for e in entries if isinstance(e, (Mapping, str))]
    by_label = {_shown_label(e, resolve, base_dirs): e for e in entries}
    by_name: dict[str, Any] = {}
    for e in entries:
        by_name.setdefault(str(e.get("name", "fedavg")), e)
    out = []
    for name in [names] if isinstance(names, str) else names:
        found = by_label.get(name) or by_name.get(name)
        out.append(copy.deepcopy(dict(found)) if found is not None else name)
    return out[0] if isinstance(names, str) else out


def _source_text(source: str | Path | None) -> str:
    name = "default" if source is None else str(source)
    if name in builtin_scenarios():
        return f"the built-in scenario '{name}', fedsim/scenarios/{name}.yaml; `fedsim show {name}` prints it"
    return f"'{name}'"


def apply_overrides(data: dict[str, Any], overrides: list[str], source: str | Path | None = None,
                    algorithms: AlgorithmResolver | None = None) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML) to a raw scenario mapping.

    With several algorithms, ``algorithm.<label>.field=v`` (or ``algorithm.<index>.field=v``) sets one
    variant's field, by the label ``fedsim show`` shows (``algorithms`` resolves a ``module:Class``
    without a label to its class's name); ``algorithm=a,b`` replaces the variants, each keeping the
    scenario's settings of the algorithm of that label or name."""
    data = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError("override", f"'{item}' is not key=value (e.g. algorithm.buffer_size=5)")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError("override", f"'{item}' has an empty key")
        try:
            value = parse_yaml(raw, key, f"the value of {key}") if raw.strip() else ""
        except ConfigError as exc:
            if "not valid YAML" not in exc.message or "given twice" in exc.message:
                raise
            value = raw  # not YAML: taken as the text it is
        parts = key.split(".")
        node: Any = data
        if parts == ["algorithm"] and isinstance(value, str) and "," in value:  # algorithm=a,b: one variant each
            value = [v.strip() for v in value.split(",") if v.strip()]
        if parts == ["algorithm"] and (isinstance(value, str) or isinstance(value, list) and value
                                       and all(isinstance(v, str) for v in value)):
            data["algorithm"] = _kept_settings(data.get("algorithm"), value, algorithms, (source_dir_of(source),))
            continue
        single = data.get("algorithm", "fedavg")
        if parts[0] == "algorithm" and len(parts) > 2 and isinstance(single, (str, Mapping)):
            # one algorithm, addressed by its label as a list's would be: algorithm.<label>.field
            prefix = f"algorithm.{_shown_label(single, algorithms, (source_dir_of(source),))}."
            if key.startswith(prefix):
                parts = ["algorithm", *key[len(prefix):].split(".")]
        if parts[0] == "algorithm" and len(parts) > 1 and isinstance(data.get("algorithm"), list):
            node, parts = _algorithm_entry(data, key, source, algorithms)
            if not parts:
                raise ConfigError(key, "names an algorithm; set one of its fields (e.g. "
                                  f"{key}.concurrency=5) or replace all with algorithm=a,b")
            parts = ["_"] + parts
            node = {"_": node}
        for i, part in enumerate(parts[:-1]):
            if part == "algorithm" and i == 0 and isinstance(node.get("algorithm"), str):
                node["algorithm"] = {"name": node["algorithm"]}
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(key, f"'{'.'.join(parts[: i + 1])}' is not a section")
            node = nxt
        node[parts[-1]] = value
    return data


def source_dir_of(source: str | Path | None) -> Path | None:
    """The folder of a scenario file (None for a built-in scenario)."""
    if source is None or str(source) in builtin_scenarios() and not Path(str(source)).is_file():
        return None
    return Path(source).resolve().parent


def load_scenario(source: str | Path | None = None, overrides: list[str] | None = None, *,
                  algorithms: AlgorithmResolver) -> Scenario:
    """Load, override and validate a scenario (built-in name, YAML path, or None for the default)."""
    return scenario_from_mapping(apply_overrides(load_raw(source), overrides or [], source, algorithms), algorithms=algorithms,
                                 source_dir=source_dir_of(source))


def dump_scenario(scenario: Scenario) -> str:
    """The resolved scenario as YAML (saved with every run)."""
    return yaml.safe_dump(scenario.as_mapping(), sort_keys=False)


