"""quest_geometric.training."""
