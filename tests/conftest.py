import atexit
import os
import shutil
import tempfile

os.environ.setdefault("COLUMNS", "120")
# Tests never read a warm cache of sampled imbalance points (sim/cost/imbalance.py): a fresh,
# empty folder per session (subprocesses inherit it).
os.environ["RACKPLAN_CACHE_DIR"] = tempfile.mkdtemp(prefix="rackplan-test-cache-")
# ... removed when the session ends (a test run leaves nothing behind in the temp folder).
atexit.register(shutil.rmtree, os.environ["RACKPLAN_CACHE_DIR"], ignore_errors=True)
