import os
import tempfile

os.environ.setdefault("COLUMNS", "120")
# Tests never read a warm cache of sampled imbalance points (sim/cost/imbalance.py): a fresh,
# empty folder per session (subprocesses inherit it).
os.environ["RACKPLAN_CACHE_DIR"] = tempfile.mkdtemp(prefix="rackplan-test-cache-")
