"""The reasoning loop one job runs, step by step: the state machine (machine.py), the driver that
applies it to a sequence (driver.py) and the loop that drives every job's driver with its
budget (loop.py). Decode serves through it; `stepwise eval` measures through it."""
