"""Corpus builders for the families of issue 61, each from its own library's config: a speech encoder with
1,500-frame attention (Whisper's), a windowed vision transformer (Swin), a diffusion UNet with self- and
cross-attention (Stable Diffusion's UNet2DConditionModel) and a segmentation UNet on a ResNet encoder
(segmentation-models-pytorch). ``build(size) -> (module, example inputs)`` as in ``catalog``; ``full`` is the
real architecture at its real input size, ``small`` the same code narrower, shallower and on smaller inputs."""

from __future__ import annotations

from typing import Any

from autosched.corpus.libraries import _diffusers, _smp, _timm, _torch, _transformers


def whisper_encoder(size: str) -> tuple[Any, tuple]:
    """transformers' WhisperEncoder as whisper-tiny configures it (d_model 384, 6 heads, 4 layers, 80 mel bins):
    30 s of audio is 3,000 mel frames, which its two convolutions (the second of stride 2) turn into 1,500
    positions, each attending to all 1,500. Small: 2 layers of width 64 over 200 frames (100 positions)."""
    tf = _transformers()
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    if size == "full":
        config = tf.WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536,
                                  num_mel_bins=80, max_source_positions=1500)
    else:
        config = tf.WhisperConfig(d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128,
                                  num_mel_bins=80, max_source_positions=100)
    frames = 2 * config.max_source_positions  # the encoder accepts exactly this many frames
    return WhisperEncoder(config), (_torch().randn(1, config.num_mel_bins, frames),)


def swin(size: str) -> tuple[Any, tuple]:
    """timm's swin_tiny_patch4_window7_224: at 224 x 224 its stages are 56, 28, 14 and 7 patches wide, cut into
    7 x 7 windows of 49 tokens (shifted every second block, with the attention mask and relative position bias
    that come with it). Small: 64 x 64 images, width 32, the first two stages (16 and 8 patches wide, a plain and
    a shifted block each, the patch merging between them) in windows of 4 x 4, and 10 classes: 49 fusion groups."""
    timm = _timm()
    if size == "full":
        return timm.create_model("swin_tiny_patch4_window7_224", pretrained=False), (_torch().randn(1, 3, 224, 224),)
    model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=64, window_size=4,
                              embed_dim=32, depths=(2, 2), num_heads=(1, 2), num_classes=10)
    return model, (_torch().randn(1, 3, 64, 64),)


def diffusion_unet(size: str) -> tuple[Any, tuple]:
    """diffusers' UNet2DConditionModel, Stable Diffusion's latent UNet at a smaller width: GroupNorm + SiLU
    ResNet blocks with the timestep embedding (sinusoidal projection, MLP) added in, transformer blocks
    (self-attention, cross-attention to the text states, GEGLU feed-forward), strided-convolution downsampling
    and nearest upsampling. Full: 32 x 32 latents of 4 channels, widths 128/256/512, 77 text states of 768.
    Small: 16 x 16 latents, widths 32/64, one ResNet block a stage, 8 text states of 32, and no middle block (its
    ResNet and transformer blocks are of the kinds the other stages have: 81 fusion groups instead of 109)."""
    diffusers, torch = _diffusers(), _torch()
    if size == "full":
        widths, res, text, dim, heads = (128, 256, 512), 32, 77, 768, 8
        down = ("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D")
        up = ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D")
        layout = dict(layers_per_block=2, norm_num_groups=32)
    else:
        widths, res, text, dim, heads = (32, 64), 16, 8, 32, 4
        down, up = ("CrossAttnDownBlock2D", "DownBlock2D"), ("UpBlock2D", "CrossAttnUpBlock2D")
        layout = dict(layers_per_block=1, norm_num_groups=8, mid_block_type=None)
    model = diffusers.UNet2DConditionModel(
        sample_size=res, in_channels=4, out_channels=4, block_out_channels=widths, down_block_types=down,
        up_block_types=up, cross_attention_dim=dim, attention_head_dim=heads, **layout)
    inputs = (torch.randn(1, 4, res, res), torch.tensor([500]), torch.randn(1, text, dim))
    return model, inputs


def segmentation_unet(size: str) -> tuple[Any, tuple]:
    """segmentation-models-pytorch's Unet on a ResNet-34 encoder (random weights: ``encoder_weights=None``)
    at 128 x 128, 21 classes: 24 M parameters, 98 MB, more than a CPU's L3 cache. Small: a ResNet-18
    encoder of depth 3 (its stem and first two stages; the module keeps the unused stages' weights, the export
    leaves them out), decoder widths 32/16/8, 64 x 64, 4 classes."""
    smp, torch = _smp(), _torch()
    if size == "full":
        return smp.Unet("resnet34", encoder_weights=None, classes=21), (torch.randn(1, 3, 128, 128),)
    model = smp.Unet("resnet18", encoder_weights=None, encoder_depth=3, decoder_channels=(32, 16, 8), classes=4)
    return model, (torch.randn(1, 3, 64, 64),)
