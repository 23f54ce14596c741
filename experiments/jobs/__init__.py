"""Training jobs: collectives over ranks, steps of collectives and compute, and their records.

- :mod:`experiments.jobs.collectives`: what a job is (:class:`~experiments.jobs.collectives.Job`,
  :class:`~experiments.jobs.collectives.Collective`) and the sans-IO state machine of one rank
  in one collective (:class:`~experiments.jobs.collectives.RankMachine`): fed completions, it
  emits WRITE_IMM requests.
- :mod:`experiments.jobs.steps`: the per-step record (``steps.jsonl``), the job summary (step
  time percentiles, slowdown against a fault-free baseline, steps each fault touched) and the
  nccl-tests-style sweep table.
- :mod:`experiments.jobs.sim`: a job and a sweep on the in-memory network (virtual time).

The agents' driver is :class:`experiments.flows.collective.CollectiveFlows`.
"""
