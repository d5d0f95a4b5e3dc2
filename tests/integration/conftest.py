"""Fixtures of the integration tests that need more than tests/conftest.py's brokers."""

import pytest

from tests.integration.authz import NODE_ACLS, STANDARD_AUTHORIZER, seeded_with


@pytest.fixture
def secured(broker_factory):
    """Start a broker with StandardAuthorizer and ``acls`` seeded (plus NODE_ACLS, the
    broker's own connections' CLUSTER_ACTION): ``secured(acls, overrides)``."""

    def start(acls=(), overrides=None, node_acls=NODE_ACLS):
        properties = {"authorizer.class.name": STANDARD_AUTHORIZER, **(overrides or {})}
        return broker_factory(properties, prepare=seeded_with([*node_acls, *acls]))

    return start
