"""The query/key geometry study: the full configuration, the key-spectrum intervention, the
probing overhead, pretrained checkpoints and intervals over runs, built on the trajectory
pipeline (:mod:`benchmarks.qk_geometry.trajectories`); the comparison of finished studies and
the probe of a pretrained model (over :mod:`quest_geometric.pipelines.qk_geometry`, which also
holds the tour's small run). See README.md."""
