"""Drafters propose; the verifier decides. Importing this package imports every module in it, so
each drafter registers itself: a new drafter is one new file here."""

import importlib
import pkgutil

from ..core.drafter import Draft, Drafter, NoOptions
from .registry import (
    DRAFTERS,
    create_drafter,
    drafter_class,
    make_options,
    option,
    option_fields,
    register,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
del _module

__all__ = ["DRAFTERS", "Draft", "Drafter", "NoOptions", "create_drafter", "drafter_class",
           "make_options", "option", "option_fields", "register"]
