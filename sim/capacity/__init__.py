"""Capacity planning over `sim.runner.simulate`: sweeps, SLO search and the layout planner.

Every point of a sweep is a base config plus `a.b=v` overrides, evaluated independently with its
own seed from the config, so a table does not depend on which executor (local processes, Ray,
serial) ran it.
"""
from sim.capacity.slo import SLO, attainment
from sim.capacity.sweep import PointSpec, evaluate_point, expand_grid, expand_list, run_sweep

__all__ = ["SLO", "attainment", "PointSpec", "evaluate_point", "expand_grid", "expand_list", "run_sweep"]
