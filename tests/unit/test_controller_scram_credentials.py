"""SCRAM credentials on the controller's state: Kafka's rules for AlterUserScramCredentials
and DescribeUserScramCredentials, what is kept (no password), and the store round trip."""

import json

from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kio.static.primitive import i8, i32

from minibroker.controller import scram_credentials as scram
from minibroker.controller.state import ControllerState
from minibroker.controller.store import ControllerStore
from minibroker.protocol import sasl
from minibroker.protocol.errors import Error

SHA512 = i8(2)


def upsertion(name: str, iterations: int = 4096, mechanism=SHA512, password="pw"):
    salt = b"salt-" + name.encode()
    mechanism_name = scram.MECHANISM_BY_TYPE.get(mechanism, sasl.SCRAM_SHA_512)
    salted = sasl.salted_password(mechanism_name, password, salt, max(iterations, 1))
    return ScramCredentialUpsertion(
        name=name,
        mechanism=mechanism,
        iterations=i32(iterations),
        salt=salt,
        salted_password=salted,
    )


def alter(state, upsertions=(), deletions=()):
    request = AlterUserScramCredentialsRequest(
        deletions=tuple(deletions), upsertions=tuple(upsertions)
    )
    results, changed = scram.alter(state, request)
    return {r["user"]: (r["error_code"], r["error_message"]) for r in results}, changed


def test_an_upserted_user_authenticates_and_no_salted_password_is_kept():
    state = ControllerState()
    results, changed = alter(state, [upsertion("alice", password="secret")])
    assert results == {"alice": (Error.NONE, None)}
    assert changed == {("alice", sasl.SCRAM_SHA_512)}
    record = state.scram_credentials["alice"][sasl.SCRAM_SHA_512]
    assert set(record) == {"salt", "stored_key", "server_key", "iterations"}
    credential = scram.from_record(record)
    server = sasl.ScramServer(sasl.SCRAM_SHA_512, {"alice": credential}.get)
    client = sasl.ScramClient(sasl.SCRAM_SHA_512, "alice", "secret")
    client.verify(server.step(client.final(server.step(client.first()))))


def test_kafkas_refusals_per_user():
    state = ControllerState()
    results, changed = alter(
        state,
        [
            upsertion("few", iterations=1000),
            upsertion("many", iterations=20000),
            upsertion("", iterations=4096),
            upsertion("odd", mechanism=i8(7)),
            upsertion("twice"),
            upsertion("ok"),
        ],
        [
            ScramCredentialDeletion(name="twice", mechanism=SHA512),
            ScramCredentialDeletion(name="ghost", mechanism=SHA512),
        ],
    )
    assert results == {
        "few": (Error.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        "many": (Error.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        "": (Error.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        "odd": (Error.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "twice": (
            Error.DUPLICATE_RESOURCE,
            "A user credential cannot be altered twice in the same request",
        ),
        "ghost": (
            Error.RESOURCE_NOT_FOUND,
            "Attempt to delete a user credential that does not exist",
        ),
        "ok": (Error.NONE, None),
    }
    assert set(state.scram_credentials) == {"ok"} and changed == {("ok", sasl.SCRAM_SHA_512)}


def test_describe_lists_mechanisms_and_iterations_and_refuses_unknown_or_repeated_users():
    state = ControllerState()
    alter(state, [upsertion("alice", iterations=8192), upsertion("bob")])
    everyone = scram.describe(state, DescribeUserScramCredentialsRequest(users=None))
    assert [(r["user"], r["credential_infos"]) for r in everyone["results"]] == [
        ("alice", [{"mechanism": 2, "iterations": 8192}]),
        ("bob", [{"mechanism": 2, "iterations": 4096}]),
    ]
    asked = scram.describe(
        state,
        DescribeUserScramCredentialsRequest(
            users=(UserName(name="ghost"), UserName(name="bob"), UserName(name="bob"))
        ),
    )
    assert [(r["user"], r["error_code"]) for r in asked["results"]] == [
        ("ghost", Error.RESOURCE_NOT_FOUND),
        ("bob", Error.DUPLICATE_RESOURCE),
    ]


def test_the_push_carries_keys_and_deletions_and_a_snapshot_marker():
    state = ControllerState()
    alter(state, [upsertion("alice")])
    snapshot = scram.push_request_data(state, None)
    assert snapshot["deletions"] == [scram.SNAPSHOT_MARKER]
    [pushed] = snapshot["upsertions"]
    credential = scram.from_record(state.scram_credentials["alice"][sasl.SCRAM_SHA_512])
    assert pushed["salted_password"] == credential.stored_key + credential.server_key
    alter(state, deletions=[ScramCredentialDeletion(name="alice", mechanism=SHA512)])
    change = scram.push_request_data(state, {("alice", sasl.SCRAM_SHA_512)})
    assert change == {"deletions": [{"name": "alice", "mechanism": 2}], "upsertions": []}


def test_credentials_survive_a_controller_restart(tmp_path):
    store = ControllerStore(tmp_path / "state.json")
    state = store.load()
    alter(state, [upsertion("alice", password="secret")])
    store.save(state)
    assert "secret" not in (tmp_path / "state.json").read_text()
    reloaded = ControllerStore(tmp_path / "state.json").load()
    assert reloaded.scram_credentials == json.loads(json.dumps(state.scram_credentials))
