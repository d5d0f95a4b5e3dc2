"""SCRAM credentials decided on the ControllerState: AlterUserScramCredentials and
DescribeUserScramCredentials with Kafka's rules, and what the controller pushes to brokers.

Admin clients send a salted password (they salt and hash the password themselves, with
the iterations they chose); the controller keeps only the salt, the stored key, the server key
and the iterations, as Kafka's ScramControlManager does, and never the salted password, from
which a client key could be derived.

The push to brokers reuses AlterUserScramCredentials on the controller's channel (as config
pushes reuse AlterConfigs): an upsertion's ``salted_password`` field carries the stored key
followed by the server key (both the mechanism's hash size), and a deletion named "" first in
the list means "this is every credential: forget the others" (sent when a broker registers).
"""

import base64

from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
)

from minibroker.controller.state import ControllerState, ScramRecord
from minibroker.protocol import sasl
from minibroker.protocol.errors import Error

MECHANISM_BY_TYPE = {code: name for name, code in sasl.SCRAM_MECHANISM_TYPES.items()}
# The deletion that opens a full snapshot push (see the module docstring).
SNAPSHOT_MARKER = {"name": "", "mechanism": 0}


def _result(user: str, error: Error = Error.NONE, message: str | None = None) -> dict[str, object]:
    return {"user": user, "error_code": error, "error_message": message}


def _upsertion_problem(upsertion: ScramCredentialUpsertion) -> tuple[Error, str] | None:
    mechanism = MECHANISM_BY_TYPE.get(upsertion.mechanism)
    if mechanism is None:
        return Error.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if upsertion.iterations < sasl.SCRAM_MIN_ITERATIONS:
        return Error.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if upsertion.iterations > sasl.SCRAM_MAX_ITERATIONS:
        return Error.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if not upsertion.salt or not upsertion.salted_password:
        return Error.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


def alter(
    state: ControllerState, request: AlterUserScramCredentialsRequest
) -> tuple[list[dict[str, object]], set[tuple[str, str]]]:
    """Apply the deletions and upsertions; return one result per user and the (user,
    mechanism) pairs that changed. A user's alterations are applied all or none."""
    by_user: dict[str, list[ScramCredentialDeletion | ScramCredentialUpsertion]] = {}
    for deletion in request.deletions:
        by_user.setdefault(deletion.name, []).append(deletion)
    for upsertion in request.upsertions:
        by_user.setdefault(upsertion.name, []).append(upsertion)
    results = []
    changed: set[tuple[str, str]] = set()
    for user, alterations in by_user.items():
        mechanisms = [alteration.mechanism for alteration in alterations]
        if not user:
            results.append(
                _result(user, Error.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            )
            continue
        if len(set(mechanisms)) != len(mechanisms):
            results.append(
                _result(
                    user,
                    Error.DUPLICATE_RESOURCE,
                    "A user credential cannot be altered twice in the same request",
                )
            )
            continue
        problem = None
        for alteration in alterations:
            mechanism = MECHANISM_BY_TYPE.get(alteration.mechanism)
            if isinstance(alteration, ScramCredentialUpsertion):
                problem = _upsertion_problem(alteration)
            elif mechanism is None:
                problem = (Error.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
            elif mechanism not in state.scram_credentials.get(user, {}):
                problem = (
                    Error.RESOURCE_NOT_FOUND,
                    "Attempt to delete a user credential that does not exist",
                )
            if problem:
                break
        if problem:
            results.append(_result(user, *problem))
            continue
        for alteration in alterations:
            mechanism = MECHANISM_BY_TYPE[alteration.mechanism]
            if isinstance(alteration, ScramCredentialDeletion):
                credentials = state.scram_credentials[user]
                del credentials[mechanism]
                if not credentials:
                    del state.scram_credentials[user]
            else:
                credential = sasl.credential_from_salted_password(
                    mechanism,
                    bytes(alteration.salted_password),
                    bytes(alteration.salt),
                    alteration.iterations,
                )
                state.scram_credentials.setdefault(user, {})[mechanism] = _to_record(credential)
            changed.add((user, mechanism))
        results.append(_result(user))
    return results, changed


def describe(
    state: ControllerState, request: DescribeUserScramCredentialsRequest
) -> dict[str, object]:
    """Each asked user's mechanisms and iterations (every user when none is named)."""
    names = [user.name for user in request.users] if request.users else None
    if names is None:
        names = sorted(state.scram_credentials)
    results = []
    for name in dict.fromkeys(names):
        if names.count(name) > 1:
            message = (
                "Cannot describe SCRAM credentials for the same user twice in a single request"
            )
            results.append(
                {**_result(name, Error.DUPLICATE_RESOURCE, message), "credential_infos": ()}
            )
            continue
        credentials = state.scram_credentials.get(name)
        if not credentials:
            message = "Attempt to describe nonexistent user credentials"
            results.append(
                {**_result(name, Error.RESOURCE_NOT_FOUND, message), "credential_infos": ()}
            )
            continue
        infos = [
            {"mechanism": sasl.SCRAM_MECHANISM_TYPES[mechanism], "iterations": record["iterations"]}
            for mechanism, record in sorted(credentials.items())
        ]
        results.append({**_result(name), "credential_infos": infos})
    return {"error_code": Error.NONE, "error_message": None, "results": results}


def _to_record(credential: sasl.ScramCredential) -> ScramRecord:
    def encode(value: bytes) -> str:
        return base64.b64encode(value).decode()

    return {
        "salt": encode(credential.salt),
        "stored_key": encode(credential.stored_key),
        "server_key": encode(credential.server_key),
        "iterations": credential.iterations,
    }


def from_record(record: ScramRecord) -> sasl.ScramCredential:
    return sasl.ScramCredential(
        salt=base64.b64decode(record["salt"]),
        stored_key=base64.b64decode(record["stored_key"]),
        server_key=base64.b64decode(record["server_key"]),
        iterations=record["iterations"],
    )


def push_request_data(
    state: ControllerState, pairs: set[tuple[str, str]] | None
) -> dict[str, object]:
    """The AlterUserScramCredentials body that tells a broker about ``pairs`` (their current
    credential, or their deletion); every credential, as a snapshot, when ``pairs`` is None."""
    deletions = []
    upsertions = []
    if pairs is None:
        deletions.append(SNAPSHOT_MARKER)
        pairs = {
            (user, mechanism)
            for user, credentials in state.scram_credentials.items()
            for mechanism in credentials
        }
    for user, mechanism in sorted(pairs):
        record = state.scram_credentials.get(user, {}).get(mechanism)
        code = sasl.SCRAM_MECHANISM_TYPES[mechanism]
        if record is None:
            deletions.append({"name": user, "mechanism": code})
            continue
        credential = from_record(record)
        upsertions.append(
            {
                "name": user,
                "mechanism": code,
                "iterations": credential.iterations,
                "salt": credential.salt,
                "salted_password": credential.stored_key + credential.server_key,
            }
        )
    return {"deletions": deletions, "upsertions": upsertions}
