"""``torch.compile(backend="autosched")`` at every call of a built graph, and LLM generation through it: tiny models,
no tuning (``time=0``), tokens against eager PyTorch's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import autosched  # noqa: E402


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("torch_generation") / "torch.db")


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()


@pytest.mark.slow
def test_calls_of_a_built_graph_are_profiled_and_cost_microseconds(db):
    torch._dynamo.reset()
    model, x = mlp(), torch.randn(2, 16)
    backend = autosched.backend(db=db, time=0, threads=1, verbose=False)
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(50):
            assert torch.allclose(compiled(x), model(x), atol=1e-5)
    profile = backend.profile
    assert profile.calls == 50 and profile.builds == 1 and profile.eager_calls == 0, profile
    us = profile.per_call_us()
    assert us["lookup"] + us["check"] < 200 and us["handoff"] < 500, profile  # microseconds, on a loaded machine
    assert "50 calls" in str(profile)
    with torch.no_grad():
        assert torch.allclose(compiled(x.t().contiguous().t()), model(x), atol=1e-5)  # strided: copied in


@pytest.mark.slow
def test_a_weight_changed_in_place_is_noticed_at_the_next_call(db):
    torch._dynamo.reset()
    model, x = mlp(), torch.randn(2, 16)
    backend = autosched.backend(db=db, time=0, threads=1, verbose=False)
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        before = compiled(x)
        model[2].bias.add_(1.0)  # the same tensor, its version counter moved on
        after = compiled(x)
    assert torch.allclose(after, before + 1.0, atol=1e-5) and torch.allclose(after, model(x), atol=1e-5)
    assert backend.profile.builds == 2 and [s.mode for s in backend.stats] == ["autosched"] * 2
