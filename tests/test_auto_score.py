"""The energy score: golden values worked out by hand (score=auto's rule: tests/test_auto_choice.py)."""

import numpy as np

from kamalcli.probe.measured import energy


def test_energy_is_the_log_sum_exp_of_the_logits():
    assert np.allclose(energy(np.array([[0.0, 0.0], [1.0, 2.0], [1000.0, 1000.0]])),
                       [0.693147, 2.313262, 1000.693147], atol=1e-6)
