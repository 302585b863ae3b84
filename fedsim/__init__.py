"""fedsim: discrete-event simulation of federated and split learning on heterogeneous devices.

The Python API (the same validation and run folders as the ``fedsim`` command)::

    import fedsim
    sc = fedsim.load_scenario("default", ["stop.max_time_s=5"])      # validated Scenario
    res = fedsim.run("default", stop__max_time_s=5, out="runs/demo")  # or fedsim.run(sc)
    res.summary            # summary.json of the run's algorithm (one-algorithm runs only)
    res.by_label["fedavg"] # with several algorithms, a summary per label; res.summaries in scenario order
    res.metrics            # pandas DataFrame: one row per evaluation, column ``label`` per algorithm
    res.trace              # pandas DataFrame of the event trace (docs/trace-format.md)

Keyword overrides use ``__`` for the dots of a field path (``stop__max_time_s=5`` is
``stop.max_time_s=5``); ``overrides=[...]`` takes ``key=value`` strings as the command line does.
"""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from fedsim.scenario import Scenario

__all__ = ["__version__", "load_scenario", "scenario_from_mapping", "run", "RunResult"]


def scenario_from_mapping(data: "Mapping[str, Any]", overrides: list[str] | None = None, *,
                          source_dir: "str | Path | None" = None) -> "Scenario":
    """A validated scenario from a plain mapping (as a YAML file would hold), with ``key=value`` overrides.

    Algorithm, model and dataset ``name`` fields may hold the class or function object itself."""
    from fedsim import scenario as _sc
    from fedsim.algorithms import describe as resolve

    raw = _sc.apply_overrides(dict(data), overrides or []) if overrides else data
    return _sc.scenario_from_mapping(raw, algorithms=resolve, source_dir=None if source_dir is None else Path(source_dir))


def load_scenario(source: "str | Path | Scenario | Mapping[str, Any] | None" = None,
                  overrides: list[str] | None = None) -> "Scenario":
    """A validated scenario from a built-in name, a YAML path, a mapping or a Scenario, with ``key=value``
    overrides."""
    from fedsim import scenario as _sc
    from fedsim.algorithms import describe as resolve

    if isinstance(source, _sc.Scenario):
        return _sc.scenario_from_mapping(_sc.apply_overrides(source.as_mapping(), overrides or []), algorithms=resolve,
                                         source_dir=source.source_dir)
    if isinstance(source, Mapping):
        return scenario_from_mapping(source, overrides)
    return _sc.load_scenario(source, overrides, algorithms=resolve)


@dataclass
class RunResult:
    """What a run left in its folder, loaded: summaries, metrics and trace (one ``label`` per algorithm)."""

    out: Path
    summaries: list[dict[str, Any]]
    _metrics: Any = field(default=None, repr=False)
    _trace: Any = field(default=None, repr=False)

    @property
    def labels(self) -> list[str]:
        """The algorithms' labels, in scenario order."""
        return [s["label"] for s in self.summaries]

    @property
    def by_label(self) -> dict[str, dict[str, Any]]:
        """Each algorithm's summary by its label (the sub-folder it ran in)."""
        return {s["label"]: s for s in self.summaries}

    @property
    def summary(self) -> dict[str, Any]:
        """The summary of a one-algorithm run.  A run of several algorithms has one per label: taking the
        first one silently would report one algorithm's numbers as the run's, so it is refused."""
        if len(self.summaries) != 1:
            from fedsim.errors import FedsimError

            raise FedsimError(f"this run has {len(self.summaries)} algorithms ({', '.join(self.labels)}): take one "
                              f"with res.by_label[{self.labels[0]!r}], or all with res.summaries")
        return self.summaries[0]

    def _folders(self) -> list[tuple[str, Path]]:
        if len(self.summaries) == 1:
            return [(self.summaries[0]["label"], self.out)]
        return [(s["label"], self.out / s["label"]) for s in self.summaries]

    @property
    def metrics(self) -> "pd.DataFrame":
        """Every evaluation (virtual time ``t``, version, accuracy, loss, bytes), per algorithm ``label``."""
        import pandas as pd

        if self._metrics is None:
            frames = [pd.read_csv(d / "metrics.csv").assign(label=label) for label, d in self._folders()
                      if (d / "metrics.csv").exists()]
            self._metrics = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        return self._metrics

    @property
    def trace(self) -> "pd.DataFrame":
        """The event trace of every algorithm (``label`` column); see docs/trace-format.md."""
        import pandas as pd

        from fedsim.sim.trace import TRACE_FILES, load_trace

        if self._trace is None:
            frames = [load_trace(d).assign(label=label) for label, d in self._folders()
                      if any((d / name).exists() for name in TRACE_FILES.values())]
            self._trace = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        return self._trace


def run(scenario: "str | Path | Scenario | None" = None, *, out: str | Path | None = None,
        overrides: list[str] | None = None, progress: bool = False, force: bool = False,
        allow_large: bool = False, **fields: Any) -> RunResult:
    """Validate and run a scenario (built-in name, YAML path or Scenario) into ``out`` (default: a new
    temporary folder); ``fields`` are overrides with ``__`` for dots.  Bad input raises
    ``fedsim.errors.ConfigError`` naming the field, before anything is written."""
    from fedsim.runner import run_scenario

    items = list(overrides or []) + [f"{k.replace('__', '.')}={json.dumps(v)}" for k, v in fields.items()]
    sc = load_scenario(scenario, items)
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="fedsim-"))
    summaries = run_scenario(sc, folder, progress=progress, force=force, allow_large=allow_large)
    return RunResult(folder, summaries)
