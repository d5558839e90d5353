"""The central operators (``QSVConv``, Focus's block decomposition, Focus composed onto
SmolLM2) timed on two checkouts side by side: does a change keep their speed? See README.md."""
