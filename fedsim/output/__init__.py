"""What a finished run or folder is shown with: the trace digest, the run's figures and report.html, the
report of a sweep or seeds folder, the second process that draws them, and ``fedsim compare``.

The package sits above the simulation: nothing under ``sim/``, ``learn/``, ``system/`` or ``algorithms/``
imports it (tests/test_pipeline.py)."""
