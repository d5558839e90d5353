"""The query/key geometry study: the full configuration, the key-spectrum intervention, the
probing overhead, pretrained checkpoints and intervals over runs, built on the package's
trajectory pipeline (:mod:`quest_geometric.pipelines.qk_geometry`); the comparison of
finished studies and the probe of a pretrained model. See README.md."""
