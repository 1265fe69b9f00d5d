"""The SimPy world: workloads, replicas, latency models, metrics and the runner.

`sim` never imports torch (optional extras are imported lazily inside functions), so a planner can
simulate without a GPU stack. Entry points: `sim.config.load_config`, `sim.runner.simulate`, and the
`servesim simulate` command (`servesim.commands.simulate`).
"""
