"""Evaluation without a server: speculative decoding simulated from the recorded replies.

``drafters`` holds the model-free drafters and their exact simulation (numpy only);
``simulation`` scores a suite's estimate of the simulated figures against the whole corpus
(``distprompt simulate``, public as :func:`distprompt.simulate_suite`).
"""

from distprompt.evaluate.drafters import (
    DEFAULT_DRAFTERS,
    DRAFTER_KINDS,
    Drafter,
    SpecCounts,
    simulate,
    simulate_many,
)

__all__ = [
    "DEFAULT_DRAFTERS",
    "DRAFTER_KINDS",
    "Drafter",
    "SpecCounts",
    "simulate",
    "simulate_many",
]
