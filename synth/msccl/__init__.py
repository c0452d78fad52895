"""MSCCL XML: runtime profiles, reading (importer), load rules and writing (exporter)."""
