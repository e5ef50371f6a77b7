"""What benchmark scripts share, so that no benchmark imports another.

A script (``python benchmarks/<name>.py``, from the repository root with autotune installed) imports
it as ``harness.<module>``: Python puts the script's own folder, ``benchmarks/``, first on
``sys.path``, so no script touches ``sys.path``.

- ``faults``: the fault tables' rows, driver runs with a fault's marker, the marked processes, and
  what the study recorded around a fault (benchmarks/faults.py, benchmarks/faults_real.py).
- ``fault_child``: a study driver with one fault patched in, run as its own process.
- ``search``: the search benchmarks' cached offline evaluation, modelled noise, strategy runs and
  driver runs (benchmarks/search_efficiency.py, benchmarks/warm_start.py).
"""
