"""Fixtures shared across test modules."""

pytest_plugins = ("test_results_fixture",)  # finished_spec: one finished study for the results tests
