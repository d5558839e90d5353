"""quest_geometric.geometry."""
