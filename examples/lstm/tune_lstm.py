"""Recurrent model: a word-level language model (embedding, 2-layer LSTM, linear over the vocabulary).
TVM's ONNX importer has no LSTM operator, so this model is imported through ``torch.export`` (the PyTorch
path) and checked against PyTorch; the recurrence is unrolled over the fixed sequence length.

    python examples/lstm/tune_lstm.py              # width 256, 32 steps, vocabulary 2000, 3 minutes of tuning
    python examples/lstm/tune_lstm.py --small --time 30s --db /tmp/lstm.db
"""

import torch
from torch import nn

from autosched.family_example import Example, run_example


class LanguageModel(nn.Module):
    def __init__(self, vocab=2000, d=256, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, d, layers, batch_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, input_ids):
        out, _ = self.lstm(self.embed(input_ids))
        return self.head(out)


def build(small: bool):
    vocab, d, steps = (200, 32, 8) if small else (2000, 256, 32)
    return LanguageModel(vocab, d), (torch.randint(0, vocab, (1, steps)),)


EXAMPLE = Example("lstm", build, ["input_ids"], via="torch")


if __name__ == "__main__":
    run_example(EXAMPLE)
