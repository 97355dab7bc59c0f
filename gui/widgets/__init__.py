"""Widgets the docks and dialogs share: steady text, forms built from declarations, colours, background work."""
