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


def test_index_copy_without_index_put_matches_torch():
    from autosched.torch_mutations import index_copy

    x, source = torch.randn(1, 2, 8, 4), torch.randn(1, 2, 3, 4)
    index = torch.tensor([5, 0, 2])
    assert torch.equal(index_copy(x, 2, index, source), x.index_copy(2, index, source))
    assert torch.equal(index_copy(x, -2, index[:1], source[:, :, :1]), x.index_copy(2, index[:1], source[:, :, :1]))


def test_in_place_writes_to_inputs_become_outputs_written_back():
    from autosched.torch_mutations import functionalize

    def step(cache, position, new, count):
        cache.index_copy_(2, position, new)
        count.add_(1)
        return cache.sum(dim=2) * 2

    gm = torch.fx.symbolic_trace(step)
    functional_gm, written = functionalize(gm)
    assert written == [0, 3]
    cache, count = torch.randn(1, 2, 8, 4), torch.zeros(1, dtype=torch.int64)
    position, new = torch.tensor([3]), torch.randn(1, 2, 1, 4)
    result, (new_cache, new_count) = functional_gm(cache.clone(), position, new, count.clone())
    want_cache, want_count = cache.clone(), count.clone()
    assert torch.equal(result, step(want_cache, position, new, want_count))
    assert torch.equal(new_cache, want_cache) and torch.equal(new_count, want_count)
    assert functionalize(torch.fx.symbolic_trace(lambda x: x * 2)) is None  # nothing written: the graph as it is


@pytest.fixture(scope="module")
def transformers():
    from autosched.corpus.catalog import _torchvision

    _torchvision()  # a torchvision built for another torch variant would break transformers' import
    return pytest.importorskip("transformers")


def tiny_llama(transformers):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.slow
def test_generate_with_a_static_cache_builds_two_graphs_once(transformers, db):
    """HF's recipe for torch.compile: fixed shapes, so a prefill graph and a decode graph (which writes the cache in
    place), and a second generate builds nothing; the tokens are eager PyTorch's."""
    torch._dynamo.reset()
    model = tiny_llama(transformers)
    ids = torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(0))
    options = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False, "cache_implementation": "static"}
    with torch.no_grad():
        want = model.generate(ids, **options)
        backend = autosched.backend(db=db, time=0, threads=1, verbose=False)
        model.forward = torch.compile(model.forward, backend=backend)
        first = model.generate(ids, **options)
        builds = backend.profile.builds
        second = model.generate(ids, **options)
    assert torch.equal(first, want) and torch.equal(second, want)
    assert builds == 2 and backend.profile.builds == 2, backend.stats  # prefill and decode, and nothing more
    assert all(s.mode == "autosched" for s in backend.stats) and backend.profile.eager_calls == 0, backend.stats
    assert backend.profile.calls == 12


@pytest.mark.slow
def test_the_budget_is_the_backends_and_new_sizes_are_refitted_not_tuned(tmp_path, capsys):
    """``time`` bounds all the graphs together: once spent, a graph dynamo captures later is built from the records
    only, and a new size of a built graph (the third size: dynamo passes it to the graph it made symbolic at the
    second) is built with the first size's schedules refitted, saying so once."""
    torch._dynamo.reset()
    model = mlp()
    backend = autosched.backend(db=str(tmp_path / "budget.db"), time=4, threads=1)
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for batch in (2, 3, 5, 7):
            x = torch.randn(batch, 16)
            assert torch.allclose(compiled(x), model(x), atol=1e-5)
    first, *later = backend.stats
    assert first.n_tuned > 0 and later and all(s.n_tuned == 0 and s.mode == "autosched" for s in later), backend.stats
    assert 0 < backend.spent_s < 4 + 30  # the one tuning run (its session's start included)
    assert capsys.readouterr().err.count("refitted") == 1


@pytest.mark.slow
def test_the_builds_of_a_graph_are_bounded_least_recently_called_dropped(db, capsys):
    torch._dynamo.reset()
    model = mlp()
    backend = autosched.backend(db=db, time=0, threads=1)
    backend.max_builds = 2
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for batch in (2, 3, 4, 5, 6, 4):  # dynamo's symbolic graph gets 3, 4, 5, 6: two kept, then 4 again
            x = torch.randn(batch, 16)
            assert torch.allclose(compiled(x), model(x), atol=1e-5)
    assert backend.profile.builds == 6  # 4 was dropped (5 and 6 called since) and built again
    assert capsys.readouterr().err.count("least recently called") == 1
