"""quest_geometric.models."""
