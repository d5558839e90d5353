"""The small demonstrations the ``tour`` runs, one module per study, each composed from the
library's public API: a short training run on embedded data and one short table
(``run(out_dir, ...)`` returning at least ``markdown`` and ``summary``).

They show the library at work, not the studies' results: the studies, at their full
settings, are in the repository's ``benchmarks/`` folder.
"""
