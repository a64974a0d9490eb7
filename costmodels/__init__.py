"""costlab.costmodels: torch modules (TLP net, PaCM net, multi-task heads, Siamese momentum wrapper),
losses and ranking metrics."""
