"""Small models for tests and examples, built in code with seeded random weights."""

from __future__ import annotations

from typing import Any

import numpy as np


def relax_linear(seed: int = 0) -> Any:
    """A Relax module from relax.frontend.nn (entry "forward"): relu(x @ W^T + b) for x of shape (2, 16), the
    weights (scale 0.1) bound as constants."""
    from tvm.relax.frontend import nn

    from autosched._tvm import relax, tvm

    class Tiny(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(16, 8)

        def forward(self, x):
            return nn.relu(self.fc(x))

    mod, params = Tiny().export_tvm(spec={"forward": {"x": nn.spec.Tensor((2, 16), "float32")}})
    rng = np.random.default_rng(seed)
    weights = {k: tvm.runtime.tensor((rng.standard_normal([int(d) for d in p.shape]) * 0.1).astype("float32"))
               for k, p in params}
    return relax.transform.BindParams("forward", weights)(mod)
