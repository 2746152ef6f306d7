"""The fixture backends' wheels, built once per session, and environments with them installed."""

import pytest

from tests.support.fixture_backends import backend_env_factory, build_wheels


@pytest.fixture(scope="session")
def wheels(torch_layer):
    return build_wheels(torch_layer)


@pytest.fixture(scope="session")
def backend_env(make_env, wheels):
    """backend_env(*fixture_names) -> Env with those fixture backends installed."""
    return backend_env_factory(make_env, wheels)
