"""Accuracy benchmark (`rackplan accuracy`, rackplan/accuracy/): every published deployment in
benchmarks/cases/ predicted side by side with its published figure. This script is the same command.

Run:  python benchmarks/accuracy.py [--profile P ...] [--case ID ...] [--cases DIR] [--all] [--seed 0]
      [--json] [--out DIR] [--write-bands [FILE]]
"""
import sys

from rackplan.accuracy.command import main

if __name__ == "__main__":
    sys.exit(main())
