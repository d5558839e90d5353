"""The small end-to-end pipelines the ``tour`` runs: each trains or times, and tabulates one
question on embedded data (``run(...)`` returning rows, a summary and a markdown table).

The full studies in the repository's ``benchmarks/`` folder run the same functions at their
full settings, with the investigations that only a study's author reruns.
"""
