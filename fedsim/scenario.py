"""Scenarios: what to simulate, as validated dataclasses loaded from YAML (the public façade).

A scenario has one section per layer (data, model, train, devices, channel, network, availability,
server, algorithm, stop, eval, output).  Every field has a default except the stop rules (a scenario says
when its run ends, so ``{stop: {max_versions: 30}}`` is the smallest scenario); the built-in scenarios live in
``fedsim/scenarios/*.yaml``.  ``key=value`` overrides address fields with dotted paths
(``algorithm.buffer_size=5``, ``data.partition.alpha=0.1``).  ``algorithm`` may also be a list of
algorithm mappings: the scenario then runs each variant on the same world and data.

The work is done in three modules, one job each; the names are importable from here:
:mod:`fedsim.scenario_sections` (the section dataclasses, ``Scenario``, link fields in effect, plausibility),
:mod:`fedsim.scenario_loading` (mappings and YAML into a ``Scenario``, overrides, paths, ``dump_scenario``) and
:mod:`fedsim.scenario_reference` (the generated field reference).
"""
from __future__ import annotations

from fedsim.scenario_loading import (apply_overrides, builtin_scenarios, dump_scenario, load_raw, load_scenario,
                                     scenario_from_mapping, source_dir_of)
from fedsim.scenario_reference import (field_reference)
from fedsim.scenario_sections import (AlgorithmResolver, AlgorithmSpec, AvailabilityConfig, CapabilityConfig,
                                      ChannelSection, DEVICE_CHOICES, DEVICE_PATTERN, DataConfig, DeviceGroup,
                                      DevicesConfig, EvalConfig, FIELD_MODELS, LABEL, LinkConfig, MobilityConfig,
                                      ModelConfig, NetworkConfig, OutputConfig, PATHLOSS_MODELS_ALL, PLAUSIBLE,
                                      PartitionConfig, Plausible, PositionsConfig, RATE_ONLY_MODELS, SECTIONS,
                                      Scenario, ServerConfig, StopConfig, TOP_LEVEL, TopologyConfig, TrainConfig,
                                      check_label, check_link_effect, link_fields_in_effect, plausibility_warnings,
                                      warn_implausible)

__all__ = ["AlgorithmResolver", "AlgorithmSpec", "AvailabilityConfig", "CapabilityConfig", "ChannelSection", "DEVICE_CHOICES", "DEVICE_PATTERN", "DataConfig", "DeviceGroup", "DevicesConfig", "EvalConfig", "FIELD_MODELS", "LABEL", "LinkConfig", "MobilityConfig", "ModelConfig", "NetworkConfig", "OutputConfig", "PATHLOSS_MODELS_ALL", "PLAUSIBLE", "PartitionConfig", "Plausible", "PositionsConfig", "RATE_ONLY_MODELS", "SECTIONS", "Scenario", "ServerConfig", "StopConfig", "TOP_LEVEL", "TopologyConfig", "TrainConfig", "apply_overrides", "builtin_scenarios", "check_label", "check_link_effect", "dump_scenario", "field_reference", "link_fields_in_effect", "load_raw", "load_scenario", "plausibility_warnings", "scenario_from_mapping", "source_dir_of", "warn_implausible"]
