"""Fixtures of the integration tests that need more than tests/conftest.py's brokers."""

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from tests.integration.authz import (
    NODE_ACLS,
    SecuredBroker,
    check_left_clean,
    start_secured_broker,
)


@pytest.fixture(scope="module")
def secured_brokers(tmp_path_factory) -> Iterator:
    """``secured_brokers(overrides, node_acls)``: the module's broker for that configuration
    (tests/integration/authz.py's SecuredBroker), started by the first test that asks (seeded
    with ``node_acls`` only); each must stop cleanly at the end of the module."""
    started: dict[tuple, SecuredBroker] = {}

    def broker_for(overrides=None, node_acls=NODE_ACLS) -> SecuredBroker:
        key = (tuple(sorted((overrides or {}).items())), tuple(node_acls))
        if key not in started:
            directory = tmp_path_factory.mktemp("authorization")
            started[key] = start_secured_broker(directory, overrides, node_acls)
            started[key].wait_ready()
        return started[key]

    try:
        yield broker_for
    finally:
        unclean = []
        for broker in started.values():
            broker.admin = None  # (its client gone before the broker, not retrying it)
            process = broker.process
            exit_code = process.stop() if process.running else process.exit_code
            if exit_code != 0:
                unclean.append(f"exited with {exit_code}:\n{process.log_tail()}")
        assert not unclean, "unclean broker shutdown\n" + "\n".join(unclean)


@pytest.fixture
def secured(secured_brokers) -> Iterator:
    """``secured(acls, overrides, node_acls)``: the module's broker with StandardAuthorizer
    for that configuration, holding ``acls`` (besides the node's own, NODE_ACLS unless told
    otherwise) until the test ends, then deleted, whatever the test did with them, and the
    broker checked to hold only the node's ACLs again; ``secured.grant(broker, acls)`` and
    ``secured.revoke(broker, acls)`` change them midway. A test that creates ACLs with its
    own client deletes them (test_acl_apis.py's fixture does it for its tests)."""
    granted: list[tuple[SecuredBroker, list]] = []

    class Secured:
        def __call__(self, acls=(), overrides=None, node_acls=NODE_ACLS) -> SecuredBroker:
            broker = secured_brokers(overrides, node_acls)
            self.grant(broker, acls)
            return broker

        def grant(self, broker: SecuredBroker, acls) -> None:
            granted.append((broker, list(acls)))
            broker.grant(acls)

        def revoke(self, broker: SecuredBroker, acls) -> None:
            broker.revoke(acls)

    yield Secured()
    with ExitStack() as stack:
        # Last: every broker the test used holds only its node's ACLs again.
        for broker in {id(broker): broker for broker, _ in granted}.values():
            stack.callback(check_left_clean, broker)
        for broker, acls in granted:
            stack.callback(broker.revoke, acls)
