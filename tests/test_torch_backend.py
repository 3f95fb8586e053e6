"""``torch.compile(model, backend="autosched")``: tiny models, one thread, no tuning except where a test needs
records; outputs against eager PyTorch."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import autosched  # noqa: E402
from autosched import torch_backend  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class SmallCNN(torch.nn.Module):
    """A torchvision-like CNN: stem, a residual block, a strided block, pooling, a classifier."""

    def __init__(self, width: int = 8, classes: int = 10):
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, width, 3, padding=1, bias=False), torch.nn.BatchNorm2d(width), torch.nn.ReLU()
        )
        self.block = torch.nn.Sequential(
            torch.nn.Conv2d(width, width, 3, padding=1, bias=False), torch.nn.BatchNorm2d(width)
        )
        self.down = torch.nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        x = torch.relu(self.down(x))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    return SmallCNN().eval()


def close(got, want, rtol=1e-4) -> bool:
    return bool(torch.allclose(got, want, rtol=rtol, atol=rtol * float(want.abs().max())))


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("torch_backend") / "torch.db")


@pytest.fixture(scope="module")
def tuned_cnn(db):
    """The CNN compiled with seconds of tuning into ``db`` (the records the reuse test looks up; the budget covers
    the import and the tuning session's start too)."""
    torch._dynamo.reset()
    backend = autosched.backend(db=db, time="20s", threads=1, verbose=False)
    model = cnn()
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        first = compiled(x)
    return model, compiled, backend, x, first


@pytest.mark.slow
def test_a_cnn_is_tuned_at_its_first_call_and_matches_eager(tuned_cnn):
    model, compiled, backend, x, first = tuned_cnn
    with torch.no_grad():
        want = model(x)
        again = compiled(x)
    assert close(first, want) and close(again, want)
    [stats] = backend.stats
    assert stats.mode == "autosched" and stats.n_tasks > 0 and stats.n_tuned == stats.n_tasks
    assert stats.n_new_records > stats.n_tasks and stats.max_error < 1e-4  # more than the baselines
    assert stats.sources.get("tuned", 0) > 0
    assert isinstance(again, torch.Tensor) and again.dtype == torch.float32


@pytest.mark.slow
def test_non_contiguous_inputs_and_other_sizes_give_eager_results(db):
    model = cnn()
    backend = autosched.backend(db=db, time=0, threads=1, verbose=False)
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for x in (
            torch.randn(1, 3, 16, 16).to(memory_format=torch.channels_last),
            torch.randn(1, 16, 16, 3).permute(0, 3, 1, 2),
            torch.randn(2, 3, 12, 12),
        ):  # a new size: dynamo passes its dimensions as integers
            assert close(compiled(x), model(x))
    assert len(backend.stats) >= 2 and all(s.mode == "autosched" for s in backend.stats)


@pytest.mark.slow
def test_weights_changed_in_place_are_picked_up(tuned_cnn):
    model, compiled, backend, x, _ = tuned_cnn
    n_builds = len(backend.stats)
    with torch.no_grad():
        model.fc.weight.mul_(2.0)
        assert close(compiled(x), model(x))
        assert close(compiled(x), model(x))
        model.fc.weight.div_(2.0)
    assert len(backend.stats) == n_builds + 1  # rebuilt once, from the database
    assert backend.stats[-1].n_tuned == 0 and backend.stats[-1].mode == "autosched"


@pytest.mark.slow
def test_a_graph_that_writes_to_its_input_gets_it_written_back_or_runs_eagerly(db, caplog):
    class AddInPlace(torch.nn.Module):
        def forward(self, x):
            x.add_(1.0)
            return x * 2.0

    class WriteThroughAView(torch.nn.Module):
        def forward(self, x):
            x[:2].add_(1.0)
            return x * 2.0

    backend = autosched.backend(db=db, time=0, threads=1, verbose=False)
    compiled = torch.compile(AddInPlace(), backend=backend)
    x = torch.zeros(4)
    for calls in (1, 2):  # made functional: the new value written back into the caller's tensor
        y = compiled(x)
        assert torch.equal(x, torch.full((4,), float(calls))) and torch.equal(y, torch.full((4,), 2.0 * calls))
    [stats] = backend.stats
    assert stats.mode == "autosched" and backend.profile.calls == 2
    torch._dynamo.reset()
    compiled = torch.compile(WriteThroughAView(), backend=backend)
    x = torch.zeros(4)
    with caplog.at_level(logging.WARNING, logger="autosched.torch"):
        y = compiled(x)
    assert torch.equal(x, torch.tensor([1.0, 1.0, 0.0, 0.0])) and torch.equal(y, 2 * x)
    assert backend.stats[-1].mode == "eager" and "in place" in backend.stats[-1].reason


@pytest.mark.slow
def test_a_second_process_with_the_same_database_tunes_nothing(tuned_cnn, db):
    script = textwrap.dedent(f"""
        import json, sys, torch
        sys.path.insert(0, {str(ROOT / "tests")!r})
        import autosched
        from test_torch_backend import cnn
        backend = autosched.backend(db={db!r}, time="30s", threads=1, verbose=False)
        model = cnn()
        x = torch.randn(1, 3, 16, 16)
        with torch.no_grad():
            ok = torch.allclose(torch.compile(model, backend=backend)(x), model(x), rtol=1e-4, atol=1e-4)
        [s] = backend.stats
        print(json.dumps({{"ok": ok, "tuned": s.n_tuned, "new": s.n_new_records, "records": s.n_records,
                           "sources": s.sources, "build_s": s.build_s}}))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"] and result["tuned"] == 0 and result["new"] == 0
    assert result["records"] == tuned_cnn[2].stats[0].n_records
    assert result["sources"] == tuned_cnn[2].stats[0].sources
    assert result["build_s"] < 20  # no budget spent


@pytest.mark.slow
def test_tune_again_gives_tasks_with_records_more_search(tuned_cnn, db):
    """A rerun tunes nothing by default; ``tune_again`` spends its budget on every task of the graph, resuming from
    the records (an earlier, shorter budget's unsearched tasks get rounds)."""
    model, _, first_backend, x, _ = tuned_cnn
    torch._dynamo.reset()
    backend = autosched.backend(db=db, time="20s", threads=1, verbose=False, tune_again=True)
    with torch.no_grad():
        assert close(torch.compile(model, backend=backend)(x), model(x))
    [stats] = backend.stats
    assert stats.mode == "autosched" and stats.n_tuned == stats.n_tasks == first_backend.stats[0].n_tasks
    assert stats.n_new_records > 0 and stats.n_records == first_backend.stats[0].n_records + stats.n_new_records
    assert "tune_again=True" in repr(backend)


@pytest.fixture(scope="module")
def transformers():
    from autosched.corpus.catalog import _torchvision

    _torchvision()  # a torchvision built for another torch variant would break transformers' import
    return pytest.importorskip("transformers")


def _hf_model(transformers, name: str):
    torch.manual_seed(0)
    tf = transformers
    if name == "bert":
        return tf.BertModel(
            tf.BertConfig(
                vocab_size=100,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                max_position_embeddings=64,
            )
        ).eval()
    if name == "gpt2":
        return tf.GPT2LMHeadModel(
            tf.GPT2Config(
                vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=0, eos_token_id=0
            )
        ).eval()
    return tf.LlamaForCausalLM(
        tf.LlamaConfig(
            vocab_size=100,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=64,
        )
    ).eval()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_hugging_face_models_from_a_config_match_eager(transformers, db, name):
    model = _hf_model(transformers, name)
    backend = autosched.backend(db=db, time=0, threads=1, verbose=False)
    compiled = torch.compile(model, backend=backend)
    ids = torch.randint(0, 100, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got, want = compiled(ids), model(ids)
    field = "last_hidden_state" if name == "bert" else "logits"
    assert close(getattr(got, field), getattr(want, field))
    assert backend.stats and all(s.mode == "autosched" for s in backend.stats), backend.stats
    assert all(s.n_tuned == 0 and s.n_new_records == 0 for s in backend.stats)  # time=0: looked up only


@pytest.mark.slow
def test_an_unsupported_operator_runs_eagerly_with_one_line(db, caplog, capsys):
    class Spectrum(torch.nn.Module):
        def forward(self, x):
            return torch.fft.rfft(x).abs() + 1.0

    backend = autosched.backend(db=db, time=0, threads=1)
    compiled = torch.compile(Spectrum(), backend=backend)
    x = torch.randn(2, 4, 8)
    with caplog.at_level(logging.WARNING, logger="autosched.torch"):
        for _ in range(3):
            assert torch.equal(compiled(x), Spectrum()(x))
    lines = [r.getMessage() for r in caplog.records if r.name == "autosched.torch"]
    assert len(lines) == 1 and "_fft_r2c" in lines[0] and "eagerly" in lines[0], lines
    assert "autosched" not in capsys.readouterr().err  # nothing else said
    [stats] = backend.stats
    assert stats.mode == "eager" and "_fft_r2c" in stats.reason


class LSTMClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16, batch_first=True)
        self.head = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y[:, -1])


@pytest.mark.slow
def test_an_lstm_gives_eager_results(db, caplog):
    torch.manual_seed(0)
    model, x = LSTMClassifier().eval(), torch.randn(2, 5, 8)
    backend = autosched.backend(db=db, time=0, threads=1, verbose=False)
    with torch.no_grad():
        assert close(torch.compile(model, backend=backend)(x), model(x))  # dynamo runs the LSTM eagerly itself
        torch._dynamo.reset()
        with torch._dynamo.config.patch(allow_rnn=True), caplog.at_level(logging.WARNING, "autosched.torch"):
            assert close(torch.compile(model, backend=backend)(x), model(x))  # the LSTM comes to the backend
    [line] = [r.getMessage() for r in caplog.records if r.name == "autosched.torch"]
    assert "lstm" in line and "eagerly" in line


def test_the_backend_is_registered_by_name_and_through_the_entry_point():
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("autosched") is torch_backend.autosched_backend
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    target = project["entry-points"]["torch_dynamo_backends"]["autosched"]
    module, _, name = target.partition(":")
    assert getattr(__import__(module, fromlist=[name]), name) is torch_backend.autosched_backend


@pytest.mark.slow
def test_the_named_backend_takes_torch_compile_options(db):
    torch._dynamo.reset()
    model, x = cnn(), torch.randn(1, 3, 8, 8)
    options = {"db": db, "time": 0, "threads": 1, "verbose": False}
    compiled = torch.compile(model, backend="autosched", options=options)
    with torch.no_grad():
        assert close(compiled(x), model(x))
    backend = torch_backend._BY_OPTIONS[tuple(sorted((k, str(v)) for k, v in options.items()))]
    assert backend.db == db and backend.time_s == 0 and [s.mode for s in backend.stats] == ["autosched"]
    with pytest.raises(autosched.UserInputError, match="unknown autosched option"):
        torch_backend.autosched_backend(None, [], options={"trials": 3})


def test_the_entry_point_loads_the_backend_in_a_fresh_process(tmp_path):
    """As installed: dynamo finds the name in the entry points and loads it (importing the module, which must not
    register the name a second time)."""
    info = tmp_path / "autosched_entry_point_check-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: autosched-entry-point-check\nVersion: 0\n")
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["torch_dynamo_backends"]
    (info / "entry_points.txt").write_text(f"[torch_dynamo_backends]\nautosched = {target['autosched']}\n")
    script = (
        "import torch, torch._dynamo, sys; from torch._dynamo.backends.registry import lookup_backend; "
        "fn = lookup_backend('autosched'); assert 'autosched.torch_backend' in sys.modules; "
        "print(fn is sys.modules['autosched.torch_backend'].autosched_backend)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "True"


def test_options_are_checked_and_the_default_database_is_per_user(monkeypatch, tmp_path):
    with pytest.raises(autosched.UserInputError, match="time"):
        autosched.backend(time="soon")
    with pytest.raises(autosched.UserInputError, match="threads"):
        autosched.backend(threads=-1)
    with pytest.raises(autosched.UserInputError, match="llvm"):
        autosched.backend(target="cuda")
    assert autosched.backend(time="90s").time_s == 90 and autosched.backend(time=0).time_s == 0
    monkeypatch.delenv("AUTOSCHED_DB", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert autosched.backend().db == str(tmp_path / "autosched" / "torch.db")
    monkeypatch.setenv("AUTOSCHED_DB", str(tmp_path / "mine.db"))
    assert torch_backend.default_database() == str(tmp_path / "mine.db")
