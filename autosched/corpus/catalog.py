"""The model corpus: real architectures from the libraries users take them from, built in code.

torchvision, timm, Hugging Face transformers, diffusers and segmentation-models-pytorch models (from their configs;
the last four families in ``builders``) plus small recurrent models, all with seeded random weights: nothing is
downloaded, no pretrained weight is ever used. ``size="full"`` is the
real model (224x224 images, sequence 128, real widths and depths, batch 1); ``size="small"`` runs the same
architecture code with fewer classes, a lower resolution, a shorter sequence and (where the constructor takes
them) narrower or shallower stages, so that a test imports and compiles it in seconds.

    module, inputs = build_module("resnet50", size="small")
    path = export_onnx("resnet50", "resnet50.onnx")            # torch.onnx.export, dynamo (opset 18)
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autosched.corpus import builders
from autosched.corpus.libraries import _timm, _torch, _torchvision, _transformers, import_library  # noqa: F401 (re-exported)
from autosched.errors import UnknownNameError, UserInputError

log = logging.getLogger("autosched.corpus")

SIZES = ("small", "full")
EXPORTERS = ("dynamo", "torchscript")


@dataclass(frozen=True)
class CorpusEntry:
    """One model: ``build(size)`` returns (module, example inputs) with the default initialisation."""

    name: str
    family: str  # cnn | mobile-cnn | vision-transformer | transformer-encoder | decoder | encoder-decoder | ...
    library: str  # torchvision | timm | transformers | diffusers | segmentation_models_pytorch | torch
    build: Callable[[str], tuple[Any, tuple]]
    input_names: tuple[str, ...] = ("x",)


# --- torchvision -----------------------------------------------------------------------------------------
def _image(size: str, small: int, full: int = 224) -> tuple:
    return (_torch().randn(1, 3, small if size == "small" else full, small if size == "small" else full),)


def _classes(size: str) -> int:
    return 10 if size == "small" else 1000


def _narrow_classifier(classifier: Any, in_features: int, hidden: int, n_classes: int) -> None:
    """Replace the Linear layers of a Sequential classifier (Linear, ReLU, Dropout, ...) by narrower ones."""
    nn = _torch().nn
    linears = [i for i, m in enumerate(classifier) if isinstance(m, nn.Linear)]
    sizes = [in_features] + [hidden] * (len(linears) - 1) + [n_classes]
    for k, i in enumerate(linears):
        classifier[i] = nn.Linear(sizes[k], sizes[k + 1])


def _alexnet(size: str) -> tuple[Any, tuple]:
    model = _torchvision().models.alexnet(num_classes=_classes(size))
    if size == "small":  # 224 x 224 is the smallest input whose features are 6 x 6 (what its avgpool expects)
        _narrow_classifier(model.classifier, 256 * 6 * 6, 128, 10)
    return model, _image(size, 224)


def _vgg(size: str) -> tuple[Any, tuple]:
    vgg = _torchvision().models.vgg
    if size == "full":
        return vgg.vgg11_bn(), _image(size, 224)
    widths = [c if c == "M" else c // 8 for c in vgg.cfgs["A"]]  # vgg11 at 1/8 of its widths
    model = vgg.VGG(vgg.make_layers(widths, batch_norm=True), num_classes=10)
    _narrow_classifier(model.classifier, 64 * 7 * 7, 128, 10)
    return model, _image(size, 224)  # features are 7 x 7 at 224, what VGG's avgpool expects


def _torchvision_classifier(fn: str, small_res: int = 64, full_res: int = 224, **small_kwargs: Any) -> Callable:
    def build(size: str) -> tuple[Any, tuple]:
        kwargs = small_kwargs if size == "small" else {}
        model = getattr(_torchvision().models, fn)(num_classes=_classes(size), **kwargs)
        return model, _image(size, small_res, full_res)

    return build


# Mobile networks are lists of distinct blocks, and compile time grows with the number of distinct fusion
# groups: at small size their classes get the first blocks of their own list, chosen to keep every kind of
# block (with and without expansion, squeeze-excitation, residual, stride 2, each activation and kernel size).
def _mobilenet_v2(size: str) -> tuple[Any, tuple]:
    tv = _torchvision().models
    if size == "full":
        return tv.mobilenet_v2(), _image(size, 224)
    blocks = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 2, 2]]  # t, c, n, s: no expansion; strided; residual
    return tv.mobilenet_v2(num_classes=10, width_mult=0.5, inverted_residual_setting=blocks), _image(size, 64)


def _mobilenet_v3(arch: str, n_small_blocks: int) -> Callable:
    def build(size: str) -> tuple[Any, tuple]:
        tv = _torchvision().models
        if size == "full":
            return getattr(tv, arch)(), _image(size, 224)
        blocks, last_channel = tv.mobilenetv3._mobilenet_v3_conf(arch, width_mult=0.5)
        return tv.mobilenetv3.MobileNetV3(blocks[:n_small_blocks], last_channel, num_classes=10), _image(size, 64)

    return build


def _efficientnet_b0(size: str) -> tuple[Any, tuple]:
    tv = _torchvision().models
    if size == "full":
        return tv.efficientnet_b0(), _image(size, 224)
    blocks, _ = tv.efficientnet._efficientnet_conf("efficientnet_b0", width_mult=1.0, depth_mult=1.0)
    return tv.efficientnet.EfficientNet(blocks[:4], dropout=0.2, num_classes=10), _image(size, 64)  # k3, k5, s1, s2


def _inception_v3(size: str) -> tuple[Any, tuple]:
    model = _torchvision().models.inception_v3(aux_logits=False, init_weights=True, num_classes=_classes(size))
    return model, _image(size, 75, 299)  # 75 x 75 is the smallest input it accepts


def _densenet121(size: str) -> tuple[Any, tuple]:
    models = _torchvision().models
    if size == "full":
        return models.densenet121(), _image(size, 224)
    # densenet121's layers are all distinct (the input width grows by 32 per layer): one block of each of its
    # four stages keeps the code path (dense layers, transitions, concatenations) at a tenth of the groups
    return models.densenet.DenseNet(32, (2, 2, 2, 2), 64, num_classes=10), _image(size, 64)


def _convnext_tiny(size: str) -> tuple[Any, tuple]:
    tv = _torchvision().models
    if size == "full":
        return tv.convnext_tiny(), _image(size, 224)
    stages = [tv.convnext.CNBlockConfig(48, 96, 1), tv.convnext.CNBlockConfig(96, 192, 1),
              tv.convnext.CNBlockConfig(192, 384, 1), tv.convnext.CNBlockConfig(384, None, 1)]
    return tv.convnext.ConvNeXt(stages, num_classes=10), _image(size, 64)


def _vit_b_16(size: str) -> tuple[Any, tuple]:
    tv = _torchvision().models
    if size == "full":
        return tv.vit_b_16(), _image(size, 224)
    model = tv.vision_transformer.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4,
                                                    hidden_dim=64, mlp_dim=128, num_classes=10)
    return model, _image(size, 32)


def _segmentation(fn: str) -> Callable:
    def build(size: str) -> tuple[Any, tuple]:
        seg = _torchvision().models.segmentation
        # weights_backbone defaults to ImageNet weights (a download): always None here
        model = getattr(seg, fn)(weights=None, weights_backbone=None, num_classes=4 if size == "small" else 21)
        return model, _image(size, 64, 224)

    return build


# --- timm ------------------------------------------------------------------------------------------------
def _timm_model(name: str, small_res: int = 64, **small_kwargs: Any) -> Callable:
    def build(size: str) -> tuple[Any, tuple]:
        kwargs = dict(small_kwargs, num_classes=10) if size == "small" else {}
        model = _timm().create_model(name, pretrained=False, **kwargs)
        return model, _image(size, small_res)

    return build


# --- Hugging Face transformers ---------------------------------------------------------------------------
def _seq(size: str) -> int:
    return 16 if size == "small" else 128


def _ids(vocab: int, size: str) -> Any:
    return _torch().randint(0, vocab, (1, _seq(size)))


_SMALL_TEXT = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=128, max_position_embeddings=64)


def _bert(size: str) -> tuple[Any, tuple]:
    tf = _transformers()
    config = tf.BertConfig(**_SMALL_TEXT) if size == "small" else tf.BertConfig()  # bert-base-uncased
    ids = _ids(config.vocab_size, size)
    return tf.BertModel(config, add_pooling_layer=True), (ids, _torch().ones_like(ids))


def _distilbert(size: str) -> tuple[Any, tuple]:
    tf = _transformers()
    small = dict(vocab_size=1000, dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64)
    config = tf.DistilBertConfig(**small) if size == "small" else tf.DistilBertConfig()
    ids = _ids(config.vocab_size, size)
    return tf.DistilBertModel(config), (ids, _torch().ones_like(ids))


def _gpt2(size: str) -> tuple[Any, tuple]:
    tf = _transformers()
    small = dict(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=64)
    config = tf.GPT2Config(**(small if size == "small" else {}), use_cache=False)  # gpt2 (124M)
    return tf.GPT2LMHeadModel(config), (_ids(config.vocab_size, size),)


def _t5(size: str) -> tuple[Any, tuple]:
    tf = _transformers()
    small = dict(vocab_size=1000, d_model=64, d_kv=16, num_heads=4, d_ff=128, num_layers=2, num_decoder_layers=2)
    config = tf.T5Config(**(small if size == "small" else {}), use_cache=False)  # t5-small
    ids = _ids(config.vocab_size, size)  # T5Model(input_ids, attention_mask, decoder_input_ids, ...)
    return tf.T5Model(config), (ids, _torch().ones_like(ids), _torch().roll(ids, 1, dims=1))


def _hf_vit(size: str) -> tuple[Any, tuple]:
    tf = _transformers()
    small = dict(_SMALL_TEXT, image_size=32, patch_size=8)
    small.pop("vocab_size"), small.pop("max_position_embeddings")
    config = tf.ViTConfig(**small) if size == "small" else tf.ViTConfig()  # vit-base-patch16-224
    return tf.ViTModel(config, add_pooling_layer=True), _image(size, 32)


# --- recurrent -------------------------------------------------------------------------------------------
def _recurrent(cell: str) -> Callable:
    def build(size: str) -> tuple[Any, tuple]:
        nn = _torch().nn
        vocab, dim, hidden = (100, 16, 32) if size == "small" else (10000, 256, 512)

        class RecurrentLM(nn.Module):  # embedding -> 2-layer LSTM/GRU -> linear (a word-level language model)
            def __init__(self) -> None:
                super().__init__()
                self.embed = nn.Embedding(vocab, dim)
                self.rnn = getattr(nn, cell)(dim, hidden, num_layers=2, batch_first=True)
                self.head = nn.Linear(hidden, vocab)

            def forward(self, ids: Any) -> Any:
                return self.head(self.rnn(self.embed(ids))[0])

        return RecurrentLM(), (_torch().randint(0, vocab, (1, 8 if size == "small" else _seq(size))),)

    return build


# --- the registry ----------------------------------------------------------------------------------------
def _entries() -> list[CorpusEntry]:
    tv, cls = "torchvision", _torchvision_classifier
    text, mask = ("input_ids", "attention_mask"), "transformer-encoder"
    return [
        CorpusEntry("alexnet", "cnn", tv, _alexnet),
        CorpusEntry("vgg11_bn", "cnn", tv, _vgg),
        CorpusEntry("inception_v3", "cnn", tv, _inception_v3),
        CorpusEntry("squeezenet1_0", "mobile-cnn", tv, cls("squeezenet1_0")),
        CorpusEntry("resnet50", "cnn", tv, cls("resnet50", width_per_group=16)),
        CorpusEntry("resnext50_32x4d", "cnn", tv, cls("resnext50_32x4d")),
        CorpusEntry("densenet121", "cnn", tv, _densenet121),
        CorpusEntry("shufflenet_v2_x1_0", "mobile-cnn", tv, cls("shufflenet_v2_x1_0")),
        CorpusEntry("mobilenet_v2", "mobile-cnn", tv, _mobilenet_v2),
        CorpusEntry("mobilenet_v3_small", "mobile-cnn", tv, _mobilenet_v3("mobilenet_v3_small", 6)),  # SE, HS
        CorpusEntry("mobilenet_v3_large", "mobile-cnn", tv, _mobilenet_v3("mobilenet_v3_large", 8)),  # RE, HS
        CorpusEntry("efficientnet_b0", "mobile-cnn", tv, _efficientnet_b0),
        CorpusEntry("regnet_y_400mf", "cnn", tv, cls("regnet_y_400mf")),
        CorpusEntry("convnext_tiny", "cnn", tv, _convnext_tiny),
        CorpusEntry("vit_b_16", "vision-transformer", tv, _vit_b_16),
        CorpusEntry("lraspp_mobilenet_v3_large", "segmentation", tv, _segmentation("lraspp_mobilenet_v3_large")),
        CorpusEntry("timm_convnext_atto", "cnn", "timm", _timm_model("convnext_atto")),
        # YOLOv5's backbone (CSP stages, Focus stem, SiLU), as timm configures it: the YOLO-style CNN of issue 52
        CorpusEntry("timm_cs3darknet_focus_s", "cnn", "timm", _timm_model("cs3darknet_focus_s")),
        CorpusEntry("timm_mobilevit_xxs", "mobile-cnn", "timm", _timm_model("mobilevit_xxs")),
        CorpusEntry("timm_vit_tiny", "vision-transformer", "timm",
                    _timm_model("vit_tiny_patch16_224", small_res=32, img_size=32, patch_size=8, depth=2)),
        CorpusEntry("bert", mask, "transformers", _bert, text),
        CorpusEntry("distilbert", mask, "transformers", _distilbert, text),
        CorpusEntry("gpt2", "decoder", "transformers", _gpt2, ("input_ids",)),
        CorpusEntry("t5", "encoder-decoder", "transformers", _t5, (*text, "decoder_input_ids")),
        CorpusEntry("hf_vit", "vision-transformer", "transformers", _hf_vit, ("pixel_values",)),
        CorpusEntry("whisper_encoder", "speech-encoder", "transformers", builders.whisper_encoder, ("input_features",)),
        CorpusEntry("timm_swin_tiny", "vision-transformer", "timm", builders.swin),
        CorpusEntry("sd_unet", "diffusion", "diffusers", builders.diffusion_unet,
                    ("sample", "timestep", "encoder_hidden_states")),
        CorpusEntry("smp_unet_resnet34", "segmentation", "segmentation_models_pytorch", builders.segmentation_unet),
        CorpusEntry("lstm", "recurrent", "torch", _recurrent("LSTM"), ("input_ids",)),
        CorpusEntry("gru", "recurrent", "torch", _recurrent("GRU"), ("input_ids",)),
    ]


CORPUS: dict[str, CorpusEntry] = {e.name: e for e in _entries()}


def entry(name: str) -> CorpusEntry:
    if name not in CORPUS:
        raise UnknownNameError("corpus model", name, list(CORPUS))
    return CORPUS[name]


def _randomise(module: Any) -> None:
    """Seeded randoms where the default initialisation is a constant that would hide a wrong kernel:
    batch-norm scales and shifts (an identity hides a wrong folding; as in ``zoo.py``), zero-initialised
    weights (ViT's classifier head and class token: with a zero head the output is the bias whatever the body
    computes), unit norm scales, and ConvNeXt's layer scale of 1e-6 (which scales a residual branch's error down
    by a million). Zero biases stay zero: a random bias swamps the input-dependent part of a small output."""
    torch = _torch()
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.affine:
                m.weight.copy_(torch.rand(m.num_features) + 0.5)
                m.bias.copy_(torch.randn(m.num_features) * 0.1)
        for p in module.parameters():
            if not (p.is_floating_point() and p.numel() > 1 and bool((p == p.flatten()[0]).all())):
                continue
            if float(p.flatten()[0]) != 0:  # norm scales (1), layer scales (1e-6)
                p.copy_(torch.rand(p.shape) + 0.5)
            elif p.dim() > 1:  # zero weights, tokens
                p.copy_(torch.randn(p.shape) * 0.1)


def _fan_in_init(module: Any) -> None:
    """He (fan-in) normal weights for every convolution and linear layer of a convolutional network: each
    layer keeps its input's scale, as a trained network's layers do. The libraries' initialisations are made
    for training from scratch and shrink the signal layer by layer (AlexNet's output depended on its input by
    5e-4 of its size; MobileNet's classifier, normal(0, 0.01), gave 0.005-sized logits), so an error in the
    body would hide under the tolerance of an output comparison."""
    torch = _torch()
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
                torch.nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")


def _calibrate_batch_norms(module: Any, inputs: tuple) -> None:
    """Batch-norm running statistics measured on random images (two training-mode passes of a batch of 4),
    as a trained network's match its activations. Random statistics would not: with untrained weights the
    activations drift from them layer by layer (depthwise convolutions shrink them by ~sqrt(channels)), and in
    mobile networks the output ended up depending on the input by 1e-6 of its size, below any tolerance."""
    torch = _torch()
    norms = [m for m in module.modules()
             if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not norms or not all(t.is_floating_point() for t in inputs):
        return
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the passes
    module.train()
    with torch.no_grad():
        for _ in range(2):
            module(*(torch.randn(4, *t.shape[1:]) for t in inputs))
    for m, momentum in zip(norms, momenta, strict=True):
        m.momentum = momentum


def build_module(name: str, size: str = "small", seed: int = 0) -> tuple[Any, tuple]:
    """(eval-mode torch module with seeded random weights, example inputs). Integer inputs are token ids
    within the vocabulary; attention masks are all ones."""
    model = entry(name)
    if size not in SIZES:
        raise UnknownNameError("corpus size", size, SIZES)
    torch = _torch()
    torch.manual_seed(seed)
    module, inputs = model.build(size)
    if model.family in ("cnn", "mobile-cnn", "segmentation"):
        _fan_in_init(module)
    _randomise(module)
    _calibrate_batch_norms(module, inputs)
    return module.eval(), inputs


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporters' progress lines (printed), deprecation notices and onnxscript's optimizer logs."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "onnxscript", "torch.export", "torch._dynamo")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def export_onnx(name: str, path: str | Path, size: str = "small", opset: int = 18, exporter: str = "dynamo",
                seed: int = 0) -> Path:
    """Write the corpus model as ONNX with ``torch.onnx.export``: ``dynamo`` (torch.export + onnxscript,
    opset 18 and up) or ``torchscript`` (the legacy exporter, e.g. opset 13 or 17). Inputs are named as in
    ``CORPUS[name].input_names``."""
    if exporter not in EXPORTERS:
        raise UnknownNameError("ONNX exporter", exporter, EXPORTERS)
    module, inputs = build_module(name, size, seed)
    torch = _torch()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    options: dict[str, Any] = {"input_names": list(entry(name).input_names), "opset_version": opset}
    if exporter == "dynamo":  # one self-contained file unless the weights pass protobuf's 2 GiB limit
        n_bytes = sum(p.numel() * p.element_size() for p in module.parameters())
        options.update(dynamo=True, verbose=False, optimize=True, report=False, external_data=n_bytes > 2**30 * 1.8)
    else:
        options.update(dynamo=False)
    try:
        with _quiet(), torch.no_grad():
            torch.onnx.export(module, inputs, str(path), **options)
    except Exception as err:
        from autosched.graph.passes import failure_reason

        raise UserInputError(f"corpus model {name!r} ({size}) cannot be exported to ONNX by the {exporter} "
                             f"exporter at opset {opset}: {failure_reason(err)}") from err
    return path
