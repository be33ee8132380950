"""The public API is exactly ``parl.__all__``: every name there imports and is a real object."""

from __future__ import annotations

import importlib

import pytest

import parl


def test_all_is_a_list_of_unique_strings() -> None:
    assert isinstance(parl.__all__, list)
    assert all(isinstance(name, str) for name in parl.__all__)
    assert len(parl.__all__) == len(set(parl.__all__))


@pytest.mark.parametrize("name", sorted(parl.__all__))
def test_every_public_name_is_importable_and_not_none(name: str) -> None:
    module = importlib.import_module("parl")
    assert getattr(module, name, None) is not None
    namespace: dict[str, object] = {}
    exec(f"from parl import {name}", namespace)
    assert namespace[name] is getattr(parl, name)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from parl import *", namespace)
    exported = {k for k in namespace if k != "__builtins__"}
    assert exported == set(parl.__all__)


def test_layers_module_exports_what_it_lists() -> None:
    for name in parl.layers.__all__:
        assert getattr(parl.layers, name, None) is not None, name


def test_version_is_a_string() -> None:
    assert isinstance(parl.__version__, str) and parl.__version__.count(".") == 2
