"""SaslHandshake and SaslAuthenticate: SASL authentication on SASL_PLAINTEXT/SASL_SSL
listeners, as Kafka's SaslServerAuthenticator runs it.

A connection on a SASL listener carries a ``SaslSession``. Until it authenticates, the server
lets through only ApiVersions, SaslHandshake and SaslAuthenticate and closes the connection on
anything else (``SaslSession.allows``). A failed authentication is answered with
SASL_AUTHENTICATION_FAILED and a message that names no user or secret, then the connection is
closed. With ``connections.max.reauth.ms`` (KIP-368) the session has a lifetime, told to the
client in SaslAuthenticate v1+; once it has passed, only a re-authentication is accepted.

A v0 SaslHandshake means the client sends the SASL tokens next as bare length-prefixed frames
without Kafka headers (``raw_token_pending``); the server loop hands those to ``raw_step``.
The session itself is security/authenticator.py's.
"""

from minibroker.apis import CloseConnection, RequestContext, Role, api
from minibroker.protocol import sasl
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authenticator import SaslSession


def raw_step(session: SaslSession, token: bytes, connection) -> bytes:
    """A bare token after a v0 SaslHandshake; failures close the connection, as Kafka
    does (v0 has no way to carry an error)."""
    try:
        reply, user = session.step(token)
    except sasl.SaslAuthenticationError as error:
        raise CloseConnection(f"SASL authentication failed: {error}") from None
    if user is not None:
        session.finish(user, connection)
    return reply


def _handshake_error(request, error: Error) -> dict:
    return {"error_code": error, "mechanisms": ()}


# Not held until ready: every connection to a SASL listener authenticates first, the
# controller's and the brokers' own included.
@api(
    ApiKey.SASL_HANDSHAKE,
    versions=(0, 1),
    roles=Role.BOTH,
    held_until_ready=False,
    error_response=_handshake_error,
)
async def handle_handshake(ctx: RequestContext, request) -> dict:
    session: SaslSession | None = ctx.connection.sasl
    mechanisms = list(session.security.mechanisms) if session is not None else []
    if session is None:
        return {"error_code": Error.ILLEGAL_SASL_STATE, "mechanisms": mechanisms}
    if session.authenticated and session.mechanism is None and not session.may_reauthenticate():
        # No re-authentication on this listener, or another within a second (Kafka's rules).
        return {"error_code": Error.ILLEGAL_SASL_STATE, "mechanisms": mechanisms}
    mechanism = request.mechanism
    if mechanism not in mechanisms:
        session.failed = True  # the client cannot go on; Kafka closes the connection
        return {"error_code": Error.UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechanisms}
    session.begin(mechanism)
    session.raw_token_pending = ctx.version == 0
    return {"error_code": Error.NONE, "mechanisms": mechanisms}


def _authenticate_error(request, error: Error) -> dict:
    return {"error_code": error, "auth_bytes": b"", "session_lifetime": 0}


@api(
    ApiKey.SASL_AUTHENTICATE,
    versions=(0, 2),
    roles=Role.BOTH,
    held_until_ready=False,
    error_response=_authenticate_error,
)
async def handle_authenticate(ctx: RequestContext, request) -> dict:
    session: SaslSession | None = ctx.connection.sasl
    if session is None or session.mechanism is None:
        if session is not None:
            session.failed = True
        return {
            "error_code": Error.ILLEGAL_SASL_STATE,
            "error_message": "Unexpected SaslAuthenticate request: no SaslHandshake before it",
            "auth_bytes": b"",
            "session_lifetime": 0,
        }
    try:
        reply, user = session.step(bytes(request.auth_bytes))
        if user is not None:
            session.finish(user, ctx.connection)
    except sasl.SaslAuthenticationError as error:
        session.failed = True
        return {
            "error_code": Error.SASL_AUTHENTICATION_FAILED,
            "error_message": str(error),
            "auth_bytes": b"",
            "session_lifetime": 0,
        }
    lifetime = session.security.max_reauth_ms if user is not None else 0
    return {
        "error_code": Error.NONE,
        "error_message": None,
        "auth_bytes": reply,
        "session_lifetime": lifetime,
    }
