"""The query/key geometry study: trajectories, the key-spectrum intervention, the
comparison of finished studies and the probe of a pretrained model. See README.md."""
