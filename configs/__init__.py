"""Embedded specs as package data: models/, hardware/, workloads/, plans/ and profiles/ YAML files.

Installed as `rackplan.configs`; `rackplan.specs.CONFIG_DIR` points here (or at $RACKPLAN_CONFIGS).
"""
