"""The libraries the model corpus takes its architectures from, each imported the way the corpus needs it (an
absent one is a ``UserInputError`` naming the extra to install)."""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

from autosched.errors import UnknownNameError, UserInputError

log = logging.getLogger("autosched.corpus")

# --- optional libraries ----------------------------------------------------------------------------------
def _torch() -> Any:
    try:
        import torch
    except ImportError as err:
        raise UserInputError("the model corpus needs PyTorch: pip install 'autosched[torch,corpus]'") from err
    return torch


_torchvision_placeholders: Any = None  # the torch.library.Library holding torchvision's placeholder schemas


def _torchvision() -> Any:
    """Import torchvision. A torchvision wheel built for another torch variant (the CUDA torchvision next to
    the CPU torch) fails on import with "operator torchvision::nms does not exist": its C extension does not
    load, and registering the fake implementations of its detection operators needs their schemas. The
    classification and segmentation models are pure Python and never call those operators, so each missing
    ``torchvision::<op>`` schema is defined (a placeholder signature) and the import retried. timm and
    transformers import torchvision too (where it is installed), so they must come after this."""
    if "torchvision" in sys.modules and hasattr(sys.modules["torchvision"], "models"):
        return sys.modules["torchvision"]
    torch = _torch()
    global _torchvision_placeholders
    for _ in range(32):
        try:
            import torchvision

            return torchvision
        except ImportError as err:
            raise UserInputError("this corpus model needs torchvision: pip install 'autosched[corpus]'") from err
        except RuntimeError as err:
            missing = re.search(r"operator torchvision::(\w+) does not exist", str(err))
            if missing is None:
                raise
            if _torchvision_placeholders is None:  # kept for the process: a collected Library drops its schemas
                _torchvision_placeholders = torch.library.Library("torchvision", "FRAGMENT")
            _torchvision_placeholders.define(f"{missing.group(1)}(Tensor x) -> Tensor")
            log.debug("torchvision: defined a placeholder schema for torchvision::%s", missing.group(1))
            for key in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
                del sys.modules[key]
    raise UserInputError("torchvision cannot be imported next to this PyTorch build: install matching versions")


def _timm() -> Any:
    _torchvision()
    try:
        import timm
    except ImportError as err:
        raise UserInputError("this corpus model needs timm: pip install 'autosched[corpus]'") from err
    return timm


def _transformers() -> Any:
    import importlib.util

    if importlib.util.find_spec("torchvision") is not None:  # transformers imports it if it is installed
        _torchvision()
    try:
        import transformers
    except ImportError as err:
        raise UserInputError("this corpus model needs transformers: pip install 'autosched[corpus]'") from err
    transformers.logging.set_verbosity_error()
    return transformers


def _diffusers() -> Any:
    import importlib.util

    if importlib.util.find_spec("torchvision") is not None:  # diffusers imports transformers, which imports it
        _torchvision()
    try:
        import diffusers
    except ImportError as err:
        raise UserInputError("this corpus model needs diffusers: pip install 'autosched[corpus]'") from err
    diffusers.logging.set_verbosity_error()
    return diffusers


def _smp() -> Any:
    _timm()  # segmentation_models_pytorch imports timm and torchvision
    try:
        import segmentation_models_pytorch
    except ImportError as err:
        raise UserInputError("this corpus model needs segmentation-models-pytorch: pip install 'autosched[corpus]'"
                             ) from err
    return segmentation_models_pytorch


def import_library(library: str) -> Any:
    """The library a corpus entry comes from (``CorpusEntry.library``), imported the way the corpus needs it;
    ``UserInputError`` when it is not installed."""
    loaders = {"torch": _torch, "torchvision": _torchvision, "timm": _timm, "transformers": _transformers,
               "diffusers": _diffusers, "segmentation_models_pytorch": _smp}
    if library not in loaders:
        raise UnknownNameError("corpus library", library, list(loaders))
    return loaders[library]()
