"""The environment a run sees: provenance (runner class, packages, git), determinism
settings applied inside recipe processes, the doctor preflight, and the probe scripts that
run in the recipe's interpreter. Nothing here imports torch at import time."""
