"""The noise-aware estimate, where the results layer has always imported it from: it lives in
:mod:`autotune.study.search.estimate` since warm start (a study layer module) ranks an earlier study by it."""

from autotune.study.search.estimate import (
    CONFIDENCE_Z,
    MIN_CONFIGURATIONS,
    RIDGE,
    Estimate,
    beyond_noise,
    by_estimate,
    dominated,
    estimates,
    handed_over,
    key_of,
)

__all__ = ["CONFIDENCE_Z", "MIN_CONFIGURATIONS", "RIDGE", "Estimate", "beyond_noise", "by_estimate", "dominated", "estimates",
           "handed_over", "key_of"]
